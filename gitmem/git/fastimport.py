"""Write a chain of version commits with ``git fast-import`` (an accepted exception to in-process git: docs/architecture.md#performance-targets).

libgit2 writes every object as its own loose file; for a batch of thousands of versions creating
those files is most of the cost. ``git fast-import`` writes the same commits into one pack. The
commits are byte-identical to what pygit2 would write (same trees, idents, times and messages); the
branch is not touched here: fast-import updates a private temporary ref, which is deleted, and the
caller publishes the chain with its own compare-and-swap.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

import pygit2

from gitmem.errors import GitmemError
from gitmem.git.repo import COMMITTER, Repo
from gitmem.ids import new_ulid

TMP_REF_PREFIX = "refs/gitmem-tmp/"


@dataclass(frozen=True)
class Pending:
    """One commit to write: the files it sets (bytes) or removes (None), and its message."""

    message: str
    author: str
    when: int
    files: Sequence[tuple[str, bytes | None]]  # tree paths (no leading '/')


def _quote(path: str) -> bytes:
    # C-style quoting is always accepted; memory paths hold no control characters (paths.py).
    return b'"' + path.replace("\\", "\\\\").replace('"', '\\"').encode("utf-8") + b'"'


def _stream(commits: Sequence[Pending], ref: str, parent: pygit2.Oid | None) -> bytes:
    out = bytearray()
    committer = f"{COMMITTER[0]} <{COMMITTER[1]}>"
    for n, c in enumerate(commits, 1):
        msg = c.message.encode("utf-8")
        out += f"commit {ref}\nmark :{n}\n".encode()
        out += f"author {c.author} <{c.author}> {c.when} +0000\n".encode()
        out += f"committer {committer} {c.when} +0000\n".encode()
        out += b"data %d\n%s\n" % (len(msg), msg)
        if n == 1 and parent is not None:
            out += f"from {parent}\n".encode()
        for path, data in c.files:
            if data is None:
                out += b"D " + _quote(path) + b"\n"
            else:
                out += b"M 100644 inline " + _quote(path) + b"\ndata %d\n" % len(data) + data + b"\n"
        out += b"\n"
    out += b"done\n"
    return bytes(out)


def write_commits(store: Repo, commits: Sequence[Pending], parent: pygit2.Oid | None) -> list[pygit2.Oid]:
    """Write ``commits`` as a chain on ``parent``; returns their ids in order. No branch moves."""
    ref = TMP_REF_PREFIX + new_ulid()
    git_dir = os.path.abspath(store.repo.path)
    with tempfile.NamedTemporaryFile(prefix="gitmem-marks-", delete=False) as marks:
        marks_path = marks.name
    try:
        proc = subprocess.run(
            [
                "git",
                f"--git-dir={git_dir}",
                "fast-import",
                "--quiet",
                "--done",
                "--date-format=raw",
                f"--export-marks={marks_path}",
            ],
            input=_stream(commits, ref, parent),
            capture_output=True,
            check=False,
        )
        if proc.returncode != 0:
            raise GitmemError(
                "git fast-import failed: " + proc.stderr.decode("utf-8", "replace").strip()[:500]
            )
        marks_map: dict[int, str] = {}
        with open(marks_path, encoding="ascii") as fh:
            for line in fh:
                mark, sha = line.split()
                marks_map[int(mark[1:])] = sha
    finally:
        os.unlink(marks_path)
        with contextlib.suppress(KeyError, pygit2.GitError):
            store.repo.references.delete(ref)
    return [pygit2.Oid(hex=marks_map[n]) for n in range(1, len(commits) + 1)]
