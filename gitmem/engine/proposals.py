"""Review-gated writes (docs/review.md): writes by actors in review mode land as a *proposal*, a
chain of ordinary gitmem versions on ``refs/gitmem/proposals/<scope>/<id>``, one proposal per
session (or per actor without one), until a reviewer accepts or rejects it.

Who is in review mode: the store's ``acl.review`` (scope globs to actor globs), or a face that
asks with :func:`reviewing` (a ``notes:review`` mount, a ``--review`` token, ``gitmem mcp
--review``). Every write and batch asks :func:`route` once; a routed write runs through
:func:`propose`: the commit pipeline of a published write, on the proposal's ref (:class:`ProposalSink`).
A proposal's record lives in ``$GIT_DIR/gitmem/proposals/<id>.json``; decisions: :mod:`gitmem.audit.review`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2

from gitmem import config
from gitmem.engine import ledger_text, pipeline
from gitmem.engine import proposal_usage as usage
from gitmem.engine.core import StoreCore
from gitmem.engine.overlay import BatchState
from gitmem.engine.proposal_rebase import rebase_chain, stands_on
from gitmem.engine.rows import Memory, VersionRow
from gitmem.engine.writer import sha256_hex, version_from_row
from gitmem.errors import GitmemError, InvalidInputError, NotFoundError
from gitmem.git.fence import check_fence
from gitmem.git.locks import proposals_lock
from gitmem.git.reflocks import delete_ref
from gitmem.git.treediff import tree_deltas
from gitmem.ids import is_id, new_id
from gitmem.model.paths import validate_path, validate_scope
from gitmem.model.versions import Version, parse_trailers, resolve_actor, timestamp, validate_session

REF_PREFIX = "refs/gitmem/proposals/"
DIR = "proposals"
STATUSES = ("open", "accepted", "rejected")


def owner_of(actor: str, session: str | None) -> str:
    return session or actor


def acl_reviews(acl: dict[str, Any], scope: str, actor: str) -> bool:
    """Whether the store's ``acl.review`` puts ``actor`` in review mode on ``scope``."""
    rules = acl.get("review")
    if not isinstance(rules, dict):
        return False
    for scope_glob, actors in rules.items():
        if fnmatch.fnmatchcase(scope, str(scope_glob)):
            return any(fnmatch.fnmatchcase(actor, str(a)) for a in (actors or []))
    return False


def in_review(store: StoreCore, scope: str, actor: str, review: bool = False) -> bool:
    """Whether ``actor`` writes ``scope`` in review mode (its caller's, or ``acl.review``)."""
    return review or acl_reviews(store.settings.acl, scope, actor)


def route(
    store: StoreCore, scope: str, actor: str | None, session: str | None, review: bool = False
) -> str | None:
    """The owner whose proposal a write goes to, or None when it is published as usual:
    ``review`` is the caller's mode (gitmem.model.caller), else the store's ``acl.review``."""
    if not review and not store.settings.acl.get("review"):
        return None  # the common case: one dict lookup
    validate_scope(scope)
    who = resolve_actor(actor, validate_session(session))
    if review or acl_reviews(store.settings.acl, scope, who):
        return owner_of(who, session)
    return None


# ---------------------------------------------------------------------- records
@dataclass
class Decision:
    action: str  # accepted | rejected
    reviewer: str
    at: str
    paths: list[str]
    reason: str = ""
    versions: list[str] = field(default_factory=list)  # accepted: the proposal's versions it covered


@dataclass
class Proposal:
    id: str
    scope: str
    owner: str
    actor: str
    session: str | None
    base: str | None  # the scope's tip when the proposal started
    created_at: str
    status: str = "open"
    decisions: list[Decision] = field(default_factory=list)
    updated_at: str = ""
    erased: str | None = None  # the erasure (gitmem.audit.review.erase) that removed its chain

    @property
    def ref(self) -> str:
        return f"{REF_PREFIX}{self.scope}/{self.id}"

    @property
    def decided_paths(self) -> set[str]:
        return {p for d in self.decisions for p in d.paths}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Proposal:
        decisions = [Decision(**d) for d in data.get("decisions", [])]
        return cls(**{**data, "decisions": decisions})


def _dir(store: StoreCore) -> Path:
    return store.gitmem_dir / DIR


def save(store: StoreCore, p: Proposal) -> None:
    p.updated_at = config.now_rfc3339()
    d = _dir(store)
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{p.id}.tmp{os.getpid()}"
    tmp.write_text(json.dumps(p.to_dict(), sort_keys=True), encoding="utf-8")
    os.replace(tmp, d / f"{p.id}.json")


