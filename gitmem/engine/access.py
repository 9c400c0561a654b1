"""The engine's one access decision for a :class:`gitmem.model.caller.Caller` (docs/access.md).

Every write, redaction, review decision and read that carries a caller asks here, below every
face: may it read or write this store and scope (read-only tokens, scope confinement), which actor
and session the versions carry (a token's own, never one the request claims), whether its writes
go to review (the caller's mode, or the store's ``acl.review``), and whether it holds the right an
operation needs (``redact``, ``review``, ``erase``, ``compact``, ``settings``, ``manage``);
who may read a proposal (its proposer and reviewers) and so what a dream sent to review, what a
dream's requester may have the dreamer publish, and who may have a redaction's receipt (the whole
entry, or nothing).
A caller of None is the local full-trust caller of before (the library's defaults).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gitmem.engine.core import StoreCore
from gitmem.errors import AccessError, NotFoundError
from gitmem.model import policy
from gitmem.model.caller import Caller

if TYPE_CHECKING:
    from gitmem.engine.proposals import Proposal


@dataclass(frozen=True)
class Admitted:
    """What a write by the caller carries: the actor, the session, and whether it is reviewed."""

    actor: str | None
    session: str | None
    review: bool


def admit_write(
    store: StoreCore, caller: Caller | None, scope: str, actor: str | None, session: str | None
) -> Admitted:
    """A write to ``scope`` by ``caller``: ForbiddenError when it may not; its attribution."""
    if caller is None:
        return Admitted(actor, session, False)
    caller.check_write(store.settings.id, scope)
    return Admitted(caller.claim_actor(actor), caller.claim_session(session), caller.review)


def admit_read(store: StoreCore, caller: Caller | None, scope: str | None) -> None:
    if caller is not None:
        caller.check_read(store.settings.id, scope)


def history_scope(store: StoreCore, caller: Caller | None, scope: str | None) -> str | None:
    """The scope a history read by ``caller`` covers: a scope-confined caller's own when it names
    none (it never sees another scope's versions); ForbiddenError for another scope or store."""
    if caller is None:
        return scope
    if scope is None:
        scope = caller.scope
    caller.check_read(store.settings.id, scope)
    return scope


def admit_version(store: StoreCore, caller: Caller | None, version_id: str, scope: str) -> None:
    """A version looked up by id: one of a scope the caller may not read is not found (as an
    unknown id: no oracle for other scopes' history)."""
    if caller is None:
        return
    caller.check_read(store.settings.id, None)
    if not caller.scope_ok(scope):
        raise NotFoundError(f"version {version_id} does not exist")


def proposes(caller: Caller, p: Proposal) -> bool:
    """Whether ``caller`` made proposal ``p``: its owner (a session, else an actor) or its actor."""
    return (caller.owner is not None and p.owner == caller.owner) or (
        caller.actor is not None and p.actor == caller.actor
    )


def may_see_proposal(store: StoreCore, caller: Caller | None, p: Proposal) -> bool:
    """The one rule for reading a proposal (its record, versions, paths, diff; docs/access.md, "Who
    receives which refs"): a caller that may read its scope, and is its proposer or a reviewer
    of that store (:meth:`Caller.reviews`). A read-only caller, or another caller in review mode, is
    neither; nor is a token that holds ``review`` through a read-write grant on another store."""
    if caller is None:
        return True
    if not caller.may_read(store.settings.id, p.scope):
        return False
    return caller.reviews(store.settings.id) or proposes(caller, p)


def admit_proposal(store: StoreCore, caller: Caller | None, p: Proposal) -> Proposal:
    """``p`` when ``caller`` may read it (:func:`may_see_proposal`), else NotFoundError with the
    very message of an unknown id (gitmem.engine.proposals.get): no existence oracle."""
    if not may_see_proposal(store, caller, p):
        raise NotFoundError(f"proposal {p.id} does not exist in store {store.name!r}")
    return p


def may_see_dream_review(
    store: StoreCore | None, caller: Caller | None, record: Mapping[str, Any], p: Proposal | None
) -> bool:
    """Whether ``caller`` may see what a dream sent to review and is not published (its changes
    waiting in its proposal, rejected or erased there; its refused writes): exactly who may read
    that proposal (:func:`may_see_proposal`), ``p``, kept in ``store``, the store the dream wrote.
    Without the proposal's record (none was made yet, it was dropped after ``retention.min_days``,
    or the store is not at hand) only a reviewer of that store, in the dream's scope
    (docs/dreams.md, "Who sees a dream's changes")."""
    if caller is None:
        return True
    if store is not None and p is not None:
        return may_see_proposal(store, caller, p)
    wrote = str(record.get("output_id") or record.get("store_id") or "")
    return caller.may_read(wrote, record.get("scope")) and caller.reviews(wrote)


def may_see_dream_output(caller: Caller | None, record: Mapping[str, Any]) -> bool:
    """Whether ``caller`` may see what a dream published: a reader of the store it wrote (the
    input for ``update_existing``, its copy for ``create_new``) in the dream's scope."""
    if caller is None:
        return True
    wrote = str(record.get("output_id") or record.get("store_id") or "")
    return caller.may_read(wrote, record.get("scope"))


def dream_review(acl: dict[str, Any], scope: str, requester: str, review: bool) -> bool:
    """Whether a dream that ``requester`` asks for, writing ``scope`` of a store with ``acl``, goes
    to review (docs/dreams.md, "Who may ask"). The dreamer writes as ``service:dreamer``, so the
    requester's own rules follow its dream: an actor ``acl.review`` names gets a reviewed dream
    (True), and one ``acl.write`` shuts out of the scope may ask only for a reviewed dream, whose
    reviewer must be allowed to write it (ForbiddenError for a dream that would publish)."""
    from gitmem.engine.proposals import acl_reviews

    if review or acl_reviews(acl, scope, requester):
        return True
    denied = policy.check_acl(acl, scope, requester)
    if denied:
        raise AccessError(
            f"{denied[0].message}: a dream it asks for may not publish there for it; ask for a "
            "reviewed dream (gitmem.review true), whose changes a reviewer decides"
        )
    return False


def admit_receipt(store: StoreCore, caller: Caller | None, redaction_id: str, scopes: set[str]) -> None:
    """A redaction's receipt for ``caller`` (docs/redaction.md, "Receipts and scopes"): the receipt
    is the redaction's whole ledger entry, bound by the log's inclusion proof (no part of it
    verifies alone), and the entry names the versions, paths and authors of every scope the
    redaction rewrote. So a caller that may not read every one of ``scopes`` (a scope-confined
    token, for a redaction that also rewrote another scope; or an entry that names no scope) is
    refused, 403, without naming the other scopes."""
    if caller is None:
        return
    caller.check_read(store.settings.id, None)
    if not scopes or not all(caller.scope_ok(s) for s in scopes):
        raise AccessError(
            f"{caller.who} may not have the receipt of {redaction_id}: the redaction also rewrote the "
            f"history of a scope it may not read, and the receipt carries the whole ledger entry "
            f"(every scope's versions, paths and authors), which its proof covers as one: no part of "
            f"it verifies alone. Ask a caller that may read every scope of the store"
        )


def reader(caller: Caller | None, actor: str | None, session: str | None) -> str | None:
    """Whose open proposal a read shows on top: the caller's own when it is in review mode."""
    if caller is not None:
        return caller.owner if caller.review else None
    return session or actor


def admit_redaction(store: StoreCore, caller: Caller | None, scopes: list[str]) -> str | None:
    """A redaction touching ``scopes`` by ``caller``: it needs the ``redact`` right, may not be
    in review mode (refused, 403 / exit 6: a reviewer-free rewrite of history is what review mode
    exists to prevent), and must be able to write every scope whose history it rewrites.
    Returns the actor it is recorded as."""
    if caller is None:
        return None
    caller.require("redact", "redact history")
    if caller.review:
        raise AccessError(
            f"{caller.who} is in review mode: a redaction rewrites published history, which review "
            "mode never does; ask an admin to redact"
        )
    for scope in scopes:
        if not caller.may_write(store.settings.id, scope):
            raise AccessError(
                f"{caller.who} may not redact this content: it is also in the history of scope "
                f"{scope!r}, which it may not write"
            )
    return caller.actor


def admit_decision(store: StoreCore, caller: Caller | None, scope: str, right: str = "review") -> str | None:
    """A review decision (accept, reject: ``review``; erase: ``erase``) on ``scope``."""
    if caller is None:
        return None
    caller.check_read(store.settings.id, scope)
    caller.require(right, "decide proposals" if right == "review" else "erase proposals")
    if caller.review:
        raise AccessError(f"{caller.who} is in review mode: it may not decide proposals")
    return caller.actor


def admit_right(store: StoreCore, caller: Caller | None, right: str, what: str) -> None:
    if caller is not None:
        caller.check_read(store.settings.id, None)
        caller.require(right, what)
