"""The write-time guard on the write path (docs/guard.md): one call, :func:`screen`, from
:func:`gitmem.engine.writer.check_limits`, which every library write and batch passes through.

``screen`` scans the planned content with the store's policy and either refuses the write
(:class:`~gitmem.errors.GuardRejectedError`: nothing is written) or notes the findings on the
change, so that the version's commit carries a ``Gitmem-Flag`` trailer; after the branch moved,
:func:`record_flags` appends one ``flag`` entry to the audit ledger for the flagged versions.
Neither the trailer nor the ledger holds the matched text: rule, kind and line only.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from gitmem.engine.change import Change
from gitmem.engine.guard_policy import policy_for as policy_for
from gitmem.engine.guard_policy import policy_of as policy_of
from gitmem.errors import GitmemError, GuardRejectedError
from gitmem.model.guard import Finding, GuardPolicy, action_for, decide, scan
from gitmem.model.guard_memo import CleanParagraphs

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore
    from gitmem.engine.rows import VersionRow
    from gitmem.git.blobs import StoredBlob

FLAG_TRAILER = "Gitmem-Flag"
MAX_FLAGS_IN_TRAILER = 10
MAX_IN_MESSAGE = 5


class ScreenedState(Protocol):
    """What :func:`screen` reads of the planner's scope state (gitmem.engine.writer.ScopeState):
    the scope, the file a path holds at its tip, and the policy read once per state."""

    scope: str
    guard: GuardPolicy | None

    def blob(self, path: str) -> StoredBlob | None: ...


# Per open store and scope: the paragraphs its rewrites were found clean in (docs/guard.md#speed).
# Per scope, so that how long a write's scan takes tells nothing about what another store, or
# another scope of the store (a token may be confined to one), holds; the last MEMO_SCOPES scopes
# written of each store keep theirs (each memo is bounded: gitmem.model.guard_memo).
MEMO_SCOPES = 4
_MEMOS: weakref.WeakKeyDictionary[StoreCore, OrderedDict[str, CleanParagraphs]] = weakref.WeakKeyDictionary()
_MEMOS_LOCK = threading.Lock()


def _memo(store: StoreCore, scope: str) -> CleanParagraphs:
    with _MEMOS_LOCK:
        scopes = _MEMOS.get(store)
        if scopes is None:
            scopes = _MEMOS[store] = OrderedDict()
        memo = scopes.get(scope)
        if memo is None:
            memo = scopes[scope] = CleanParagraphs()
            while len(scopes) > MEMO_SCOPES:
                scopes.popitem(last=False)
        else:
            scopes.move_to_end(scope)
        return memo


def screen(store: StoreCore, state: ScreenedState, change: Change) -> None:
    """Check one planned change. Raises GuardRejectedError when the policy rejects it; a change
    the policy flags gets its flagged findings in ``change.flags``. Content a rename carries
    unchanged was screened when it was written, as the pre-receive hook only scans new blobs."""
    data = change.data
    if data is None:
        return
    policy = state.guard
    if policy is None:  # read once per state (a batch or a group screens many changes on one)
        policy = state.guard = policy_for(store)
    if policy.secrets == "off" and policy.pii == "off" and not policy.patterns and not policy.deny_patterns:
        return
    if change.operation == "created" or change.previous_path is not None:
        screen_text(f"the path {change.path}", change.path, policy)  # a credential as a file name
    old = state.blob(change.previous_path or change.path) if change.operation != "created" else None
    if old is not None and old.data == data:
        return
    # a rewrite (most of it unchanged) rescans only the paragraphs not found clean before
    memo = _memo(store, state.scope) if old is not None else None
    findings = scan(data.decode("utf-8", "replace"), policy, memo=memo)
    verdict = decide(findings, policy)
    if verdict == "reject":
        refused = [f for f in findings if action_for(f, policy) == "reject"]
        raise GuardRejectedError(refusal(change.path, refused), tuple(refused))
    if verdict == "flag":
        change.flags.extend(f for f in findings if action_for(f, policy) == "flag")


def screen_text(where: str, text: str, policy: GuardPolicy) -> None:
    """Refuse ``text`` (a path, a description, a message) where the policy rejects a finding in it."""
    findings = scan(text, policy)
    refused = [f for f in findings if action_for(f, policy) == "reject"]
    if refused:
        raise GuardRejectedError(refusal(where, refused), tuple(refused))


def refusal(path: str, findings: Sequence[Finding]) -> str:
    """The message of a refused write: path, rules, lines, masked previews; never the text."""
    shown = "; ".join(f.describe() for f in findings[:MAX_IN_MESSAGE])
    more = f"; and {len(findings) - MAX_IN_MESSAGE} more" if len(findings) > MAX_IN_MESSAGE else ""
    return (
        f"{path}: refused by the store's guard: {shown}{more}. A memory store is no place for "
        "credentials: remove it (or change 'guard' in the store's gitmem.yaml, see docs/guard.md)"
    )


def flag_trailer(findings: Sequence[Finding]) -> str | None:
    """The value of the ``Gitmem-Flag`` trailer (None: nothing flagged), e.g.
    ``pii email line 3; secret jwt line 9``."""
    if not findings:
        return None
    parts = [f"{f.kind} {f.rule} line {f.line}" for f in findings[:MAX_FLAGS_IN_TRAILER]]
    if len(findings) > MAX_FLAGS_IN_TRAILER:
        parts.append(f"and {len(findings) - MAX_FLAGS_IN_TRAILER} more")
    return "; ".join(parts)


def finding_data(findings: Sequence[Finding]) -> list[dict[str, Any]]:
    """What the ledger keeps of findings: rule, kind, line (no content, no preview)."""
    return [{"rule": f.rule, "kind": f.kind, "line": f.line} for f in findings]


def record_flags(
    store: StoreCore,
    scope: str,
    changes: Sequence[Change],
    rows: Sequence[VersionRow],
    actor: str,
    session: str | None,
) -> None:
    """One ``flag`` ledger entry for the flagged versions just published (none: nothing).

    The versions are durable and published already, and their trailers say they are flagged: a
    ledger that cannot be appended to (``gitmem verify`` reports why) must not fail the write."""
    if not any(c.flags for c in changes):
        return
    from gitmem.engine import ledger

    # The path by keyed digest, never in clear: a path may be the secret, and the ledger cannot be
    # rewritten (docs/redaction.md); the audit view shows it through the version while unredacted.
    flagged = [
        {
            "version": r.id,
            "memory": r.memory_id,
            "path_digest": ledger.digest(store, r.path),
            "findings": finding_data(c.flags),
        }
        for c, r in zip(changes, rows, strict=True)
        if c.flags
    ]

    data: dict[str, Any] = {"scope": scope, "session": session, "versions": flagged}
    with contextlib.suppress(GitmemError):
        ledger.append(store, "flag", data, actor=actor)


def push_flags(policy: GuardPolicy, blobs: Sequence[tuple[str, str, bytes]]) -> list[dict[str, Any]]:
    """Flagged findings in pushed content: ``blobs`` are (commit id, path, data); returns one record
    per flagged file (the pre-receive hook already refused what the policy rejects)."""
    out = []
    for commit, path, data in blobs:
        findings = [
            f for f in scan(data.decode("utf-8", "replace"), policy) if action_for(f, policy) == "flag"
        ]
        if findings:
            out.append({"commit": commit, "path": path, "findings": finding_data(findings)})
    return out
