"""The reviewer's side of review-gated writes (docs/review.md): :func:`diff` (three-way for
conflicts), :func:`accept` (some or all paths, authors kept, ``Gitmem-Reviewed-By``, a ledger entry),
:func:`reject` and :func:`erase`. Proposals themselves are :mod:`gitmem.engine.proposals`."""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

import pygit2

from gitmem import config
from gitmem.audit import erase_recovery
from gitmem.engine import access, ledger_text
from gitmem.engine import proposals as P
from gitmem.engine.core import StoreCore
from gitmem.errors import ConflictError, ForbiddenError, IntegrityError, InvalidInputError
from gitmem.git.locks import proposals_lock, purge_lock
from gitmem.git.reflocks import delete_ref
from gitmem.ids import new_id
from gitmem.model.caller import Caller
from gitmem.model.versions import Version, parse_trailers


@dataclass(frozen=True)
class PathDiff:
    """One path of a proposal against the scope: ``status`` is ``clean`` (the scope still has
    the base content), ``conflict`` (the scope changed it since, differently), or ``same`` (the
    scope already holds the proposed content)."""

    path: str
    status: str
    base: str | None
    proposed: str | None
    current: str | None
    diff: str  # unified diff current -> proposed
    three_way: str = ""  # for a conflict: git merge-file --diff3 output (markers where they clash)
    decided: bool = False


def diff(store: StoreCore, proposal_id: str, paths: Sequence[str] | None = None) -> list[PathDiff]:
    """Every path the proposal changes, against the scope's current content."""
    p = P.get(store, proposal_id)
    base_tree = store.tree_of(pygit2.Oid(hex=p.base)) if p.base else None
    tip = P.tip_of(store, p)
    prop_tree = store.tree_of(tip) if tip is not None else None
    cur_tree = store.tree_of(store.tip(p.scope))
    out = []
    decided = p.decided_paths
    for path in P.touched(store, p):
        if paths is not None and path not in paths:
            continue
        base, proposed, current = (
            P.text_at(base_tree, path),
            P.text_at(prop_tree, path),
            P.text_at(cur_tree, path),
        )
        if current == proposed:
            status = "same"
        elif current == base:
            status = "clean"
        else:
            status = "conflict"
        text = "".join(
            difflib.unified_diff(
                (current or "").splitlines(keepends=True),
                (proposed or "").splitlines(keepends=True),
                f"scope{path}" if current is not None else "/dev/null",
                f"proposal{path}" if proposed is not None else "/dev/null",
            )
        )
        three = _three_way(base, current, proposed) if status == "conflict" else ""
        out.append(PathDiff(path, status, base, proposed, current, text, three, path in decided))
    return out


