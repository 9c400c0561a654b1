"""Group commit: the writes of several threads to one scope, chained and published together.

Every single write runs through :func:`mutate` here: a front end of the commit pipeline
(gitmem.engine.pipeline). Writes that arrive while a commit is being made queue up; the next
leader plans them in arrival order on one state, writes them as a chain of commits and publishes
the chain with one flush and one compare-and-swap (docs/durability.md, "Group commit").
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable

import pygit2

from gitmem.engine import access, pipeline, proposals, xqueue
from gitmem.engine.core import StoreCore
from gitmem.engine.planners import Spec
from gitmem.engine.writer import Change, ScopeState, authorize, maintain_quietly, version_from_row
from gitmem.model.caller import Caller
from gitmem.model.versions import Version


def mutate(
    store: StoreCore,
    scope: str,
    plan: Callable[[ScopeState], Change | None],
    *,
    actor: str | None,
    session: str | None,
    erasing: bool = False,
    spec: Spec | None = None,
    caller: Caller | None = None,
) -> Version | None:
    """Plan and commit one change to one memory, with compare-and-swap and retry.

    Threads writing to one scope through one handle are group-committed: the writes that arrive
    while a commit is being made are chained onto the next one, in arrival order, and published
    with one flush and one ref move; each caller returns (acknowledged) only after that. With a
    ``spec`` (the write in serializable form, gitmem.engine.planners) the write can also join the
    group of another process holding the scope lock (gitmem.engine.xqueue). A writer in
    review mode gets the change on its proposal instead (gitmem.engine.proposals)."""
    admitted = access.admit_write(store, caller, scope, actor, session)
    actor, session = admitted.actor, admitted.session
    owner = proposals.route(store, scope, actor, session, admitted.review)
    if owner is not None:
        done = proposals.propose(store, scope, [plan], actor=actor, session=session, owner=owner)
        return done.versions[0] if done.versions else None
    actor, session, limits = authorize(store, scope, actor, session, erasing=erasing)
    request = _Request(plan, actor, session, limits, spec)
    group = _group(store, scope)
    with group.cond:
        group.queue.append(request)
        if group.lingering:
            group.arrivals.notify()
        while not request.done and group.busy:
            group.cond.wait()
        if not request.done:  # this thread leads: it commits everything queued so far
            group.busy = True
            # The writers of the last group are on their way back with their next write: wait
            # a moment for as many as that group had (a lone writer never waits).
            want = min(group.last_size, GROUP_MAX)
            if len(group.queue) < want:
                group.lingering = True
                deadline = time.monotonic() + GROUP_LINGER
                while len(group.queue) < want and (left := deadline - time.monotonic()) > 0:
                    group.arrivals.wait(left)
                group.lingering = False
            batch, group.queue = group.queue[:GROUP_MAX], group.queue[GROUP_MAX:]
            group.last_size = len(batch)
    if not request.done:
        published = 0
        try:
            published = commit_group(store, scope, batch, proposals.route)
        except BaseException as exc:
            for r in batch:
                if not r.done:
                    r.finish(None, exc)
            raise
        finally:
            with group.cond:
                group.busy = False
                group.cond.notify_all()
        # After the group is released: the next leader commits while this one repacks. Only a
        # process that published looks (its pack or loose objects are what pile up): writes another
        # process's leader committed left nothing of this one's.
        if published:
            maintain_quietly(store, published)
    if request.error is not None:
        raise request.error
    return request.result


_log = logging.getLogger("gitmem.write")
GROUP_MAX = 256  # versions one group commit chains at most
GROUP_LINGER = 0.002  # seconds a leader waits for the writers of the last group to come back
_Request = xqueue.Request


class _Group:
    __slots__ = ("cond", "arrivals", "queue", "busy", "lingering", "last_size")

    def __init__(self) -> None:
        lock = threading.Lock()
        self.cond = threading.Condition(lock)  # the queue changed or a group finished
        self.arrivals = threading.Condition(lock)  # a write arrived (for a lingering leader)
        self.queue: list[_Request] = []
        self.busy = False
        self.lingering = False
        self.last_size = 1


_GROUPS_LOCK = threading.Lock()
# One queue per repository and scope in this process: writers through different handles of one
# store (a server's pool lends one handle per thread) are chained together too. Idle queues are
# dropped once there are more than _GROUPS_MAX (a server sees many stores and scopes); a writer
# that still holds a dropped one only batches less, since the scope lock and the compare-and-swap
# keep two queues of one scope correct.
_GROUPS: dict[tuple[str, str], _Group] = {}
_GROUPS_MAX = 1024


def _forget_groups() -> None:
    """In a forked child the parent's threads do not exist: a group one of them was leading (busy)
    would never be released, and its locks may be held."""
    global _GROUPS, _GROUPS_LOCK
    _GROUPS, _GROUPS_LOCK = {}, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_groups)


def _group(store: StoreCore, scope: str) -> _Group:
    key = (store.real_path, scope)
    with _GROUPS_LOCK:
        group = _GROUPS.get(key)
        if group is None:
            if len(_GROUPS) >= _GROUPS_MAX:
                for k in [k for k, g in _GROUPS.items() if not (g.busy or g.queue or g.lingering)]:
                    del _GROUPS[k]
            group = _GROUPS[key] = _Group()
        return group


def commit_group(store: StoreCore, scope: str, requests: list[_Request], route: xqueue.Route) -> int:
    """Plan ``requests`` in order on one state (each sees the ones before it), write them as a
    chain of commits and publish the chain with one flush and one compare-and-swap, through the
    commit pipeline (gitmem.engine.pipeline); a lost race (another process moved the branch)
    re-plans all of them. A refused request gets its error, the others are committed. The writes
    other processes queued for the scope lock's holder join the group (gitmem.engine.xqueue);
    ``route`` tells those that must go through review. Returns how many versions this process
    published (0: nothing changed, or another process's leader committed every request)."""
    with contextlib.ExitStack() as held:
        # Processes writing one scope take turns (no plan, objects and flush thrown away on a lost
        # compare-and-swap); pushes and batches still race by compare-and-swap alone.
        turn = xqueue.take_turn(store, scope, requests, held, route)
        if turn.queue or turn.own is not None:
            store.writers_elsewhere = True
        requests = [r for r in requests if not r.done]  # the rest were committed by another process
        if not requests:
            return 0
        group: list[_Request] = []

        def gather(tip: pygit2.Oid | None) -> list[pipeline.Item | None]:
            group[:] = turn.gather(tip, requests)
            # A request already done was answered from the history, or refused when it was read.
            return [
                None if r.done else pipeline.Item(r.plan, r.actor, r.session, r.limits, r.version_id)
                for r in group
            ]

        done = pipeline.commit(store, scope, gather, held=held, flag_each=True)
        rows = dict(zip((n for n, _c in done.changes), done.rows, strict=True))
        for row in done.rows:
            _log.info(
                "%s %s %s in scope %r of %s (commit %s)",
                row.operation, row.path, row.id, scope, store.name, row.commit_id[:12],
            )  # fmt: skip
        for n, req in enumerate(group):
            if not req.done:
                mine = rows.get(n)
                req.finish(version_from_row(mine) if mine is not None else None, done.outcome.get(n))
        turn.answer()
        return len(done.rows) if done.head is not None else 0
