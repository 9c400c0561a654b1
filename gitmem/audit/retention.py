"""Retention: compact versions past ``retention.max_days`` into a new root (docs/architecture.md#retention).

A scope's history ``c0 .. cN`` becomes ``root, c'B .. c'N``: the first B commits are squashed into one
root commit whose tree is ``c(B-1)``'s tree, and the later commits are re-parented (trees, authors,
times and messages unchanged). B is the largest cut that drops only droppable versions:

- a version is *droppable* when it is older than ``max(max_days, min_days)`` and is not one of its
  live memory's ``keep_recent`` newest versions;
- versions before the cut that are still the memory's state at the cut are *kept* in the root: the
  root's message lists them (``Gitmem-Snapshot: <version> <memory> <operation> <time> <actor>
  <session|-> <path>``), so their ids, memories, actors and times survive; every other version
  before the cut (superseded or deleted) is dropped.

The rewrite runs with the same lock, journal, CAS, ledger entry (``compaction``), deny-list (retired
commits) and purge as a redaction (:mod:`gitmem.audit.redact`). Scopes with merge commits are skipped.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

import pygit2

from gitmem.audit.journal import Rewrite, run_rewrite
from gitmem.audit.proposal_chains import OnDroppedHistory, move_chains
from gitmem.engine import ledger, ledger_text
from gitmem.engine import proposals as P
from gitmem.engine.core import StoreCore
from gitmem.engine.proposal_rebase import origin_blobs
from gitmem.engine.rows import VersionRow
from gitmem.git.rewrite import Rewriter
from gitmem.model.versions import COMPACTION, SNAPSHOT

DAY = 86400


@dataclass(frozen=True)
class Compaction:
    """What ``prune`` did to one scope."""

    id: str
    scope: str
    dropped: list[str]  # version ids removed from history
    kept_in_root: int  # versions before the cut that survive as the root's state
    rewritten_commits: int
    new_tip: str


@dataclass(frozen=True)
class PruneResult:
    compactions: list[Compaction] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # scope -> why nothing was compacted
    dropped_proposals: list[str] = field(default_factory=list)  # decided ones past retention.min_days


def snapshot_line(r: VersionRow) -> str:
    return (
        f"{SNAPSHOT}: {r.id} {r.memory_id} {r.operation} {r.created_at} {r.actor} {r.session or '-'} {r.path}"
    )


def plan_cut(rows_by_commit: list[list[VersionRow]], live: set[str], keep_recent: int, cutoff: int) -> int:
    """How many leading commits may be squashed (see the module docstring)."""
    by_memory: dict[str, list[tuple[int, VersionRow]]] = {}
    for i, rows in enumerate(rows_by_commit):
        for r in rows:
            by_memory.setdefault(r.memory_id, []).append((i, r))
    cut = len(rows_by_commit)
    for memory, versions in by_memory.items():
        keep = {r.id for _, r in versions[-keep_recent:]} if memory in live and keep_recent else set()
        for n, (i, r) in enumerate(versions):
            if r.created_at < cutoff and r.id not in keep:
                continue  # droppable
            if r.operation == "deleted":
                cut = min(cut, i)
            elif n + 1 < len(versions):
                cut = min(cut, versions[n + 1][0])  # its successor must stay after the cut
    return cut


def prune(
    store: StoreCore, *, actor: str | None = None, now: int | None = None, dry_run: bool = False
) -> PruneResult:
    """Compact every scope per the store's retention settings; nothing to do without ``max_days``.
    With ``dry_run``: what would be dropped, per scope, and nothing is written."""
    store.check_writable()
    actor = ledger_text.recorded_actor(store, actor)
    retention = store.settings.retention
    from gitmem.engine.proposals import drop_expired

    dropped = drop_expired(store, now=now)  # decided proposals are kept retention.min_days
    result = PruneResult(dropped_proposals=dropped)
    if retention.max_days is None:
        skipped = {s: "retention.max_days is not set" for s in store.scopes()}
        return PruneResult(skipped=skipped, dropped_proposals=dropped)
    cutoff = (int(time.time()) if now is None else now) - max(retention.max_days, retention.min_days) * DAY
    for scope in store.scopes():
        if dry_run:
            done = _preview_scope(store, scope, retention.keep_recent, cutoff)
        else:
            done = _prune_scope(store, scope, actor, retention.keep_recent, cutoff)
        if isinstance(done, str):
            result.skipped[scope] = done
        else:
            result.compactions.append(done)
    return result


def _select(
    store: StoreCore, scope: str, tip: pygit2.Oid, keep_recent: int, cutoff: int
) -> tuple[list[pygit2.Commit], list[VersionRow], int, list[VersionRow], list[VersionRow]]:
    """(commits, rows, cut, kept, dropped) of a compaction of ``scope`` at ``tip``; _Skip when none."""
    commits = list(store.walk(tip))
    if any(len(c.parent_ids) > 1 for c in commits):
        raise _Skip("the scope has merge commits")
    store.index.ensure(scope, tip, known_tip=True)
    rows = store.index.version_rows("scope=?", (scope,))
    by_commit: dict[str, list[VersionRow]] = {}
    for r in sorted(rows, key=lambda r: r.created_at):
        by_commit.setdefault(r.commit_id, []).append(r)
    rows_by_commit = [by_commit.get(str(c.id), []) for c in commits]
    live = {h.memory_id for h in store.index.heads(scope)}
    cut = plan_cut(rows_by_commit, live, keep_recent, cutoff)
    before = [r for rs in rows_by_commit[:cut] for r in rs]
    last: dict[str, VersionRow] = {}
    for r in before:
        last[r.memory_id] = r
    kept = [r for r in last.values() if r.operation != "deleted"]
    kept_ids = {r.id for r in kept}
    dropped = [r for r in before if r.id not in kept_ids]
    if cut < 2 or not dropped:
        raise _Skip("no version is old enough to drop")
    return commits, rows, cut, kept, dropped


def _preview_scope(store: StoreCore, scope: str, keep_recent: int, cutoff: int) -> Compaction | str:
    tip = store.tip(scope)
    if tip is None:
        return "the scope is empty"
    try:
        commits, _rows, cut, kept, dropped = _select(store, scope, tip, keep_recent, cutoff)
    except _Skip as skip:
        return str(skip)
    return Compaction("", scope, [r.id for r in dropped], len(kept), len(commits) - cut + 1, "")


def _prune_scope(store: StoreCore, scope: str, actor: str, keep_recent: int, cutoff: int) -> Compaction | str:
    state: dict[str, Any] = {}

    def build(tip: pygit2.Oid) -> Rewrite:
        commits, rows, cut, kept, dropped = _select(store, scope, tip, keep_recent, cutoff)
        kept_ids = {r.id for r in kept}
        rid = state.setdefault("id", ledger_id())
        root = _root_commit(store, commits[cut - 1], kept, rid, actor, len(dropped))
        rewriter = Rewriter(store, {})
        new_tip = root
        for i, commit in enumerate(commits[cut:]):
            new_tip = rewriter.commit(commit, [root] if i == 0 else None)
        # Proposals of the scope move onto the compacted history (their base mapped, a retired
        # base to the new root), as a redaction moves them: no proposal blocks retention.
        retired = {c.id for c in commits[:cut]}
        try:
            chain_map, publish = move_chains(store, scope, rewriter, root, retired, commits[cut - 1].id)
        except OnDroppedHistory as exc:
            raise _Skip(str(exc)) from None
        rewriter.flush()
        publish()
        commit_map = {str(c.id): str(rewriter.commits.get(c.id, root)) for c in commits}
        commit_map.update(chain_map)
        remaining = {r.blob for r in rows if r.blob and r.id not in {d.id for d in dropped}}
        gone_blobs = sorted({r.blob for r in dropped if r.blob and r.blob not in remaining})
        held = origin_blobs(
            store, [pygit2.Oid(hex=p.base) for p in P.proposals(store, scope=scope) if p.base]
        )
        gone_blobs = [b for b in gone_blobs if not _blob_elsewhere(store, scope, b) and b not in held]
        return Rewrite(
            op="compaction",
            id=rid,
            scope=scope,
            actor=actor,
            reason="retention",
            at=int(time.time()),
            old_tip=str(tip),
            new_tip=str(new_tip),
            commit_map=commit_map,
            blob_map={b: [] for b in gone_blobs},
            versions=[r.id for r in dropped],
            ledger={
                "id": rid,
                "scope": scope,
                "reason": "retention",
                "cutoff": dt.datetime.fromtimestamp(cutoff, dt.UTC).isoformat().replace("+00:00", "Z"),
                "dropped": [r.id for r in dropped],
                "kept_in_root": sorted(kept_ids),
                "rewritten_commits": len(commit_map),
                "new_tip": str(new_tip),
                "retired_commits": len(commit_map),
                "retired_commits_digest": ledger.set_digest(store, commit_map),
            },
        )

    try:
        rw = run_rewrite(store, scope, build)
    except _Skip as skip:
        return str(skip)
    return Compaction(
        rw.id, scope, rw.versions, len(rw.ledger["kept_in_root"]), len(rw.commit_map), rw.new_tip
    )


class _Skip(Exception):
    pass


def ledger_id() -> str:
    from gitmem.ids import new_id

    return new_id("compact")


def _blob_elsewhere(store: StoreCore, scope: str, blob: str) -> bool:
    found = store.index.db.execute(
        "SELECT 1 FROM versions WHERE blob=? AND scope != ? LIMIT 1", (blob, scope)
    ).fetchone()
    return found is not None


def _root_commit(
    store: StoreCore, last: pygit2.Commit, kept: list[VersionRow], rid: str, actor: str, dropped: int
) -> pygit2.Oid:
    lines = [f"compacted {dropped} versions", "", f"{COMPACTION}: {rid}", f"Gitmem-Actor: {actor}"]
    lines += [snapshot_line(r) for r in sorted(kept, key=lambda r: r.path)]
    sig = pygit2.Signature("gitmem", "gitmem", last.committer.time, 0)
    return store.repo.create_commit(None, sig, sig, "\n".join(lines) + "\n", last.tree_id, [])
