"""The intent log: each publish costs one filesystem flush (docs/durability.md).

A ref move is first appended to ``$GIT_DIR/gitmem/intent-log``; one ``syncfs`` makes the new objects
and that line durable; then the ref moves, in the page cache. After a reboot the first gitmem
process replays the lines whose ref still points at their old value and whose objects all read back
whole, so no acknowledged write is lost and no ref ever points at an object that was not flushed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import pygit2

from gitmem.errors import GitmemError
from gitmem.git.locks import close_lock_fd, open_lock_fd

if TYPE_CHECKING:
    import concurrent.futures


class Repo(Protocol):
    """What the intent log uses of a repository handle (gitmem.git.repo.Repo, which publishes and
    recovers through this module)."""

    @property
    def git_dir(self) -> str: ...

    @property
    def repo(self) -> pygit2.Repository: ...

    def ref_target(self, name: str) -> pygit2.Oid | None: ...

    def cas(self, name: str, old: pygit2.Oid | None, new: pygit2.Oid, message: str = "gitmem") -> bool: ...

    def sync_all(self) -> None: ...

    def sync_ref_file(self, name: str) -> None: ...

    def recover(self) -> int: ...


_LIBC: object = None


def _syncfs_call() -> object:
    """libc's syncfs (Linux), looked up once; False where there is none."""
    global _LIBC
    if _LIBC is None:
        try:
            import ctypes

            _LIBC = ctypes.CDLL(None, use_errno=True).syncfs
        except (OSError, AttributeError):
            _LIBC = False
    return _LIBC


def syncfs_fd(fd: int) -> None:
    """Flush the filesystem holding the open file ``fd`` (Linux syncfs; elsewhere a global sync)."""
    call = _syncfs_call()
    if call and call(fd) == 0:  # type: ignore[operator]
        return
    os.sync()