def proposals(store: StoreCore, *, status: str | None = None, scope: str | None = None) -> list[Proposal]:
    """Every proposal of the store, oldest first (``status``/``scope`` filter)."""
    if status is not None and status not in STATUSES:
        raise InvalidInputError(f"invalid status {status!r}: use one of {', '.join(STATUSES)}")
    out = []
    d = _dir(store)
    for f in sorted(d.glob("prop_*.json")) if d.is_dir() else []:
        try:
            p = Proposal.from_dict(json.loads(f.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            continue
        if (status is None or p.status == status) and (scope is None or p.scope == scope):
            out.append(p)
    return sorted(out, key=lambda p: (p.created_at, p.id))


def get(store: StoreCore, proposal_id: str) -> Proposal:
    if not is_id(proposal_id, "prop"):
        raise InvalidInputError(f"invalid proposal id {proposal_id!r}: expected prop_...")
    try:
        return Proposal.from_dict(
            json.loads((_dir(store) / f"{proposal_id}.json").read_text(encoding="utf-8"))
        )
    except FileNotFoundError:
        raise NotFoundError(f"proposal {proposal_id} does not exist in store {store.name!r}") from None


def open_proposal(store: StoreCore, scope: str, owner: str) -> Proposal | None:
    for p in proposals(store, status="open", scope=scope):
        if p.owner == owner:
            return p
    return None


def _open_or_start(
    store: StoreCore,
    scope: str,
    owner: str,
    actor: str,
    session: str | None,
    into: list[Proposal] | None = None,
) -> Proposal:
    into = [] if into is None else into  # the open proposals read under the lock (for the limits)
    with proposals_lock(store.path):
        into[:] = proposals(store, status="open")  # read once: the write's limits count them too
        found = next((p for p in into if p.scope == scope and p.owner == owner), None)
        if found is not None:
            return found
        tip = store.tip(scope)
        now = config.now_rfc3339()
        p = Proposal(new_id("prop"), scope, owner, actor, session, str(tip) if tip else None, now)
        if tip is not None:
            check_fence(store.repo.path)  # a store in a cluster: only its lease holder (docs/cluster.md)
            store.repo.references.create(p.ref, tip, force=False)
        save(store, p)
        return p


def tip_of(store: StoreCore, p: Proposal) -> pygit2.Oid | None:
    return store.ref_target(p.ref)


def rebase(store: StoreCore, p: Proposal) -> Proposal:
    """The proposal as saved, its chain moved onto the scope's tip first if the scope moved since
    its base (gitmem.engine.proposal_rebase: conflicts are kept for the review, never settled)."""
    try:
        p = get(store, p.id)
    except NotFoundError:  # decided and dropped meanwhile: the sink starts the next proposal
        return p
    onto = store.tip(p.scope)
    base = pygit2.Oid(hex=p.base) if p.base else None
    if p.status != "open" or onto is None or stands_on(store, base) == onto:
        return p
    with proposals_lock(store.path):  # as decisions and proposal writes
        p, onto = get(store, p.id), store.tip(p.scope) or onto
        base, old = (pygit2.Oid(hex=p.base) if p.base else None), tip_of(store, p)
        moved = p.status == "open" and stands_on(store, base) != onto  # else: done meanwhile
        done = rebase_chain(store, base, chain(store, p), onto) if moved else None
        # the ref first, then the record (a crash between leaves the chain on its old base's history)
        if done is not None and store.publish(p.ref, old, done.tip, done.written):
            p.base = str(done.base)
            save(store, p)
    return p


# ---------------------------------------------------------------------- writing a proposal
def chain(store: StoreCore, p: Proposal) -> list[pygit2.Commit]:
    """The proposal's own commits, oldest first."""
    tip = tip_of(store, p)
    if tip is None:
        return []
    base = pygit2.Oid(hex=p.base) if p.base else None
    commits = []
    commit = store.commit(tip)
    while commit.id != base:  # a proposal is a linear chain on top of its base
        commits.append(commit)
        if not commit.parents:
            break
        commit = commit.parents[0]
    return list(reversed(commits))


def memory_ids(store: StoreCore, p: Proposal) -> dict[str, str | None]:
    """path -> memory id of what the proposal's chain created, changed or removed."""
    ids: dict[str, str | None] = {}
    for c in chain(store, p):
        t = parse_trailers(c.message)
        paths = subject_path(c.message)
        if paths is None:
            continue
        prev, path = paths
        if prev is not None:
            ids[prev] = None
        ids[path] = None if t.get("Gitmem-Operation") == "deleted" else t.get("Gitmem-Memory")
    return ids


def subject_path(message: str) -> tuple[str | None, str] | None:
    """(previous path, path) from a version's subject: ``<op> <path>`` or ``renamed A to B``."""
    subject = message.split("\n", 1)[0]
    if subject.startswith("renamed ") and " to /" in subject:
        a, b = subject[len("renamed ") :].split(" to /", 1)
        return a, "/" + b
    parts = subject.split(" ", 1)
    return (None, parts[1]) if len(parts) == 2 and parts[1].startswith("/") else None


class ProposalState(BatchState):
    """The scope as its proposer sees it: the proposal's tree; memory ids from the chain, else the
    scope's index; counts and sizes: the scope, the proposal's delta, other open proposals' (usage)."""

    def __init__(self, store: StoreCore, p: Proposal, tip: pygit2.Oid | None, others: list[Proposal]) -> None:
        super().__init__(store, p.scope, tip)
        self.proposal = p
        self.ids = memory_ids(store, p)
        base = pygit2.Oid(hex=p.base) if p.base else None
        self.chain_memories, self.chain_bytes = usage.totals(usage.chain_delta(store, base, tip))
        self.elsewhere = usage.held_elsewhere(store, p, others)

    def _index(self) -> None:
        if not self._indexed:
            self.store.index.ensure(self.scope)
            self._indexed = True

    def memory_id_at(self, path: str) -> str | None:
        if path in self.overlay:
            return self.overlay[path]
        if path in self.ids:
            return self.ids[path]
        head = self.head(path)
        return head.memory_id if head is not None else None

    def has_live_memory(self, memory_id: str) -> bool:
        return memory_id in self.ids.values() or super().has_live_memory(memory_id)

    def stats(self) -> tuple[int, int]:
        count, size = super().stats()
        return count + self.chain_memories + self.elsewhere.memories, size + self.chain_bytes

    def store_bytes(self, *, exact: bool = False) -> int:
        return super().store_bytes(exact=exact) + self.chain_bytes + self.elsewhere.bytes


class ProposalSink(pipeline.Sink):
    """The commit pipeline's sink for a proposal: its ref instead of the branch, no index record.
    Published under the lock decisions take: a proposal accepted, rejected or erased meanwhile is
    neither extended (its chain may be gone) nor saved back as open over the decision; the next
    attempt then starts the owner's next proposal."""

    counts_store_bytes = False

    def __init__(self, store: StoreCore, p: Proposal, owner: str, actor: str, session: str | None) -> None:
        super().__init__(store, p.scope)
        self.proposal, self.owner, self.actor, self.session = p, owner, actor, session
        self.planned: ProposalState | None = None
        self.seen: list[Proposal] | None = None  # the open proposals propose() read, for its first plan

    def tip(self) -> pygit2.Oid | None:
        self.proposal = rebase(self.store, self.proposal)  # plan on the scope as it is now
        return tip_of(self.store, self.proposal)

    def state(self, tip: pygit2.Oid | None) -> ProposalState:
        others, self.seen = self.seen if self.seen is not None else proposals(self.store, status="open"), None
        self.planned = ProposalState(self.store, self.proposal, tip, others)
        return self.planned

    def publish(
        self,
        tip: pygit2.Oid | None,
        head: pygit2.Oid,
        written: list[pygit2.Oid],
        rows: list[VersionRow],
        contents: dict[str, bytes],
        check: Callable[[], bool] | None = None,
    ) -> bool | None:
        store, p = self.store, self.proposal
        with proposals_lock(store.path):
            try:
                current = get(store, p.id)
            except NotFoundError:  # decided and dropped by retention meanwhile
                current = dataclasses.replace(p, status="rejected")
            if usage.raced(store, p, self.planned, lambda: proposals(store, status="open")):
                return False  # near max_store_bytes, another proposal moved since the plan: again
            published = current.status == "open" and store.publish(p.ref, tip, head, written, check=check)
            if published:
                save(store, current)
                self.proposal = current
                return True
        if current.status != "open":  # decided while this write was planned: start the next one
            self.proposal = _open_or_start(store, self.scope, self.owner, self.actor, self.session, [])
            return None
        return False


@dataclass(frozen=True)
class Proposed:
    proposal: Proposal
    versions: list[Version]
    refused: list[tuple[int, GitmemError]]  # (index of the planner, why)


def propose(
    store: StoreCore,
    scope: str,
    planners: Sequence[Callable[[Any], Any]],
    *,
    actor: str | None,
    session: str | None,
    owner: str,
    skip_refused: bool = False,
) -> Proposed:
    """Plan ``planners`` (each ``state -> Change | None``) against the owner's proposal and commit
    them on its ref by compare-and-swap, through the commit pipeline (gitmem.engine.pipeline): the
    limits, the deny-list and the guard apply as for a published write; nothing reaches the scope."""
    validate_scope(scope)
    session = validate_session(session)
    who = ledger_text.recorded_actor(store, actor, session, scope)
    store.check_writable()
    limits = store.settings.limits
    seen: list[Proposal] = []
    sink = ProposalSink(store, _open_or_start(store, scope, owner, who, session, seen), owner, who, session)
    sink.seen = seen
    items = [pipeline.Item(plan, who, session, limits) for plan in planners]
    done = pipeline.commit(
        store, scope, lambda _tip: items, sink=sink, catch=GitmemError if skip_refused else (),
        what="write the proposal",
    )  # fmt: skip
    refused = [(n, e) for n, e in sorted(done.outcome.items()) if isinstance(e, GitmemError)]
    return Proposed(sink.proposal, [version_from_row(r) for r in done.rows], refused)


# ---------------------------------------------------------------------- reading


def owner_tip(store: StoreCore, scope: str, owner: str) -> pygit2.Oid | None:
    """The tip of ``owner``'s open proposal on ``scope`` (None: none, or it is still empty)."""
    p = open_proposal(store, scope, owner)
    return tip_of(store, p) if p is not None else None


def read_memory(store: StoreCore, path: str, scope: str, owner: str) -> Any:
    """The memory at ``path`` as ``owner`` sees it: from its open proposal when the proposal
    changed that path (NotFoundError when it deleted it), else None (read the scope)."""
    from gitmem.model.frontmatter import parse_description

    validate_path(path)
    p = open_proposal(store, scope, owner)
    if p is None or path not in touched(store, p):
        return None
    tip = tip_of(store, p)
    text = text_at(store.tree_of(tip) if tip is not None else None, path)
    if text is None:
        raise NotFoundError(
            f"memory {path} does not exist in scope {scope!r} (your proposal {p.id} deletes it)"
        )
    mine = [v for v in versions(store, p.id) if v.path == path]
    data = text.encode("utf-8")
    return Memory(
        path=path,
        scope=scope,
        content=text,
        content_sha256=sha256_hex(data),
        size=len(data),
        description=parse_description(text) if text.startswith("---") else None,
        memory_id=mine[-1].memory_id if mine else "",
        version_id=mine[-1].id if mine else "",
        created_at=mine[0].created_at if mine else None,
        updated_at=mine[-1].created_at if mine else None,
    )


def versions(store: StoreCore, proposal_id: str) -> list[Version]:
    """The proposed versions, oldest first."""
    p = get(store, proposal_id)
    out = []
    for c in chain(store, p):
        t = parse_trailers(c.message)
        paths = subject_path(c.message)
        if paths is None:
            continue
        prev, path = paths
        out.append(
            Version(
                id=t.get("Gitmem-Version", ""),
                memory_id=t.get("Gitmem-Memory", ""),
                scope=p.scope,
                path=path,
                operation=t.get("Gitmem-Operation", ""),
                actor=t.get("Gitmem-Actor", ""),
                session=t.get("Gitmem-Session"),
                created_at=timestamp(c.committer.time),
                commit=str(c.id),
                previous_path=prev,
            )
        )
    return out


def text_at(tree: pygit2.Tree | None, path: str) -> str | None:
    if tree is None:
        return None
    try:
        obj = tree[path[1:]]
    except KeyError:
        return None
    return obj.data.decode("utf-8", "replace") if isinstance(obj, pygit2.Blob) else None


def touched(store: StoreCore, p: Proposal) -> list[str]:
    tip = tip_of(store, p)
    if tip is None:  # never written, or its chain was erased: it changes nothing
        return []
    base_tree = store.tree_of(pygit2.Oid(hex=p.base)) if p.base else None
    tree = store.tree_of(tip)
    return sorted("/" + d.raw_path.decode("utf-8", "surrogateescape") for d in tree_deltas(base_tree, tree))


def drop_expired(store: StoreCore, *, now: float | None = None) -> list[str]:
    """Delete the refs and records of decided proposals older than ``retention.min_days``
    (counted from the last decision). Returns the ids dropped."""
    import datetime as dt

    keep = store.settings.retention.min_days * 86400
    now = time.time() if now is None else now
    dropped = []
    for p in proposals(store):
        if p.status == "open" or not p.decisions:
            continue
        at = dt.datetime.fromisoformat(p.decisions[-1].at.replace("Z", "+00:00")).timestamp()
        if now - at < keep:
            continue
        if store.repo.references.get(p.ref) is not None:
            check_fence(store.repo.path)
            delete_ref(store.repo, p.ref)  # past a lock a killed writer left (docs/durability.md)
        (_dir(store) / f"{p.id}.json").unlink(missing_ok=True)
        dropped.append(p.id)
    return dropped


def proposal_refs(store: StoreCore, scope: str | None = None) -> list[str]:
    """Every proposal ref (of ``scope``); redaction rewrites them with their scope."""
    prefix = REF_PREFIX if scope is None else f"{REF_PREFIX}{scope}/"
    return [r for r in store.repo.references if r.startswith(prefix)]
