"""Write a chain of version commits with ``git fast-import`` (an accepted exception to in-process git: docs/architecture.md#performance-targets).

libgit2 writes every object as its own loose file; for a batch of thousands of versions creating
those files is most of the cost. ``git fast-import`` writes the same commits into one pack. The
commits are byte-identical to what pygit2 would write (same trees, idents, times and messages); the
branch is not touched here: fast-import updates a private temporary ref, which is deleted, and the
caller publishes the chain with its own compare-and-swap.

The parent is looked for first: a history rewrite (a redaction) may have moved the branch off the
tip the caller planned on and purged it, and fast-import then dies on it ("Not a valid commit").
That is a lost race (:class:`NotWritten`), as the compare-and-swap of a chain written in-process
from that tip would be: the caller plans again on the new tip.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pygit2

from gitmem.errors import ConflictError, GitmemError
from gitmem.git.repo import COMMITTER, Repo
from gitmem.ids import new_ulid

TMP_REF_PREFIX = "refs/gitmem-tmp/"


class NotWritten(ConflictError):
    """Nothing was written: the chain's parent is no longer in the store (a history rewrite moved
    the branch off it and purged it), or the caller's ``check`` said no. A lost race: plan again."""


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


def write_commits(
    store: Repo,
    commits: Sequence[Pending],
    parent: pygit2.Oid | None,
    check: Callable[[], bool] | None = None,
) -> list[pygit2.Oid]:
    """Write ``commits`` as a chain on ``parent``; returns their ids in order. No branch moves.
    :class:`NotWritten` (nothing written) when ``check`` says no just before the pack is written,
    or when ``parent`` is not in the store, before fast-import runs or found gone when it fails."""
    if check is not None and not check():
        raise NotWritten("the chain's content was deny-listed since it was planned: not written")
    git_dir = os.path.abspath(store.repo.path)
    if parent is not None and not _present(git_dir, parent):
        raise NotWritten(f"the chain's parent {parent} is gone (a history rewrite purged it)")
    ref = TMP_REF_PREFIX + new_ulid()
    with tempfile.NamedTemporaryFile(prefix="gitmem-marks-", delete=False) as marks:
        marks_path = marks.name
    try:
        proc = subprocess.Popen(
            [
                "git",
                f"--git-dir={git_dir}",
                "fast-import",
                "--quiet",
                "--done",
                "--date-format=raw",
                f"--export-marks={marks_path}",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _out, err = proc.communicate(_stream(commits, ref, parent))
        if proc.returncode != 0:
            if parent is not None and not _present(git_dir, parent):
                # purged between the look above and fast-import's: the same lost race; the crash
                # report it dumped (it dies on its first commit's "from", before any object) goes
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(git_dir, f"fast_import_crash_{proc.pid}"))
                raise NotWritten(f"the chain's parent {parent} is gone (a history rewrite purged it)")
            raise GitmemError("git fast-import failed: " + err.decode("utf-8", "replace").strip()[:500])
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


def _present(git_dir: str, commit: pygit2.Oid) -> bool:
    """Whether ``commit`` and its tree (what fast-import loads for a "from") are in the store, looked
    up through a repository opened for it: one open before the purge may answer from its object
    database's view of the packs then (a purge replaces packs)."""
    fresh = pygit2.Repository(git_dir)
    try:
        obj = fresh.get(commit)
        return isinstance(obj, pygit2.Commit) and obj.tree_id in fresh
    finally:
        fresh.free()