def syncfs(path: str) -> None:
    """Flush the filesystem holding ``path`` (Linux syncfs; elsewhere a global sync)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        os.sync()
        return
    try:
        syncfs_fd(fd)
    finally:
        os.close(fd)


BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
INTENT_LOG = "gitmem/intent-log"  # under $GIT_DIR (docs/durability.md)
INTENT_HEADER = "gitmem-intent-log 1 "
INTENT_ROTATE_BYTES = 256 * 1024


def boot_id() -> str | None:
    """This boot of the machine (Linux), or None where the kernel does not say.

    A process killed (SIGKILL, OOM) leaves the page cache to the kernel, which writes it out; only a
    reboot (power loss, kernel crash) can lose what was written but not flushed. Read once per
    process (a process never outlives its boot)."""
    global _BOOT
    if _BOOT is None:
        try:
            with open(BOOT_ID_FILE, encoding="ascii") as fh:
                _BOOT = fh.read().strip()
        except OSError:
            _BOOT = ""
    return _BOOT or None


_BOOT: str | None = None


def _entry_line(ref: str, old: pygit2.Oid | None, new: pygit2.Oid, objects: Sequence[pygit2.Oid]) -> bytes:
    body = " ".join([ref, str(old) if old is not None else "-", str(new), *(str(o) for o in objects)])
    digest = hashlib.sha256(body.encode()).hexdigest()[:16]
    return f"{body} {digest}\n".encode()


def _parse_entry(line: str) -> tuple[str, str | None, str, list[str]] | None:
    """(ref, old, new, objects) of one intent-log line, or None for a torn or forged line."""
    parts = line.split(" ")
    if len(parts) < 4:
        return None
    body, digest = " ".join(parts[:-1]), parts[-1]
    if hashlib.sha256(body.encode()).hexdigest()[:16] != digest:
        return None
    ref, old, new, *objects = parts[:-1]
    return ref, (None if old == "-" else old), new, objects


def log_path(repo: Repo) -> str:
    return os.path.join(repo.git_dir, INTENT_LOG)


def publish(
    repo: Repo,
    ref: str,
    old: pygit2.Oid | None,
    new: pygit2.Oid,
    objects: Sequence[pygit2.Oid],
    during_flush: Callable[[], object] | None = None,
    check: Callable[[], bool] | None = None,
) -> bool:
    """Move ``ref`` from ``old`` to ``new`` by compare-and-swap, durably, with one flush.

    ``objects`` are the new objects the commit (chain) needs: after a reboot the ref is only
    replayed onto ``new`` when each of them reads back whole. ``during_flush`` runs on the
    calling thread while the flush is under way (another thread waits on the device), before the
    ref moves; whatever it raises is raised after the flush, and the ref is then not moved.
    ``check`` runs first, holding the log shared as the move does (:func:`barrier`): False gives
    up (no line, no flush, the ref not moved), as a lost race. Returns False on a lost race."""
    boot = boot_id()
    if boot is None:  # no way to tell a reboot from a crash: flush objects, then the ref
        fd = _open_log(repo)  # held shared all the same (:func:`barrier`); no line is written
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            if check is not None and not check():
                return False
            _flush(lambda: repo.sync_all(), during_flush)
            note_flush(repo.git_dir)
            if not repo.cas(ref, old, new):
                return False
        finally:
            close_lock_fd(fd)
        repo.sync_ref_file(ref)
        return True
    repo.recover()
    fd = _open_log(repo)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # rotation, recovery and barriers take it exclusively
        if check is not None and not check():
            return False
        _write_header_if_empty(fd, boot)
        os.write(fd, _entry_line(ref, old, new, objects))
        _flush(lambda: syncfs_fd(fd), during_flush)  # the one flush: objects and the intent line
        note_flush(repo.git_dir)
        moved = repo.cas(ref, old, new)
        size = os.fstat(fd).st_size
    finally:
        close_lock_fd(fd)
    if not moved:
        # A racing recovery may have replayed this very line (it cannot, within one boot; kept
        # for safety): the ref at ``new`` means the write is published.
        return repo.ref_target(ref) == new
    if size > INTENT_ROTATE_BYTES:
        _rotate(repo, boot)
    return True


_FLUSHES: dict[int, int] = {}  # filesystem (st_dev) -> flushes this process made of it


def note_flush(path: str) -> None:
    """Count a flush of the filesystem holding ``path`` (see :func:`flushes`)."""
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return
    _FLUSHES[dev] = _FLUSHES.get(dev, 0) + 1


def flushes(path: str) -> int:
    """How many flushes this process has made of the filesystem holding ``path``: a file written
    before a count was taken is on disk once the count has grown (gitmem.git.consolidate deletes
    the packs a merge replaced only then)."""
    try:
        return _FLUSHES.get(os.stat(path).st_dev, 0)
    except OSError:
        return 0


def _flush(flush: Callable[[], None], during: Callable[[], object] | None) -> None:
    """``flush()``, with ``during()`` run on this thread meanwhile (the flush then runs on a
    flusher thread: syncfs waits on the device with the GIL released)."""
    if during is None:
        flush()
        return
    pending = _flusher().submit(flush)
    try:
        during()
    finally:
        pending.result()  # the flush has returned (or raised) before anything else happens


_FLUSHER: concurrent.futures.ThreadPoolExecutor | None = None
_FLUSHER_LOCK = threading.Lock()


def _flusher() -> concurrent.futures.ThreadPoolExecutor:
    global _FLUSHER
    if _FLUSHER is None:
        import concurrent.futures  # on the first overlapped flush: a CLI start never pays for it

        with _FLUSHER_LOCK:
            if _FLUSHER is None:
                # Several scopes publish at once in a server: their flushes wait side by side.
                _FLUSHER = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="gitmem-flush")
    return _FLUSHER


def _forget_flusher() -> None:
    """In a forked child the parent's flusher threads do not exist: start afresh."""
    global _FLUSHER, _FLUSHER_LOCK
    _FLUSHER, _FLUSHER_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_flusher)