def _three_way(base: str | None, current: str | None, proposed: str | None) -> str:
    """``git merge-file -p --diff3`` of scope (ours) and proposal (theirs) over the base."""
    with tempfile.TemporaryDirectory(prefix="gitmem-3way-") as d:
        files = []
        for name, text in (("scope", current), ("base", base), ("proposal", proposed)):
            f = Path(d) / name
            f.write_text(text or "", encoding="utf-8")
            files.append(str(f))
        proc = subprocess.run(
            ["git", "merge-file", "-p", "--diff3", "-L", "scope", "-L", "base", "-L", "proposal", *files],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return proc.stdout


# ---------------------------------------------------------------------- decisions
@dataclass(frozen=True)
class Accepted:
    proposal: P.Proposal
    versions: list[Version]
    paths: list[str]


def _plan_ops(store: StoreCore, p: P.Proposal, chosen: set[str]) -> list[Any]:
    """Batch operations publishing the proposed state of ``chosen`` paths, grouped by author
    (actor, session) in chain order; renames keep the memory id."""
    from gitmem.engine.batch import BatchOp

    base_tree = store.tree_of(pygit2.Oid(hex=p.base)) if p.base else None
    tip = P.tip_of(store, p)
    prop_tree = store.tree_of(tip) if tip is not None else None
    author: dict[str, tuple[str, str | None]] = {}
    renamed: dict[str, str] = {}  # new path -> base path
    for c in P.chain(store, p):
        t = parse_trailers(c.message)
        paths = P.subject_path(c.message)
        if paths is None:
            continue
        prev, path = paths
        who = (t.get("Gitmem-Actor", p.actor), t.get("Gitmem-Session"))
        author[path] = who
        if prev is not None:
            author[prev] = who
            renamed[path] = renamed.pop(prev, prev)
    ops: list[tuple[tuple[str, str | None], Any]] = []
    done: set[str] = set()
    for new, old in renamed.items():
        if (
            new in chosen
            and old in chosen
            and P.text_at(base_tree, old) is not None
            and P.text_at(prop_tree, new) is not None
        ):
            ops.append((author[new], BatchOp("rename", old, content=P.text_at(prop_tree, new), new_path=new)))
            done |= {new, old}
    ids = P.memory_ids(store, p)
    for path in sorted(chosen - done):
        proposed = P.text_at(prop_tree, path)
        who = author.get(path, (p.actor, p.session))
        if proposed is None:
            if P.text_at(base_tree, path) is not None:
                ops.append((who, BatchOp("delete", path)))
        else:
            ops.append((who, BatchOp("write", path, content=proposed, memory_id=ids.get(path))))
    return ops


def accept(
    store: StoreCore,
    proposal_id: str,
    *,
    reviewer: str,
    paths: Sequence[str] | None = None,
    reason: str = "",
    session: str | None = None,
    caller: Caller | None = None,
) -> Accepted:
    """Publish the proposal (or its ``paths``) onto the scope, as versions keeping their authors
    and naming the reviewer. Refused (ConflictError, nothing written) when a chosen path changed
    on the scope since the proposal's base: ``diff`` shows the three-way diff. Refused
    (ForbiddenError) for the proposer itself and for a reviewer in review mode."""

    reviewer = ledger_text.recorded_actor(store, reviewer)
    # one decision at a time; first the purge lock its commits may need (docs/durability.md#lock-order)
    with purge_lock(store.path, shared=True), proposals_lock(store.path):
        p = _decidable(store, proposal_id, reviewer, "accepted", session, caller)
        return _accept(store, p, reviewer, paths, reason)


def _proposer(p: P.Proposal, reviewer: str, session: str | None) -> bool:
    """Whether ``reviewer`` (acting in ``session``) is the proposal's own author: its actor, its
    owner, or anyone writing in the session that made it."""
    return reviewer in (p.actor, p.owner, f"session:{p.session}") or (
        session is not None and session in (p.session, p.owner)
    )


def _decidable(
    store: StoreCore, proposal_id: str, reviewer: str, what: str, session: str | None, caller: Caller | None
) -> P.Proposal:
    """The open proposal, when ``reviewer`` may decide it: not its own proposer (by actor or by
    session), not in review mode."""
    p = P.get(store, proposal_id)
    access.admit_decision(store, caller, p.scope)
    if p.status != "open":
        raise ConflictError(f"proposal {p.id} is {p.status}; only open proposals can be {what}")
    if _proposer(p, reviewer, session):
        raise ForbiddenError(f"{reviewer} proposed {p.id} and cannot review it: another reviewer must")
    if P.in_review(store, p.scope, reviewer, caller is not None and caller.review):
        raise ForbiddenError(f"{reviewer} is in review mode on scope {p.scope!r} and cannot decide proposals")
    return p


def _accept(
    store: StoreCore, p: P.Proposal, reviewer: str, paths: Sequence[str] | None, reason: str
) -> Accepted:
    from gitmem.engine import ledger
    from gitmem.engine.batch import apply_batch

    ledger_text.screen_ledger_text(store, "reason", reason)  # kept with the decision (docs/guard.md)
    pending = [d for d in diff(store, p.id) if not d.decided]
    chosen = {d.path for d in pending} if paths is None else set(paths)
    unknown = chosen - {d.path for d in pending}
    if unknown:
        raise InvalidInputError(f"proposal {p.id} has no undecided change to {', '.join(sorted(unknown))}")
    conflicts = [d.path for d in pending if d.path in chosen and d.status == "conflict"]
    if conflicts:
        raise ConflictError(
            f"proposal {p.id} conflicts with scope {p.scope!r} at {', '.join(conflicts)}: the scope changed "
            "there since the proposal was made; see `gitmem review diff` (nothing was written)"
        )
    covered = sorted(v.id for v in P.versions(store, p.id) if {v.path, v.previous_path} & chosen)  # by id
    published: list[Version] = []
    # the plan's runs of one author (actor, session) each, in order: one batch each
    groups = [
        (who, [op for _, op in run]) for who, run in groupby(_plan_ops(store, p, chosen), key=lambda o: o[0])
    ]
    for (actor, session), batch_ops in groups:
        result = apply_batch(
            store, batch_ops, scope=p.scope, actor=actor, session=session, reviewed_by=reviewer
        )
        published.extend(result.versions)
    done = P.Decision("accepted", reviewer, config.now_rfc3339(), sorted(chosen), reason, covered)
    p.decisions.append(done)
    _settle(store, p)
    ledger.append(
        store,
        "proposal_accepted",
        {
            "id": p.id,
            "scope": p.scope,
            "proposer": p.actor,
            "session": p.session,
            "path_digests": sorted(ledger.digest(store, path) for path in chosen),
            "versions": [v.id for v in published],
        },
        actor=reviewer,
    )
    return Accepted(p, published, sorted(chosen))


def _settle(store: StoreCore, p: P.Proposal) -> None:
    """Save the decision; a proposal whose every path is decided is closed: ``accepted`` when any
    part was accepted, else ``rejected``."""
    if set(P.touched(store, p)) <= p.decided_paths:
        p.status = "accepted" if any(d.action == "accepted" for d in p.decisions) else "rejected"
    P.save(store, p)


def reject(
    store: StoreCore,
    proposal_id: str,
    *,
    reviewer: str,
    reason: str = "",
    paths: Sequence[str] | None = None,
    session: str | None = None,
    caller: Caller | None = None,
) -> P.Proposal:
    """Record that the proposal (or its ``paths``) is not published; the chain is kept for
    ``retention.min_days`` (:func:`drop_expired`)."""
    reviewer = ledger_text.recorded_actor(store, reviewer)
    with proposals_lock(store.path):
        p = _decidable(store, proposal_id, reviewer, "rejected", session, caller)
        return _reject(store, p, reviewer, reason, paths)


def _reject(
    store: StoreCore, p: P.Proposal, reviewer: str, reason: str, paths: Sequence[str] | None
) -> P.Proposal:
    from gitmem.engine import ledger

    ledger_text.screen_ledger_text(store, "reason", reason)  # kept in the ledger: before anything is saved
    undecided = [d.path for d in diff(store, p.id) if not d.decided]
    chosen = set(undecided) if paths is None else set(paths)
    if chosen - set(undecided):
        raise InvalidInputError(
            f"proposal {p.id} has no undecided change to {', '.join(sorted(chosen - set(undecided)))}"
        )
    p.decisions.append(P.Decision("rejected", reviewer, config.now_rfc3339(), sorted(chosen), reason))
    _settle(store, p)
    ledger.append(
        store,
        "proposal_rejected",
        {
            "id": p.id,
            "scope": p.scope,
            "proposer": p.actor,
            "session": p.session,
            "path_digests": sorted(ledger.digest(store, path) for path in chosen),
            "reason": reason,
        },
        actor=reviewer,
    )
    return p


@dataclass(frozen=True)
class Summary:
    """A proposal as ``review list`` and the server show it."""

    id: str
    scope: str
    owner: str
    actor: str
    session: str | None
    status: str
    created_at: str
    updated_at: str
    versions: int
    paths: list[str]
    pending: list[str]
    conflicts: list[str]
    decisions: list[P.Decision]


def summary(store: StoreCore, p: P.Proposal) -> Summary:
    diffs = diff(store, p.id)
    return Summary(
        p.id,
        p.scope,
        p.owner,
        p.actor,
        p.session,
        p.status,
        p.created_at,
        p.updated_at,
        len(P.versions(store, p.id)),
        [d.path for d in diffs],
        [d.path for d in diffs if not d.decided],
        [d.path for d in diffs if d.status == "conflict" and not d.decided],
        p.decisions,
    )


# ---------------------------------------------------------------------- erasing a proposal
ERASE_FILE = erase_recovery.ERASE_FILE  # the pending-erase record (gitmem.audit.erase_recovery)


@dataclass(frozen=True)
class Erased:
    """What :func:`erase` did: the proposal, the erasure's id, and the objects it purged."""

    proposal: P.Proposal
    id: str
    versions: list[str]
    purged: int
    kept: int


def erase(
    store: StoreCore,
    proposal_id: str,
    *,
    reviewer: str,
    reason: str,
    session: str | None = None,
    caller: Caller | None = None,
) -> Erased:
    """Reject a proposal (if still open) and erase its chain from the store: the objects only the
    proposal reaches are deny-listed, its ref deleted and those objects purged and proved gone, with
    a ``proposal_erased`` ledger entry (digests, never content). For a proposal that carried what
    must not stay (a secret the guard missed, poisoned text): a rejected proposal's chain is kept
    otherwise for ``retention.min_days``. Objects a scope or another ref reaches are kept (the
    scope's own history is what ``gitmem redact`` is for). Runs under the store lock, so pushes and
    rewrites wait; an erase killed half-way is finished by the next erase of that proposal, or,
    killed past the proposal's save, by the next open of the store (gitmem.audit.erase_recovery)."""
    from gitmem.audit import journal, purge_order
    from gitmem.engine import ledger
    from gitmem.git.purge import purge, reachable_retired

    reviewer = ledger_text.recorded_actor(store, reviewer)
    if not reason.strip():
        raise InvalidInputError("an erasure needs a reason (it is kept in the ledger)")
    ledger_text.screen_ledger_text(store, "reason", reason)
    access.admit_decision(store, caller, P.get(store, proposal_id).scope, "erase") if caller else None
    with purge_order.erasing(store, journal.store_lock):
        p = P.get(store, proposal_id)
        pending = erase_recovery.pending(store)
        if pending is not None and pending["proposal"] != p.id:
            raise ConflictError(
                f"the erasure of proposal {pending['proposal']} was interrupted: erase it again first"
            )
        if pending is None:
            if p.erased:
                raise ConflictError(f"proposal {p.id} was already erased ({p.erased})")
            if p.status == "open":
                _decidable(store, p.id, reviewer, "erased", session, caller)
            elif _proposer(p, reviewer, session):
                raise ForbiddenError(f"{reviewer} proposed {p.id} and cannot erase it: another reviewer must")
            pending = _plan_erase(store, p, reviewer, reason)
        candidates = set(pending["objects"])
        ledger.deny(store, sorted(candidates), f"proposal_erased {pending['id']}")
        purge_order.settle(store)  # a write that checked the deny-list before moved its ref by now
        tip = store.ref_target(p.ref)
        if tip is not None:
            delete_ref(store.repo, p.ref)  # past a lock a killed writer left (docs/durability.md)
        reached = reachable_retired(store, candidates, pending["baseline"])
        kept = set().union(*reached.values()) if reached else set()
        if ledger.find(store, "proposal_erased", "id", pending["id"]) is None:
            ledger.append(
                store,
                "proposal_erased",
                {
                    "id": pending["id"],
                    "proposal": p.id,
                    "scope": p.scope,
                    "proposer": p.actor,
                    "session": p.session,
                    "reason": pending["reason"],
                    "versions": pending["versions"],
                    "blob_digests": sorted(ledger.digest(store, b) for b in pending["blobs"]),
                    "retired_objects": len(candidates),
                    "retired_commits_digest": ledger.set_digest(store, candidates - set(pending["blobs"])),
                },
                actor=pending["reviewer"],
            )
        purge(store, sorted(candidates - kept))
        if p.status == "open":
            undecided = sorted(set(P.touched(store, p)) - p.decided_paths) if tip is not None else []
            p.decisions.append(
                P.Decision(
                    "rejected", pending["reviewer"], config.now_rfc3339(), undecided, pending["reason"]
                )
            )
            p.status = "rejected"
        p.erased = pending["id"]
        P.save(store, p)
        journal.private_files(store)
        erase_recovery.close(store, pending)  # the dreams quoting it; then the pending record goes
        if kept:
            raise IntegrityError(
                f"erasure {pending['id']}: {', '.join(sorted(reached))} came to reach {len(kept)} of the "
                "proposal's objects while it ran; those were kept, the rest purged (redact them there)"
            )
        return Erased(p, pending["id"], pending["versions"], len(candidates), 0)


def _plan_erase(store: StoreCore, p: P.Proposal, reviewer: str, reason: str) -> dict[str, Any]:
    """The objects only the proposal's chain reaches (exact: every object any other ref reaches is
    subtracted), written to the erase journal (0600, fsynced) before anything changes."""
    from gitmem.git.purge import _git

    tip = store.ref_target(p.ref)
    objects: set[str] = set()
    versions: list[str] = []
    if tip is not None:
        spec = [str(tip)] + ([f"^{p.base}"] if p.base and store.has_object(pygit2.Oid(hex=p.base)) else [])
        mine = _git(store, "rev-list", "--objects", "--no-object-names", *spec)
        others = _git(store, "rev-list", "--objects", "--no-object-names", f"--exclude={p.ref}", "--all")
        if mine.returncode != 0 or others.returncode != 0:
            raise IntegrityError(
                f"cannot list the objects of proposal {p.id}: {mine.stderr or others.stderr}"
            )
        objects = set(mine.stdout.split()) - set(others.stdout.split())
        versions = [v.id for v in P.versions(store, p.id)]
    repo = store.repo
    blobs = sorted(
        o for o in objects if repo.get(o) is not None and repo[o].type == pygit2.enums.ObjectType.BLOB
    )
    baseline = sorted(
        {
            str(r.target)
            for r in repo.references.iterator()
            if r.name != p.ref and isinstance(r.target, pygit2.Oid)
        }
    )
    plan = {
        "id": new_id("redact"),
        "proposal": p.id,
        "reviewer": reviewer,
        "reason": reason,
        "objects": sorted(objects),
        "blobs": blobs,
        "versions": versions,
        "baseline": baseline,
    }
    path = store.gitmem_dir / ERASE_FILE
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "w", encoding="utf-8") as fh:
        json.dump(plan, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return plan
