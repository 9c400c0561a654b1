"""Group commit across processes: the writes of processes waiting for a scope's lock, by its holder.

A process whose group leader finds the scope lock (gitmem.engine.writer.scope_lock) held by
another process writes its group's writes, in serializable form (gitmem.engine.planners.Spec),
to ``<git dir>/gitmem/queue/<scope>/<ulid>-<pid>.req`` (one JSON file, written to a temporary
name and renamed, 0600), each with a version id it minted, keeps the file open and waits. The
holder (the leader) takes the queued files of its scope into its own group (:meth:`Turn.gather`),
locking each (flock) until it has answered, checks each write again as untrusted input (its
arguments, the acl, review mode; limits from the store's settings), plans them with the others
and publishes them with the same flush and compare-and-swap. A committed write is answered by
the history itself; refusals and writes that changed nothing by ``<ulid>-<pid>.res``
(:meth:`Turn.answer`). A waiter wakes when the lock on its file is let go and looks its version
ids up (:meth:`Turn.collect`); one that no leader answered leads its own writes.

Crash safety: each queued write carries the version id its caller minted, and the commit carries
it in its Gitmem-Version trailer, so before planning a queued write the leader looks the id up in
the scope's history (the index caught up to the tip): a write an earlier leader published but did
not answer is answered from there, never committed twice. Files of writers that are gone (their
pid) or older than :data:`STALE_SECONDS` are removed. docs/durability.md, "Group commit"."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pygit2

from gitmem.config import Limits
from gitmem.engine.core import StoreCore
from gitmem.engine.planners import Spec, rebuild
from gitmem.engine.queuefiles import (
    alive,
    decode_args,
    encode_args,
    error_of,
    read_json,
    read_json_fd,
    result_of,
    ulid_ms,
    write_file,
)
from gitmem.engine.rows import VersionRow
from gitmem.engine.writer import Change, ScopeState, authorize, scope_lock, scope_lock_path, version_from_row
from gitmem.errors import ConflictError, ForbiddenError, GitmemError, InvalidInputError
from gitmem.git.locks import close_lock_fd, lock, lock_file, open_lock_fd, ordered, try_lock, wait_for_holder
from gitmem.ids import ULID_RE, is_id, new_id, new_ulid
from gitmem.model.versions import Version

QUEUE_DIR = "queue"
FORMAT = 1
STALE_SECONDS = 600.0  # a request or answer file this old is removed, whoever wrote it
MAX_TAKE = 256  # queued writes one leader takes at most (more wait for the next group)
WAIT_LIMIT = 1.0  # seconds a queued writer looks for a leader to take its file, then waits for the lock
_NAME = re.compile(rf"^({ULID_RE})-([0-9]{{1,10}})\.(req|res)$")
_TMP = re.compile(rf"^\.tmp-{ULID_RE}-([0-9]{{1,10}})\.(req|res)$")
_SIZE = re.compile(r"^\.size-[0-9]{1,4}$")
LINGER = 0.002  # seconds a leader waits for the processes of the last group to come back
POLL_FIRST, POLL_LAST = 0.0005, 0.004  # a queued writer's pauses between looks, growing
_ENTRY_KEYS = {"version", "op", "args", "actor", "session"}
_log = logging.getLogger("gitmem.write")
#: gitmem.engine.proposals.route: the owner of the proposal a write goes to, or None.
Route = Callable[[StoreCore, str, str | None, str | None], str | None]


class Request:
    """One caller's write waiting in a group commit (of this process, or queued by another)."""

    __slots__ = ("plan", "actor", "session", "limits", "spec", "version_id", "done", "result", "error")

    def __init__(
        self,
        plan: Callable[[ScopeState], Change | None],
        actor: str,
        session: str | None,
        limits: Limits,
        spec: Spec | None = None,
    ) -> None:
        self.plan = plan
        self.actor = actor
        self.session = session
        self.limits = limits
        self.spec = spec  # the write in serializable form, when it has one
        self.version_id: str | None = None  # minted when the write is queued for another process
        self.done = False
        self.result: Version | None = None
        self.error: BaseException | None = None

    def finish(self, result: Version | None, error: BaseException | None = None) -> None:
        self.result, self.error, self.done = result, error, True