def _open_log(repo: Repo) -> int:
    # Opened as a lock file (closed by close_lock_fd): a child forked while another thread
    # publishes must not keep the log locked (shared) after that thread let it go.
    path = log_path(repo)
    try:
        return open_lock_fd(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return open_lock_fd(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)


def _write_header_if_empty(fd: int, boot: str) -> None:
    if os.fstat(fd).st_size == 0:
        os.write(fd, f"{INTENT_HEADER}{boot}\n".encode())


def _rotate(repo: Repo, boot: str) -> None:
    """Empty a long intent log: one flush makes every ref move it records durable first."""
    fd = _open_log(repo)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # a writer is publishing; the next one rotates
        if os.fstat(fd).st_size <= INTENT_ROTATE_BYTES:
            return
        syncfs_fd(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{INTENT_HEADER}{boot}\n".encode())
    finally:
        close_lock_fd(fd)


def barrier(repo: Repo) -> None:
    """Wait for every publish in flight: each holds the log shared from its ``check`` to its ref
    move (:func:`publish`), so once this returns, every publish either moved its ref already or
    runs its check after this call. A purge calls it after it deny-listed its ids and before it
    reads the refs (docs/redaction.md#by-scope): no write that checked an older deny-list moves a
    ref after the purge looked. No log yet: no publish has opened it, so every one checks later."""
    if not os.path.exists(log_path(repo)):
        return
    fd = _open_log(repo)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    finally:
        close_lock_fd(fd)


def forget(repo: Repo) -> None:
    """Empty the intent log now (a redaction's purge: its lines name the retired objects).

    Waits for publishers in flight (they hold the log shared from their line to their ref move),
    then one flush makes every ref move the log records durable, so no line is needed any more."""
    path = log_path(repo)
    if not os.path.exists(path):
        return
    fd = _open_log(repo)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        syncfs_fd(fd)
        boot = boot_id()
        os.ftruncate(fd, 0)
        if boot is not None:
            os.write(fd, f"{INTENT_HEADER}{boot}\n".encode())
        syncfs_fd(fd)
    finally:
        close_lock_fd(fd)


def recover(repo: Repo) -> int:
    """After a reboot, replay the intent log; returns the refs moved.

    A store this process may not write (another user's, a read-only mount) is left as it is."""
    boot = boot_id()
    path = log_path(repo)
    if boot is None or not os.path.exists(path):
        return 0
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
    except OSError:
        return 0
    moved = 0
    try:
        with open(path, "rb") as fh:
            first = fh.readline().decode("ascii", "replace")
        if first == f"{INTENT_HEADER}{boot}\n":
            return 0
        fcntl.flock(fd, fcntl.LOCK_EX)
        with open(path, "rb") as fh:
            lines = fh.read().decode("ascii", "replace").split("\n")
        if lines and lines[0] == f"{INTENT_HEADER}{boot}":
            return 0  # another process recovered while this one waited
        for line in lines[1:]:
            entry = _parse_entry(line)
            if entry is None:
                _drop_torn(repo.git_dir, _named_objects(line))  # a torn line: never replayed
            elif _replay(repo, *entry):
                moved += 1
        syncfs_fd(fd)  # the replayed refs are durable before their lines go
        os.ftruncate(fd, 0)
        os.write(fd, f"{INTENT_HEADER}{boot}\n".encode())
    finally:
        os.close(fd)
    return moved


def _replay(repo: Repo, ref: str, old: str | None, new: str, objects: list[str]) -> bool:
    # Torn objects go first, whatever becomes of the line: a write the client retries after the
    # crash makes the same blobs and trees, and would find a torn file "written" and point at it.
    if _drop_torn(repo.git_dir, [new, *objects]):
        return False
    current = repo.ref_target(ref)
    if (str(current) if current is not None else None) != old:
        return False  # the ref moved on (or the move never happened and another one did)
    odb = repo.repo.odb
    for oid in [new, *objects]:
        try:
            odb.read(oid)  # decompresses the whole object (a packed one: packs are written flushed)
        except (KeyError, ValueError, pygit2.GitError):
            return False
    target = pygit2.Oid(hex=new)
    with contextlib.suppress(GitmemError):
        return repo.cas(ref, pygit2.Oid(hex=old) if old is not None else None, target, "gitmem recover")
    return False


def _drop_torn(git_dir: str, oids: Sequence[str]) -> bool:
    """Remove the loose files of ``oids`` that are not whole; True when there was one.

    A torn loose file (libgit2's read of one never returns: checked here) is no object at all; it
    goes, or a later write of the same content would find it "written" and point at it."""
    torn = [oid for oid in oids if not _loose_whole(git_dir, oid)]
    for oid in torn:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(git_dir, "objects", oid[:2], oid[2:]))
    return bool(torn)


def _named_objects(line: str) -> list[str]:
    """The object ids a torn (or forged) intent line still names whole: its new commit and new
    objects, as far as the line reached (its ref and old commit, and a last id cut short, are not
    objects of its write). A torn line is the last append before a power loss: the flush that
    covers its objects had not returned, so any of them may be torn on disk."""
    parts = line.split(" ")[2:]
    return [p for p in parts if len(p) == 40 and not p.strip("0123456789abcdef")]


def _loose_whole(git_dir: str, oid: str) -> bool:
    """Whether ``oid``'s loose file, if it has one, inflates and hashes to ``oid``: libgit2's
    ``odb.read`` of a truncated loose object loops for ever (pygit2 1.x), so a reboot's replay
    checks the file itself first. No loose file: True (the pack, if any, is read by libgit2)."""
    import zlib

    try:
        with open(os.path.join(git_dir, "objects", oid[:2], oid[2:]), "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return True  # (any other read error is raised: the log is then kept for the next open)
    inflate = zlib.decompressobj()
    try:
        data = inflate.decompress(raw)
    except zlib.error:
        return False
    if not inflate.eof:
        return False  # cut short
    return hashlib.sha1(data, usedforsecurity=False).hexdigest() == oid
