"""History rewrites as transactions: store lock, journal, branch swap, recovery (docs/architecture.md#the-audit-ledger).

A history rewrite (redaction in :mod:`gitmem.audit.redact`, compaction in :mod:`gitmem.audit.retention`) runs in
steps, under the exclusive store lock ``$GIT_DIR/gitmem/lock`` (fcntl):

1. plan: the new commits and trees are written into a new pack (nothing refers to them yet);
2. journal: ``$GIT_DIR/gitmem/journal.json`` records the plan (raw ids: it is server-side only);
3. swap: holding ``refs/heads/<scope>.lock``, commits a writer added since the plan are rewritten
   too, the lock file is renamed over the ref; writers' compare-and-swap fails and they retry;
4. deny-list, ledger entry, derived index (each idempotent);
5. purge (:func:`gitmem.git.rewrite.purge`): reflogs expired, the loose copies of the retired objects
   deleted, each pack holding one copied without them, then plain git must not list any of them
   (``git cat-file --batch-all-objects``);
6. a redaction's scrub of the records kept beside history (proposals', dreams':
   :func:`gitmem.audit.record_scrub.scrub_redaction`, idempotent), from what the journal carries;
7. the journal is removed.

A process killed anywhere leaves the store before (journal, branch not moved: rolled back) or after
(branch moved: steps 4-7 are completed) the rewrite, by :func:`recover`, which ``verify`` and
``open_store`` run. Unreachable objects are deleted by id, never by ``git prune --expire=now``:
that would also delete the fresh objects of a concurrent writer whose branch update is in flight.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2

from gitmem import config, events
from gitmem.audit import purge_order
from gitmem.audit.record_scrub import scrub_journaled
from gitmem.engine import ledger, receipts
from gitmem.engine.core import StoreCore
from gitmem.engine.opening import open_core
from gitmem.errors import ConflictError, ForbiddenError, IntegrityError
from gitmem.git.locks import check_order, close_lock_fd, open_lock_fd, ordered, owning, owns
from gitmem.git.purge import purge, reachable_retired
from gitmem.git.reflocks import break_if_stale, hold, rewriting
from gitmem.git.repoinit import write_atomic

JOURNAL_FILE = "journal.json"
LOCK_FILE = "lock"
FAULT_ENV = "GITMEM_FAULT"  # test hook: the name of a step at which the process SIGKILLs itself
_log = logging.getLogger("gitmem.lock")


@dataclass
class Rewrite:
    """A planned history rewrite of one scope; also the journal's content."""

    op: str  # redaction | compaction
    id: str
    scope: str
    actor: str
    reason: str
    at: int
    old_tip: str
    new_tip: str = ""
    commit_map: dict[str, str] = field(default_factory=dict)
    blob_map: dict[str, list[Any]] = field(default_factory=dict)  # old blob -> [new blob, sha256, size]
    retired_trees: list[str] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)
    ledger: dict[str, Any] = field(default_factory=dict)
    # Every scope the rewrite moves: scope -> [old tip, new tip] (one redaction covers every scope
    # whose history holds the content); empty means just ``scope``: ``old_tip`` -> ``new_tip``.
    tips: dict[str, list[str]] = field(default_factory=dict)
    # Every ref's target right after the swap: the purge walks only what refs added since.
    baseline: list[str] = field(default_factory=list)
    # Paths changed too (a pattern redaction matched a path): the index re-derives the scopes.
    rederive: bool = False
    # Step 6 (the records' scrub) needs a pattern redaction's regex: the erased text itself (the
    # journal is 0600, removed at the end). ``scrub`` is False in an older gitmem's journal.
    pattern: str | None = None
    scrub: bool = False

    def scope_tips(self) -> dict[str, list[str]]:
        return dict(self.tips) if self.tips else {self.scope: [self.old_tip, self.new_tip]}

    @property
    def retired(self) -> list[str]:
        """Objects that must be gone after the purge: redacted blobs, retired commits and trees."""
        return [*self.blob_map, *self.commit_map, *self.retired_trees]


