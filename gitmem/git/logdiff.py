"""The tree diffs of a long walk computed by ``git log --raw`` in a second process.

An index catch-up over thousands of commits (a rebuild, the first open of a clone, a big push)
needs every commit's diff against its first parent. libgit2 reads pack objects several times
slower than git does, so for long walks ``git log --raw`` computes the diffs on another core while
this process derives versions. The result is the real diff of the objects (never what a commit
message claims), checked commit by commit: a commit whose first parent git reports differently
(replace refs, grafts, a shallow boundary), whose changes git would order differently than
:class:`gitmem.git.treediff.TreeDiffer`, or that git did not report at all, is diffed by the
``TreeDiffer`` it extends, so both paths give the same changes in the same order.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pygit2

from gitmem.git.treediff import Change, Delta, TreeDiffer, _changes

# Inside a hook these point git at a quarantine or another repository; a catch-up there keeps to
# libgit2, which sees what the hook opened.
REPO_ENV = (
    "GIT_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_QUARANTINE_PATH",
    "GIT_INDEX_FILE",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_REPLACE_REF_BASE",
    "GIT_GRAFT_FILE",
    "GIT_SHALLOW_FILE",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
)
_KINDS = {b"A": "added", b"D": "deleted", b"M": "modified", b"T": "modified"}
_CHUNK = 1 << 20


def _key(d: Delta) -> tuple[tuple[bytes, int], ...]:
    """The order of :class:`TreeDiffer`: by path component; a directory's entries before a file
    of the same name (git sorts a directory as if its name ended in ``/``)."""
    parts = d.raw_path.split(b"/")
    return (*((p, 0) for p in parts[:-1]), (parts[-1], 1))


class LogDiffer(TreeDiffer):
    """A :class:`TreeDiffer` fed by one ``git log --raw`` over ``tip`` minus ``hide``."""

    def __init__(
        self, repo: pygit2.Repository, tip: pygit2.Oid, hide: pygit2.Oid | None, env: Mapping[str, str]
    ) -> None:
        super().__init__(repo)
        self._pending: dict[str, tuple[str, list[Delta]]] = {}
        self.from_git = 0  # commits whose changes came from git (the others: libgit2)
        cmd = [
            "git",
            "--no-replace-objects",
            f"--git-dir={Path(repo.path).resolve()}",
            "-c",
            "log.showSignature=false",
            "-c",
            "diff.renames=false",
            "log",
            "--topo-order",
            "--reverse",
            "--root",
            "--raw",
            "-z",
            "--no-abbrev",
            "--no-renames",
            "--no-textconv",
            "--no-ext-diff",
            "--diff-merges=first-parent",
            "--format=%H %P",
            str(tip),
            *([f"^{hide}"] if hide is not None else []),
            "--",
        ]
        self._proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env={k: v for k, v in env.items() if k not in REPO_ENV},
        )
        self._stream: Iterator[tuple[str, str, list[Delta]]] | None = self._records()

    @staticmethod
    def usable(env: Mapping[str, str]) -> bool:
        """Whether a ``git`` process can see what this process sees (not inside a hook)."""
        return shutil.which("git") is not None and not any(k in env for k in REPO_ENV)

    def close(self) -> None:
        self._stream = None
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def __enter__(self) -> LogDiffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def commit_changes(self, commit: pygit2.Commit) -> list[Change]:
        cid = str(commit.id)
        got = self._pending.pop(cid, None)
        while got is None and self._stream is not None:
            try:
                hexid, parent, deltas = next(self._stream)
            except (StopIteration, ValueError, KeyError, UnicodeDecodeError, OSError):
                self._stream = None  # the end, or output this parser does not know: libgit2 from here
                break
            if hexid == cid:
                got = (parent, deltas)
            else:
                self._pending[hexid] = (parent, deltas)
        if got is not None:
            parent, deltas = got
            first = str(commit.parent_ids[0]) if commit.parent_ids else ""
            if parent == first and (len(deltas) < 2 or sorted(deltas, key=_key) == deltas):
                self._commit_trees[commit.id] = commit.tree_id  # for a fallback on its child
                self.from_git += 1
                return _changes(deltas)
        return super().commit_changes(commit)

    def _records(self) -> Iterator[tuple[str, str, list[Delta]]]:
        """(commit, first parent, deltas) for each commit git prints."""
        out = self._proc.stdout
        assert out is not None
        head: tuple[str, str] | None = None
        deltas: list[Delta] = []
        raw: bytes | None = None  # a raw line waiting for its path
        rest = b""
        while True:
            chunk = out.read(_CHUNK)
            if not chunk:
                break
            tokens = (rest + chunk).split(b"\0")
            rest = tokens.pop()
            for tok in tokens:
                if raw is not None:
                    deltas.append(_delta(raw, tok))
                    raw = None
                    continue
                stripped = tok.lstrip(b"\n")
                if stripped.startswith(b":"):
                    raw = stripped
                    continue
                if head is not None:
                    yield head[0], head[1], deltas
                ids = stripped.decode("ascii").split(" ")
                head, deltas = (ids[0], ids[1] if len(ids) > 1 else ""), []
        if head is not None and raw is None and not rest:
            yield head[0], head[1], deltas
        self._proc.wait()


def _delta(raw: bytes, path: bytes) -> Delta:
    """One ``:<old mode> <new mode> <old id> <new id> <status>`` line and its path."""
    old_mode, new_mode, old_id, new_id, status = raw[1:].split(b" ")
    kind = _KINDS[status[:1]]
    return Delta(
        kind,
        path,
        pygit2.Oid(hex=old_id.decode()) if kind != "added" else None,
        pygit2.Oid(hex=new_id.decode()) if kind != "deleted" else None,
        int(old_mode, 8),
        int(new_mode, 8),
    )
