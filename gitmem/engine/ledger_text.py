"""The guard on free text bound for the audit ledger (docs/guard.md#text-in-the-audit-ledger).

A review or redaction reason, a store's name, description and metadata go into
``refs/gitmem/ledger``, which is hash-chained, checkpointed and cloned: nothing in it can be
redacted. :func:`screen_ledger_text` (and :func:`screen_settings`) refuse such text before the
operation does anything, for any finding the store's policy acts on (flag mode too: ledger text
cannot be flagged and kept). ``gitmem.engine.ledger.append`` screens the fields of
:data:`LEDGER_TEXT` again as a last line, and :func:`settings_entry` withholds what nobody screened
from settings entries.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gitmem.engine.guard_policy import policy_for
from gitmem.errors import GuardRejectedError
from gitmem.model.guard import Finding, GuardPolicy, action_for, scan

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore

MAX_IN_MESSAGE = 5
# The entries whose fields hold a caller's free text, screened again by ledger.append.
LEDGER_TEXT: dict[str, tuple[str, ...]] = {
    "store_created": ("name",),
    "redaction": ("reason",),
    "proposal_rejected": ("reason",),
    "proposal_erased": ("reason",),
}
_CLEAN_TEXTS: OrderedDict[tuple[GuardPolicy, str], None] = OrderedDict()
_CLEAN_TEXTS_MAX = 64
_CLEAN_LOCK = threading.Lock()


def _acts(policy: GuardPolicy) -> bool:
    return not (
        policy.secrets == "off" and policy.pii == "off" and not policy.patterns and not policy.deny_patterns
    )


def ledger_findings(text: str, policy: GuardPolicy) -> list[Finding]:
    """The findings in ``text`` that keep it out of the ledger: every one the policy rejects *or
    flags* (flag mode included: a ledger entry cannot be redacted)."""
    return [f for f in scan(text, policy) if action_for(f, policy) != "none"]


def screen_ledger_text(
    store: StoreCore | None, field: str, text: Any, policy: GuardPolicy | None = None
) -> None:
    """Refuse ``text`` for the ledger field ``field`` (GuardRejectedError naming it, with rules and
    masked previews only) when the guard finds anything in it; ``policy`` defaults to the store's."""
    if not isinstance(text, str) or not text:
        return
    if policy is None:
        if store is None:
            raise ValueError("screen_ledger_text needs a store or a policy")
        policy = policy_for(store)
    if not _acts(policy):
        return
    key = (policy, text)
    with _CLEAN_LOCK:
        if key in _CLEAN_TEXTS:
            _CLEAN_TEXTS.move_to_end(key)
            return
    found = ledger_findings(text, policy)
    if found:
        shown = "; ".join(f.describe() for f in found[:MAX_IN_MESSAGE])
        more = f"; and {len(found) - MAX_IN_MESSAGE} more" if len(found) > MAX_IN_MESSAGE else ""
        raise GuardRejectedError(
            f"{field}: refused by the store's guard: {shown}{more}. It would be kept in the audit "
            "ledger, which nothing can redact: remove it (see docs/guard.md#text-in-the-audit-ledger); "
            "nothing was written",
            tuple(found),
        )
    with _CLEAN_LOCK:
        _CLEAN_TEXTS[key] = None
        while len(_CLEAN_TEXTS) > _CLEAN_TEXTS_MAX:
            _CLEAN_TEXTS.popitem(last=False)


def _leaves(where: str, value: Any) -> list[tuple[str, str]]:
    """The strings in a settings value (dict keys included), each with the dotted key it is at."""
    if isinstance(value, str):
        return [(where, value)]
    if isinstance(value, Mapping):
        out: list[tuple[str, str]] = []
        for k, v in value.items():
            out += [(where, k)] if isinstance(k, str) else []
            out += _leaves(f"{where}.{k}", v)
        return out
    if isinstance(value, (list, tuple)):
        return [leaf for n, v in enumerate(value) for leaf in _leaves(f"{where}[{n}]", v)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _leaves(where, dataclasses.asdict(value))
    return []


def screen_settings(policies: Sequence[GuardPolicy], changes: Mapping[str, Any]) -> None:
    """Refuse settings values bound for the ledger (a ``settings_changed`` entry records every
    changed value): every string of every changed key but ``guard`` (the policy itself), under
    each of ``policies`` (the store's policy before the change and after it)."""
    for key, value in changes.items():
        if key == "guard":
            continue
        for where, text in _leaves(key, value):
            for policy in dict.fromkeys(policies):
                screen_ledger_text(None, where, text, policy)


WITHHELD = "[withheld by the guard: {}]"


def withhold(policy: GuardPolicy, value: Any) -> Any:
    """``value`` (plain JSON data) with every string the guard finds anything in replaced by a
    ``[withheld by the guard: <rules>]`` marker: the last line for settings entries, whose old
    values (a hand edit of ``gitmem.yaml``, a store from before this screen) were never screened."""
    if isinstance(value, str):
        found = ledger_findings(value, policy) if value and _acts(policy) else []
        return WITHHELD.format(", ".join(sorted({f"{f.kind} {f.rule}" for f in found}))) if found else value
    if isinstance(value, Mapping):
        return {withhold(policy, k): withhold(policy, v) for k, v in value.items()}
    if isinstance(value, list):
        return [withhold(policy, v) for v in value]
    return value


def settings_entry(store: StoreCore, data: dict[str, Any]) -> dict[str, Any]:
    """A settings entry's data as the ledger keeps it: new values were refused before the change
    (:func:`screen_settings`), but old ones, a hand edit's and the guard's own ``allow`` entries
    (the very text they let through) were not, so what the store's policy without its allow-list
    finds in any of them is withheld."""
    out: dict[str, Any] = withhold(dataclasses.replace(policy_for(store), allow=()), data)
    return out