# ---------------------------------------------------------------------- lock, journal, faults
@contextmanager
def store_lock(store: StoreCore, *, blocking: bool = True) -> Iterator[bool]:
    """The exclusive store lock; yields False (not held) when ``blocking`` is off and it is busy.
    In the engine's lock order (gitmem.git.locks.LOCK_ORDER) when it is waited for; a thread that
    holds it already holds it on (a second flock, of a second descriptor, would wait for itself)."""
    path = store.gitmem_dir / LOCK_FILE
    if owns(path):
        yield True
        return
    if blocking:
        check_order("store")
    store.gitmem_dir.mkdir(parents=True, exist_ok=True)
    fd = open_lock_fd(path)  # a child forked meanwhile does not keep it
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not blocking:
                yield False
                return
            _log.info("waiting for the store lock %s", store.gitmem_dir / LOCK_FILE)
            fcntl.flock(fd, fcntl.LOCK_EX)
        # rewriting: no other thread breaks this rewrite's ref locks
        with ordered("store", wait=False), owning(path), rewriting(store.git_dir):
            yield True
    finally:
        close_lock_fd(fd)


def fault(step: str) -> None:
    """Crash tests: die here, like a power cut, when ``$GITMEM_FAULT`` names this step."""
    if config.env(FAULT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def _journal_path(store: StoreCore) -> Path:
    return store.gitmem_dir / JOURNAL_FILE


def _write_journal(store: StoreCore, rw: Rewrite) -> None:
    """The plan, 0600 and durably (a redaction's holds its pattern: the erased text)."""
    write_atomic(_journal_path(store), json.dumps(vars(rw)).encode())


def _read_journal(store: StoreCore) -> Rewrite | None:
    try:
        data = json.loads(_journal_path(store).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError:
        # A torn journal was never complete, so the branch never moved: nothing to finish.
        _journal_path(store).unlink()
        return None
    return Rewrite(**data)


def recover(store: StoreCore, *, blocking: bool = False) -> str | None:
    """Finish or roll back an interrupted rewrite; returns "completed", "rolled back" or None.

    A rewrite of several scopes swaps their branches one after another: when at least one moved,
    the others still at their old tip are moved too (the plan is complete in the journal) and the
    rewrite is completed; when none moved, it is rolled back."""
    if store.is_clone or not _journal_path(store).exists():
        return None
    with store_lock(store, blocking=blocking) as held:
        done = recover_held(store) if held else None  # not held: a live process is rewriting now
    if done == "completed":
        after_rewrite(store)
    return done


def recover_held(store: StoreCore) -> str | None:
    """:func:`recover` by a caller holding the store lock (a rewrite), who runs after_rewrite."""
    rw = _read_journal(store)
    if rw is None:
        return None
    moved, unmoved = [], []
    for scope, (old, new) in rw.scope_tips().items():
        _clear_stale_lock(store, scope)
        tip = store.tip(scope)
        if old == new:
            continue
        if tip is not None and store.is_ancestor(pygit2.Oid(hex=new), tip):
            moved.append(scope)
        else:
            unmoved.append((scope, old, new))
    if not moved and unmoved:
        _journal_path(store).unlink()
        return "rolled back"
    for scope, old, new in unmoved:
        tip = store.tip(scope)
        if tip is not None and str(tip) == old:
            store.cas_ref(scope, tip, pygit2.Oid(hex=new), f"gitmem {rw.op} {rw.id} (recovered)")
            store.sync_ref(scope)
    if not rw.baseline:
        rw.baseline = _ref_targets(store)
    finish(store, rw, recovering=True)
    return "completed"


def _ref_targets(store: StoreCore) -> list[str]:
    targets = (store.ref_target(name) for name in list(store.repo.references))
    return sorted({str(t) for t in targets if t is not None})


def run_rewrite(store: StoreCore, scope: str, build: Callable[[pygit2.Oid], Rewrite]) -> Rewrite:
    """:func:`run_rewrite_scopes` for one scope."""
    return run_rewrite_scopes(store, [scope], lambda tips: build(tips[scope]))


def run_rewrite_scopes(
    store: StoreCore, scopes: list[str], build: Callable[[dict[str, pygit2.Oid]], Rewrite]
) -> Rewrite:
    """Steps 1-6 under the store lock; ``build(tips)`` plans and writes the new commits of every
    scope in ``scopes`` (its ``tips`` says where each scope goes).

    The swap holds each branch's own lock file (``refs/heads/<scope>.lock``, as git does; taken in
    sorted order), so a writer's compare-and-swap fails meanwhile and it retries after the swap, on
    the new history. Commits a writer added while the plan was made are rewritten under those locks
    (``build`` keeps its memo, so only they cost anything): the rewrite cannot be starved and no
    write is lost. The pre-receive hook waits for the store lock (and recovers a journal first), so
    a push is checked against the deny-list the rewrite leaves."""
    order = sorted(set(scopes))
    with store_lock(store):
        recover_held(store)  # another rewrite killed past its journal (the lock is ours already)
        tips = {s: store.require_scope(s) for s in order}
        rw = build(tips)
        refuse_other_refs(store, rw)
        store.sync_all()
        fault("objects")
        _write_journal(store, rw)
        try:
            with contextlib.ExitStack() as stack:
                locks = {s: stack.enter_context(_ref_lock(store, s)) for s in order}
                current = {s: store.require_scope(s) for s in order}
                if current != tips:
                    rw = build(current)
                    refuse_other_refs(store, rw)
                    store.sync_all()
                    _write_journal(store, rw)
                receipts.carry(store, rw.commit_map)  # before the branch moves (docs/identity.md)
                fault("journal")
                moves = rw.scope_tips()
                for i, s in enumerate(order):
                    _publish(locks[s], moves[s][1])
                    if i == 0:
                        fault("first-ref")
        except BaseException:
            if not any(store.tip(s) != tips.get(s) and store.tip(s) is not None for s in order):
                _journal_path(store).unlink(missing_ok=True)  # no branch moved
            raise
        for s in order:
            store.sync_ref(s)
        rw.baseline = _ref_targets(store)
        _write_journal(store, rw)
        fault("ref")
        finish(store, rw)
    after_rewrite(store)
    return rw


def after_rewrite(store: StoreCore) -> None:
    """Run the :data:`gitmem.events.AFTER_REWRITE` hooks (the push of the rewrite to the store's
    read replicas, gitmem.push.replica); a failing one is logged, never raised."""
    for hook in events.AFTER_REWRITE:
        try:
            hook(store)
        except Exception:
            _log.warning("after-rewrite hook %r failed", hook, exc_info=True)


def refuse_other_refs(store: StoreCore, rw: Rewrite) -> None:
    """Refuse (before anything moves) when a ref other than the rewritten scopes' branches still
    reaches the history being retired (a tag, a ref outside refs/heads): purging would break it."""
    moving = {f"refs/heads/{s}" for s in rw.scope_tips()}
    retired = set(rw.commit_map)
    if not retired:
        return
    firsts = [c for c in retired if not any(str(p) in retired for p in store.commit(c).parent_ids)]
    repo = store.repo
    for name in list(repo.references):
        if name in moving or name == ledger.LEDGER_REF or name.startswith("refs/gitmem-tmp/"):
            continue
        try:
            target = repo.references[name].peel(pygit2.Commit).id
        except (pygit2.GitError, ValueError, KeyError, pygit2.InvalidSpecError):
            continue
        if any(store.is_ancestor(pygit2.Oid(hex=first), target) for first in firsts):
            raise ForbiddenError(
                f"{name} still reaches the history of scope {rw.scope!r} that this {rw.op} would retire; "
                "delete or move that ref first (nothing was changed)"
            )


@contextmanager
def _ref_lock(store: StoreCore, scope: str) -> Iterator[tuple[int, Path]]:
    """Hold ``refs/heads/<scope>.lock`` (waiting out a writer that holds it for its update)."""
    path = store.path / "refs" / "heads" / f"{scope}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(2000):
        try:
            fd = open_lock_fd(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            if break_if_stale(store.path, f"refs/heads/{scope}"):  # a killed writer's (we rewrite)
                continue
            time.sleep(0.001 * min(attempt + 1, 10))
            continue
        # flocked while held, so a breaker never takes it from a rewrite stalled past the stale age
        if hold(fd):
            break
        _drop_own(fd, path)  # a breaker is looking at it this instant: give it up, take it again
    else:
        raise ConflictError(f"{path} stays locked; if no git process is running, remove it")
    try:
        os.write(fd, LOCK_MARK)
        yield fd, path
    finally:
        _drop_own(fd, path)


def _drop_own(fd: int, path: Path) -> None:
    """Close the lock ``fd`` and remove ``path`` only if it is still that file: once _publish
    renamed it over the ref, the file at this path (if any) is a writer's that took the ref after,
    and removing it would let two writers win."""
    mine = os.fstat(fd)
    close_lock_fd(fd)
    with contextlib.suppress(FileNotFoundError):
        there = os.lstat(path)
        if (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino):
            path.unlink()


LOCK_MARK = b"gitmem-rewrite\n"


def _publish(lock: tuple[int, Path], new_tip: str) -> None:
    """Write the new tip into the held lock file and rename it over the ref (git's protocol)."""
    fd, path = lock
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, new_tip.encode() + b"\n")
    os.fsync(fd)
    os.rename(path, path.with_suffix(""))


def _clear_stale_lock(store: StoreCore, scope: str) -> None:
    """A rewrite killed while holding the branch lock left it behind: remove it (recovery holds
    the store lock, so no rewrite is running; a writer's own lock never carries the mark)."""
    path = store.path / "refs" / "heads" / f"{scope}.lock"
    try:
        data = path.read_bytes()
        if data == LOCK_MARK or (data == b"" and time.time() - path.stat().st_mtime > 5):
            path.unlink()
    except FileNotFoundError:
        pass


def finish(store: StoreCore, rw: Rewrite, *, recovering: bool = False) -> None:
    """Steps 4-7; every one may run twice (recovery after a crash)."""
    # A redaction's blobs are refused in the scopes it rewrote (docs/redaction.md), not elsewhere
    # (its writers learn nothing); writes of them there are ordered against this purge (purge_order).
    blobs = list(rw.blob_map) if rw.op == "redaction" else []
    moves = rw.scope_tips()
    with purge_order.purging(store):
        ledger.deny(store, list(rw.commit_map), f"{rw.op} {rw.id}", scoped=blobs, scopes=moves)
        fault("denylist")
        purge_order.settle(store)
        entry = ledger.find(store, rw.op, "id", rw.id) if recovering else None  # there already?
        if entry is None:
            entry = ledger.append(store, rw.op, rw.ledger, actor=rw.actor)
        fault("ledger")
        if rw.op == "redaction":
            # as of the ledger entry's time, as an index derived again marks it (restore_ledger_marks)
            at = int(dt.datetime.fromisoformat(entry.at.replace("Z", "+00:00")).timestamp())
            store.index.mark_redacted((rw.id, rw.actor, at, rw.reason), rw.versions)
            for scope, (old, new) in moves.items():
                if rw.rederive:
                    store.index.apply_rewrite(scope, "", new, {}, {})
                else:
                    store.index.apply_rewrite(scope, old, new, rw.commit_map, rw.blob_map)
        else:  # compaction: versions leave history; the scope is re-derived from git
            store.index.apply_rewrite(rw.scope, "", rw.new_tip, {}, {})
        fault("index")
        retired = set(rw.retired)
        # What a ref reaches again (a racing writer's commit, a push forking old history) is kept,
        # checked under the store lock right before deleting; what a scope outside holds too.
        elsewhere = purge_order.held_elsewhere(store, blobs)
        reached = reachable_retired(store, retired, rw.baseline or [new for _old, new in moves.values()])
        keep, kept_refs, back = purge_order.kept_for_writes(
            store, retired, set(rw.retired_trees), set(moves), rw.at, reached, elsewhere
        )
        purge(store, [o for o in rw.retired if o not in keep])
        private_files(store)
        fault("purged")
    if rw.op == "redaction":  # step 6 (lock order: store, purge, proposals.lock), then the journal goes
        known = rw.scrub or "target" in rw.ledger  # an older gitmem's journal of a version id's: as good
        scrub_journaled(store, rw.id, moves, rw.versions, rw.pattern, pattern_known=known)
        fault("scrubbed")
    _journal_path(store).unlink(missing_ok=True)
    if kept_refs:
        raise IntegrityError(
            f"{rw.op} {rw.id}: {', '.join(kept_refs)} changed during the rewrite and still reaches "
            f"retired history, which was kept so that ref stays whole; delete or reset that ref, then "
            "run gitmem verify"
        )
    if back and rw.op == "redaction":
        raise IntegrityError(
            f"redaction {rw.id}: a write made during the redaction stored the redacted content again "
            "(a live memory holds it now); history was rewritten, but redact that new version too"
        )


def private_files(store: StoreCore) -> None:
    """Everything under ``$GIT_DIR/gitmem/`` that derives from redacted content (deny-list,
    deny-patterns, journal, index and its WAL, pushes log, anchors, secret) is 0600."""
    d = store.gitmem_dir
    try:
        entries = list(d.iterdir())
    except FileNotFoundError:
        return
    for f in entries:
        if f.name == config.SETTINGS_FILE and store.is_clone:
            continue  # the clone's read-only copy of the settings
        with contextlib.suppress(OSError):
            if f.is_file() and f.stat().st_mode & 0o077:
                f.chmod(0o600)


def open_recovered(
    name_or_path: str | os.PathLike[str], home: str | os.PathLike[str] | None = None
) -> StoreCore:
    """Open a store; a rewrite killed half-way is finished or rolled back, an erase killed past its
    proposal's save is finished (gitmem.audit.erase_recovery)."""
    from gitmem.audit import erase_recovery

    core = open_core(name_or_path, home)
    if not core.is_clone and (core.gitmem_dir / "journal.json").exists():
        recover(core)
    erase_recovery.finish(core, store_lock)
    return core


def open_checked(
    name_or_path: str | os.PathLike[str], home: str | os.PathLike[str] | None = None
) -> StoreCore:
    """:func:`open_recovered`, then a hand edit of gitmem.yaml recorded in the ledger, unattributed
    (docs/identity.md): how ``gitmem.open_store`` and the witness loop of ``gitmem serve`` open one."""
    core = open_recovered(name_or_path, home)
    try:
        ledger.check_hand_edit(core)
    except BaseException:
        core.close()
        raise
    return core


# ---------------------------------------------------------------------- pushes and rewrites
PUSH_WAIT = 60.0  # seconds a push waits for a running rewrite before it is refused


def guard_push(git_dir: Path, *, wait: float = PUSH_WAIT) -> str | None:
    """For the pre-receive hook: pushes and rewrites exclude each other. Waits (up to ``wait``
    seconds) while a rewrite holds the store lock, then finishes an interrupted rewrite (journal
    recovery) so the push is checked against the deny-list the rewrite leaves. Returns None to go
    on, or the refusal line. Cheap when no rewrite is around (one non-blocking flock)."""
    lock = git_dir / "gitmem" / LOCK_FILE
    journal = git_dir / "gitmem" / JOURNAL_FILE
    if not lock.exists() and not journal.exists():
        return None
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return None if not journal.exists() else _refusal("its journal cannot be recovered here")
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return _refusal("it is still running")
                time.sleep(0.05)
        if journal.exists():
            # A rewrite was killed half-way: finish or roll it back first (outside the push's
            # quarantine: a plain handle on the store). The lock is ours; recovery takes its own.
            fcntl.flock(fd, fcntl.LOCK_UN)
            core = open_core(str(git_dir))
            try:
                recover(core, blocking=True)
            finally:
                core.close()
    finally:
        os.close(fd)
    return None


def _refusal(why: str) -> str:
    return (
        f"gitmem: a history rewrite (redaction or compaction) of this store is in progress and {why}; "
        "nothing was changed: push again when it has finished (gitmem verify completes an interrupted one)"
    )