def take_turn(
    store: StoreCore, scope: str, requests: Sequence[Request], held: contextlib.ExitStack, route: Route
) -> Turn:
    """Take the scope lock for ``requests`` (held until ``held`` closes). When another process holds
    it and every request has a serializable form, they are queued for it first; those its leader
    answered are finished on return, and the lock is then not taken (the others are this process's
    to commit, under the lock)."""
    # The request files this leader takes stay locked until after the scope lock is released:
    # the writers they wake find the scope lock free, or taken by the next leader.
    turn = Turn(store, scope, held.enter_context(contextlib.ExitStack()), route)
    if not (requests and all(r.spec is not None for r in requests)):
        held.enter_context(scope_lock(store, scope))
    else:
        held.enter_context(ordered("scope"))  # as scope_lock does (gitmem.git.locks.LOCK_ORDER)
        fd = held.enter_context(lock_file(scope_lock_path(store, scope)))
        if not try_lock(fd) and turn.wait_queued(requests, fd):
            return turn
    held.callback(turn.close)  # runs before the lock is released: no leader takes this file after
    turn.prepare()
    # With the lock, only the history answers: an answer file no leader was seen to write (a
    # leader wakes its writers by letting go of their files) may be planted, and this process
    # commits the writes not there itself (a write that changed nothing changes nothing again).
    turn.collect(answers=False)
    return turn


