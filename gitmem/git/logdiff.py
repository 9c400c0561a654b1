"""The tree differ of bulk catch-ups: :class:`StreamDiffer` answers a long walk's commits from
``git log --raw`` run in a subprocess beside it (git's C tree diff on the other core while Python
derives and inserts), and asks :class:`gitmem.git.treediff.TreeDiffer` (in process) for the
first commits of every walk and for whatever the stream cannot answer exactly.

The stream's answer for a commit is used only when it is the same as the in-process differ's
by construction: the record names the very commit the walk is at, with the same first parent
(git and libgit2 agree on the history: no replace refs, no grafts), the commit is not a merge,
every entry is an add, modify, delete or type change (``--no-renames``), and no two entries
are of the same kind (so the order of the changes, which git and the Python differ may give
differently around a name that is both a file and a directory, means nothing to the
derivation: it separates the kinds and pairs one delete with one add). Otherwise that commit
goes to the in-process differ; a record out of step with the walk (merges ordered otherwise,
a git that failed) ends the stream, and the rest of the walk is in process.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections import deque
from collections.abc import Iterator
from itertools import islice

import pygit2

from gitmem import config
from gitmem.git.treedelta import Change
from gitmem.git.treediff import TreeDiffer

#: Commits a walk derives in process before it starts the stream: below this, spawning git costs
#: more than it saves (a few milliseconds against ~100 us per commit of the Python differ).
STREAM_AFTER = 256
_CHUNK = 1 << 18
# Records parsed ahead of the walk; the blobs they add are read in one request to a
# ``git cat-file --batch-command`` beside it (its answer comes back while Python works on the
# batch before). At most ``_AHEAD_BYTES`` of contents are kept; larger ones are read in process.
_AHEAD = 512
_AHEAD_BYTES = 32 << 20
_GITLINK = 0o160000
_STATUSES = frozenset((b"A", b"D", b"M", b"T"))  # T: a type change (file, symlink, gitlink)
_BITS = {"added": 1, "deleted": 2, "modified": 4}

_Record = tuple[bytes, list[bytes]]  # "<commit> <parents>", then (header, path) pairs flattened


def _records(proc: subprocess.Popen[bytes]) -> Iterator[_Record]:
    """The commits of ``git log -z --raw --format='%H %P'`` as they arrive: each commit's line,
    and its entries' raw headers and paths, alternating. A record is given once the next one
    began (so it is whole); the last one only when git exited with success."""
    assert proc.stdout is not None
    read = proc.stdout.read
    rest = b""
    head: bytes | None = None
    entries: list[bytes] = []
    want_path = False
    while True:
        chunk = read(_CHUNK)
        if not chunk:
            break
        tokens = (rest + chunk).split(b"\0")
        rest = tokens.pop()
        for tok in tokens:
            if want_path:
                entries.append(tok)
                want_path = False
            elif tok[:1] == b":" or tok[:2] == b"\n:":  # an entry's header (the first after a newline)
                entries.append(tok[1:] if tok[0] == 58 else tok[2:])
                want_path = True
            elif tok:
                if head is not None:
                    yield head, entries
                head, entries = tok, []
    if proc.wait() == 0 and head is not None and not want_path and not rest:
        yield head, entries


class StreamDiffer(TreeDiffer):
    """A :class:`TreeDiffer` for the walk of ``tip`` not reachable from ``hide`` (oldest first),
    whose commits past the first :data:`STREAM_AFTER` are answered by ``git log --raw`` when
    its answer is exact (see the module). :meth:`close` ends the subprocess."""

    def __init__(
        self,
        repo: pygit2.Repository,
        tip: pygit2.Oid,
        hide: pygit2.Oid | None,
        after: int | None = None,
    ) -> None:
        super().__init__(repo)
        self._tip, self._hide = tip, hide
        self._after = STREAM_AFTER if after is None else after
        self._seen = 0
        self._last: pygit2.Oid | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._records: Iterator[_Record] | None = None
        self._done = False  # the stream ended, failed or fell out of step: in process from here
        self._ahead: deque[tuple[bytes, list[Change] | None]] = deque()
        self._blobs: dict[str, bytes] = {}  # contents of the blobs the records ahead add
        self._cat: subprocess.Popen[bytes] | None = None
        self._cat_failed = False
        self.streamed = 0  # commits the stream answered (tests and benchmarks read it)

    def commit_changes(self, commit: pygit2.Commit) -> list[Change]:
        got = self._streamed(commit)
        if got is not None:
            return got
        return super().commit_changes(commit)

    def _streamed(self, commit: pygit2.Commit) -> list[Change] | None:
        self._seen += 1
        last, self._last = self._last, commit.id
        if self._done:
            return None
        if self._records is None:
            if self._seen <= self._after:
                return None
            self._start(last)
            if self._records is None:
                return None
        if not self._ahead and not self._fill():
            self.close()  # git is done (or failed): the rest of the walk is in process
            return None
        head, changes = self._ahead.popleft()
        parents = commit.parent_ids
        want = str(commit.id).encode() + b" " + (str(parents[0]).encode() if parents else b"")
        if head != want and not (len(parents) > 1 and head.startswith(want + b" ")):
            # Out of step with the walk (around a merge, git may order the lines otherwise):
            # in process for another ``after`` commits, then a stream from there.
            self._stop()
            self._seen = 0
            return None
        if len(parents) > 1:
            return None  # a merge: its first-parent diff is the in-process differ's
        if changes is not None:
            self.streamed += 1
        return changes

    def prefetched(self, blob_hex: str) -> bytes | None:
        return self._blobs.get(blob_hex)

    def _fill(self) -> bool:
        """Parse the next records ahead and read the blobs they add; False: no record left."""
        assert self._records is not None
        try:
            batch = list(islice(self._records, _AHEAD))
        except (ValueError, OSError):
            return False
        if not batch:
            return False
        self._blobs.clear()  # every record before these was derived: their blobs were read
        ahead = [(head, _changes(entries)) for head, entries in batch]
        wanted = {str(c[3]) for _, changes in ahead if changes for c in changes if c[3] is not None}
        if wanted and not self._cat_failed:
            self._read_blobs(wanted)
        self._ahead.extend(ahead)
        return True

    def _read_blobs(self, wanted: set[str]) -> None:
        """The contents of ``wanted`` from ``git cat-file`` (each missing, odd or past the byte
        budget is left out: the walk reads it in process)."""
        if self._cat is None:
            try:
                self._cat = subprocess.Popen(
                    [
                        "git",
                        "--no-replace-objects",
                        f"--git-dir={self._repo.path}",
                        "cat-file",
                        "--batch-command",
                        "--buffer",
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    env=config.plain_git_env(),
                )
            except OSError:
                self._cat_failed = True
                return
        cat = self._cat
        assert cat.stdin is not None and cat.stdout is not None
        order = list(wanted)
        try:
            # Under 64 KiB of commands (512 * 49 bytes): the pipe takes them all at once.
            cat.stdin.write(b"".join(b"contents %s\n" % h.encode() for h in order) + b"flush\n")
            cat.stdin.flush()
            readline, read, kept = cat.stdout.readline, cat.stdout.read, 0
            for h in order:
                fields = readline().split()
                if len(fields) == 2 and fields[1] == b"missing":
                    continue
                if len(fields) != 3 or fields[0].decode() != h or fields[1] != b"blob":
                    raise ValueError(f"cat-file answered {fields!r} for {h}")
                size = int(fields[2])
                data = read(size + 1)
                if len(data) != size + 1 or data[-1:] != b"\n":
                    raise ValueError(f"cat-file cut {h} short")
                if kept + size <= _AHEAD_BYTES:
                    self._blobs[h] = data[:-1]
                    kept += size
        except (OSError, ValueError):
            self._cat_failed = True  # the walk reads the rest in process
            self._stop_cat()

    def _stop_cat(self) -> None:
        cat, self._cat = self._cat, None
        if cat is not None:
            with contextlib.suppress(OSError):
                cat.kill()
            for pipe in (cat.stdin, cat.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
            cat.wait()

    def _start(self, after: pygit2.Oid | None) -> None:
        cmd = [
            "git",
            "--no-replace-objects",
            f"--git-dir={self._repo.path}",
            "-c",
            "log.showSignature=false",
            "log",
            "-z",
            "--raw",
            "--no-abbrev",
            "--no-renames",
            "--no-relative",
            "--ignore-submodules=none",
            "--topo-order",
            "--reverse",
            "--format=%H %P",
            str(self._tip),
        ]
        if after is not None:
            cmd.append(f"^{after}")
        if self._hide is not None:
            cmd.append(f"^{self._hide}")
        cmd.append("--")
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=config.plain_git_env(),
            )
        except OSError:  # no git: the walk stays in process
            self._done = True
            return
        self._records = _records(self._proc)

    def close(self) -> None:
        """End the stream for good (the walk is over); idempotent."""
        self._done = True
        self._stop()
        self._stop_cat()
        self._blobs.clear()

    def _stop(self) -> None:
        self._records = None
        self._ahead.clear()
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.kill()
            if proc.stdout is not None:
                proc.stdout.close()
            proc.wait()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _changes(entries: list[bytes]) -> list[Change] | None:
    """A record's entries as :func:`gitmem.git.treedelta.changes_of` gives them, or None when
    the stream's answer may differ from the in-process one (see the module)."""
    out: list[Change] = []
    seen = 0
    oid = pygit2.Oid
    for i in range(0, len(entries), 2):
        fields = entries[i].split(b" ")
        if len(fields) != 5 or fields[4] not in _STATUSES or i + 1 >= len(entries):
            return None
        old_mode, new_mode, old_hex, new_hex, _status = fields
        try:
            om, nm = int(old_mode, 8), int(new_mode, 8)
            o = oid(hex=old_hex.decode()) if om not in (0, _GITLINK) else None
            n = oid(hex=new_hex.decode()) if nm not in (0, _GITLINK) else None
        except ValueError:
            return None
        if o is None and n is None:
            continue
        kind = "modified" if o is not None and n is not None else "added" if n is not None else "deleted"
        bit = _BITS[kind]
        if seen & bit:
            return None  # two of a kind: their order matters, and may differ
        seen |= bit
        try:
            path = "/" + entries[i + 1].decode("utf-8")
        except UnicodeDecodeError:
            return None
        out.append((kind, path, o, n))
    return out