class Turn:
    """One process's turn at a scope's lock: its own queued file, and the files it took."""

    def __init__(self, store: StoreCore, scope: str, files: contextlib.ExitStack, route: Route) -> None:
        self.store = store
        self.route = route
        self.scope = scope
        self.files = files  # the open request files, closed after the scope lock is released
        self.dir = store.private_path(QUEUE_DIR, scope)
        self.prefix = f"{self.dir}{os.sep}"  # a file's path is prefix + name (no pathlib join a file)
        self.own: str | None = None  # stem of this process's request file
        self.own_fd: int | None = None  # and the file, open (its lock tells when it was answered)
        self.own_requests: list[Request] = []
        self.taken: dict[str, list[Request]] = {}  # request file name -> its writes, in order
        self.passed: set[str] = set()  # files looked at and left (answered, or dropped)
        self.mark: str | None = None  # the queue's ".size-N" file: the last group's size
        self.queue = False  # prepare() found a queue
        self.mark_time = 0.0
        self.lingered = False

    def wait_queued(self, requests: Sequence[Request], fd: int) -> bool:
        """The scope lock (``fd``) is taken: queue ``requests`` and wait. True when the leaders
        answered them all (the lock is not taken then); False once this process holds the lock.

        A leader that takes a request file holds an exclusive lock on it until it has answered:
        its writer waits on that lock (every writer of a group wakes when its leader answered,
        none waits for the scope lock for that), and while no leader holds it, looks again after
        a short, growing pause, taking the scope lock itself as soon as it is free."""
        self.enqueue(requests)
        if self.own_fd is not None:
            pause = POLL_FIRST
            deadline = time.monotonic() + WAIT_LIMIT
            while time.monotonic() < deadline:
                if wait_for_holder(self.own_fd):  # a leader took the file and let it go
                    if self.collect():
                        if all(r.done for r in self.own_requests):
                            self.close()
                            return True
                        break
                    continue  # that leader failed before it published: the next one takes it
                if try_lock(fd):
                    return False
                time.sleep(pause)
                pause = min(2 * pause, POLL_LAST)
        lock(fd)
        return False

    # ------------------------------------------------------------------ a waiting writer
    def enqueue(self, requests: Sequence[Request]) -> None:
        """Queue ``requests`` for the lock's holder (called while the lock is taken)."""
        stem = f"{new_ulid()}-{os.getpid()}"
        for r in requests:
            r.version_id = new_id("memver")
        writes = []
        for r in requests:
            assert r.spec is not None
            op, args = r.spec
            writes.append(
                {
                    "version": r.version_id,
                    "op": op,
                    "args": encode_args(args),
                    "actor": r.actor,
                    "session": r.session,
                }
            )
        body = {"format": FORMAT, "scope": self.scope, "writes": writes}
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not self._own_dir():
                raise OSError("the queue directory is not a directory of the store's own")
            fd = write_file(self.dir, f"{stem}.req", body, keep=True)
        except OSError as exc:  # no queue: this process waits and commits its writes itself
            _log.warning("could not queue writes in %s: %s", self.dir, exc)
            return
        assert fd is not None
        self.files.callback(os.close, fd)
        self.own, self.own_fd, self.own_requests = stem, fd, list(requests)

    def collect(self, *, answers: bool = True) -> bool:
        """Finish the queued writes a leader answered; whether one did. A committed write is
        looked up in the history (the index, which the leader recorded it in before it let go of
        the file: caught up to the tip, a write transaction, only when an id is missing), so no
        answer file can claim a version that is not there; only refusals and writes that changed
        nothing have an answer file, read only with ``answers`` (after a leader let go of it)."""
        if self.own is None:
            return False
        ids = [r.version_id for r in self.own_requests if r.version_id]
        rows = self._rows(ids)
        if len(rows) < len(ids):
            self.store.index.ensure(self.scope)
            rows = self._rows(ids)
        body = read_json(f"{self.prefix}{self.own}.res", 1 << 20) if answers else None
        results = body.get("results") if body is not None else None
        if not isinstance(results, list) or len(results) != len(self.own_requests):
            results = [None] * len(self.own_requests)
        answered = False
        for r, out in zip(self.own_requests, results, strict=True):
            row = rows.get(r.version_id or "")
            if row is not None and (row.scope, row.actor, row.session) == (self.scope, r.actor, r.session):
                r.finish(version_from_row(row))
            elif not isinstance(out, dict):
                continue  # not answered: this process commits it (checked against the history first)
            elif out.get("none") is True:
                r.finish(None)
            elif isinstance(out.get("error"), dict):
                r.finish(None, error_of(out["error"]))
            answered = True
        return answered or body is not None

    def close(self) -> None:
        """Remove this process's request and answer files (before the lock is released)."""
        if self.own is not None:
            for ext in ("req", "res"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{self.prefix}{self.own}.{ext}")

    # ------------------------------------------------------------------ the leader
    def gather(self, tip: pygit2.Oid | None, own: list[Request]) -> list[Request]:
        """The group to plan at ``tip``: the queued writes of other processes (in arrival order,
        each file's in its order), then ``own``. A queued write whose version id is already in the
        scope's history is finished from there; one that fails its checks is finished with its
        error. Called again on a retry: files queued meanwhile join."""
        self._scan()
        group = [r for reqs in self.taken.values() for r in reqs] + own
        queued = [r for r in group if not r.done and r.version_id is not None]
        if queued:
            self._answer_from_history(tip, queued)
        return group

    def answer(self) -> None:
        """After the publish: the answer file of each taken file with refusals or writes that changed
        nothing (a committed write is answered by the history); then the file goes (none re-takes it)."""
        for name, reqs in self.taken.items():
            if any(r.result is None for r in reqs):  # a committed write is answered by the history
                results = [result_of(r) for r in reqs]
                try:
                    respond(self.dir, name[: -len(".req")] + ".res", {"format": FORMAT, "results": results})
                except OSError as exc:  # its writer looks its writes up, and commits the others
                    _log.warning("could not answer %s: %s", name, exc)
                    continue
            with contextlib.suppress(OSError):
                os.unlink(self.prefix + name)
        if self.queue:
            self._mark(len(self.taken) + 1)
        self.taken.clear()

    def prepare(self) -> None:
        """With the lock, before planning: whether the scope has a queue, and its mark. A scope
        that never had a queue costs one look at a missing directory."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return
        if not self._own_dir():  # planted: a leader must not read or remove files elsewhere
            _log.warning("ignored the queue %s: not a directory of the store's own", self.dir)
            return
        marks = [n for n in names if _SIZE.match(n)]
        self.mark = marks[0] if marks else None
        if self.mark is not None:
            with contextlib.suppress(FileNotFoundError):
                self.mark_time = os.lstat(self.prefix + self.mark).st_mtime
        self.queue = True

    def _own_dir(self) -> bool:
        """Whether the queue directory and every directory between it and ``$GIT_DIR/gitmem`` is a
        real directory (no symlink: a leader removes stale files there)."""
        path = self.dir
        top = self.store.gitmem_dir
        while path != top:
            try:
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    return False
            except OSError:
                return False
            path = path.parent
        return True

    def _linger(self) -> None:
        """When the last group had writers of several processes, wait a moment for them to come
        back with their next writes (once, at the first look at the queue)."""
        self.lingered = True
        want = int(self.mark[len(".size-") :]) if self.mark else 1
        if want <= 1:
            return
        deadline = time.monotonic() + LINGER
        names = os.listdir(self.dir)
        while self._waiting(names) + 1 < want and time.monotonic() < deadline:
            time.sleep(LINGER / 10)
            names = os.listdir(self.dir)

    def _waiting(self, names: list[str]) -> int:
        """Request files queued since the last group was answered (its mark's time; the time is in
        each name's ULID), not this process's: the writers that came back."""
        since = int(self.mark_time * 1000)
        found = (_NAME.match(n) for n in names)
        return sum(
            1
            for m in found
            if m is not None
            and m.group(3) == "req"
            and f"{m.group(1)}-{m.group(2)}" != self.own
            and ulid_ms(m.group(1)) >= since
        )

    def _mark(self, size: int) -> None:
        """Leave the size of this group (in processes) and, in the mark's time, when it was
        answered, for the next leader's wait."""
        name = f".size-{size}" if size > 1 else None
        with contextlib.suppress(OSError):
            if name is not None:
                os.close(os.open(self.prefix + name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
                os.utime(self.prefix + name, follow_symlinks=False)
            if self.mark is not None and self.mark != name:
                os.unlink(self.prefix + self.mark)
        self.mark = name

    def _scan(self) -> None:
        if not self.queue:
            return  # no queue when the lock was taken (one made since is for the next leader)
        if not self.lingered:
            self._linger()
        names = sorted(os.listdir(self.dir))
        present = set(names)
        count = sum(len(v) for v in self.taken.values())
        for name in names:
            m = _NAME.match(name)
            if m is None:
                t = _TMP.match(name)
                if t is not None:
                    # A request being written, or an answer a leader was writing (its requester's
                    # pid in the name; only this leader writes answers now): stale once it is gone.
                    self._drop_if_stale(name, live=alive(int(t.group(1))))
                continue
            stem, pid, kind = m.group(1) + "-" + m.group(2), int(m.group(2)), m.group(3)
            if stem == self.own or name in self.taken or name in self.passed:
                continue
            live = alive(pid)
            if kind == "res" or f"{stem}.res" in present:  # an answer its writer has not read yet
                self._drop_if_stale(name, live)
                continue
            if not live or self._stale(name):
                # Its writer is gone (or waited so long that its pid may be another process's now):
                # never acknowledged, so it may go uncommitted; a writer still there commits it itself.
                self._drop(name)
                continue
            if count >= MAX_TAKE:
                break
            reqs = self._take(name)
            if reqs is not None:
                self.taken[name] = reqs
                count += len(reqs)

    def _take(self, name: str) -> list[Request] | None:
        """The writes of one request file, checked; None (and the file removed) when it is not one."""
        limits = self.store.settings.limits
        try:
            fd = open_lock_fd(self.prefix + name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            self.passed.add(name)  # its writer found its answer and removed it
            return None
        except OSError:
            fd = None  # a symlink, or not readable: not a request
        if fd is not None:
            if not _lock_taken(fd):  # its writer is looking at it: the next attempt takes it
                close_lock_fd(fd)
                return None
            self.files.callback(close_lock_fd, fd)  # the lock tells its writer when it is answered
        cap = MAX_TAKE * (2 * limits.max_memory_bytes + 65536)
        body = read_json_fd(fd, cap) if fd is not None else None
        writes = body.get("writes") if body is not None else None
        if (
            body is None
            or body.get("format") != FORMAT
            or body.get("scope") != self.scope
            or not isinstance(writes, list)
            or not 1 <= len(writes) <= MAX_TAKE
        ):
            _log.warning("removed a malformed queued write %s in %s", name, self.dir)
            self._drop(name)
            return None
        try:
            return [self._rebuild(entry) for entry in writes]
        except Exception:  # a check this file breaks in a way no check foresaw: not a request either
            _log.exception("removed a queued write %s in %s that could not be checked", name, self.dir)
            self._drop(name)
            return None

    def _rebuild(self, entry: object) -> Request:
        req = Request(_refused, "", None, self.store.settings.limits)
        try:
            if not isinstance(entry, dict) or set(entry) != _ENTRY_KEYS:
                raise InvalidInputError(f"a queued write has the keys {sorted(_ENTRY_KEYS)}")
            vid, actor, session = entry["version"], entry["actor"], entry["session"]
            if not isinstance(vid, str) or not is_id(vid, "memver"):
                raise InvalidInputError(f"invalid queued version id {vid!r}: expected memver_<ulid>")
            if not isinstance(actor, str) or not (session is None or isinstance(session, str)):
                raise InvalidInputError("a queued write's actor and session must be text")
            plan, erasing = rebuild(entry["op"], decode_args(entry["args"]))
            if self.route(self.store, self.scope, actor, session) is not None:
                raise ForbiddenError(f"{actor} writes to scope {self.scope!r} through review (a proposal)")
            actor, session, limits = authorize(self.store, self.scope, actor, session, erasing=erasing)
        except GitmemError as exc:
            req.finish(None, exc)
            return req
        req.plan, req.actor, req.session, req.limits, req.version_id = plan, actor, session, limits, vid
        return req

    def _answer_from_history(self, tip: pygit2.Oid | None, queued: list[Request]) -> None:
        self.store.index.ensure(self.scope, tip, known_tip=True)
        rows = self._rows([r.version_id for r in queued if r.version_id])
        seen: set[str] = set()
        for r in queued:
            vid = r.version_id
            assert vid is not None
            if vid in seen:
                r.finish(None, ConflictError(f"version id {vid} is queued twice"))
                continue
            seen.add(vid)
            row = rows.get(vid)
            if row is None:
                continue
            if row.scope != self.scope or row.actor != r.actor or row.session != r.session:
                r.finish(None, ConflictError(f"version id {vid} is another write's"))
            else:  # published by a leader that died before it answered
                r.finish(version_from_row(row))

    def _rows(self, ids: list[str]) -> dict[str, VersionRow]:
        """The index rows of the version ids ``ids`` (this scope's row first: forked scopes share
        versions); a row of another scope means the id is taken there."""
        out: dict[str, VersionRow] = {}
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            where = f"id IN ({','.join('?' * len(chunk))})"
            for row in self.store.index.version_rows(where, chunk):
                if row.id not in out or row.scope == self.scope:
                    out[row.id] = row
        return out

    def _drop(self, name: str) -> None:
        self.passed.add(name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.prefix + name)

    def _drop_if_stale(self, name: str, live: bool) -> None:
        self.passed.add(name)
        if not live or self._stale(name):
            self._drop(name)

    def _stale(self, name: str) -> bool:
        try:
            return time.time() - os.lstat(self.prefix + name).st_mtime > STALE_SECONDS
        except FileNotFoundError:
            return False


def _lock_taken(fd: int) -> bool:
    """Lock a taken request file; its writer only glances at the lock, so a few tries do."""
    for _ in range(3):
        if try_lock(fd):
            return True
        time.sleep(0)
    return False


def _refused(state: ScopeState) -> Change | None:
    raise AssertionError("a refused queued write is never planned")


def respond(directory: Path, name: str, body: dict[str, object]) -> None:
    """Write one answer file (a function of its own, so crash tests can stop at it)."""
    write_file(directory, name, body)
