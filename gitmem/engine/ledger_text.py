"""The guard on free text bound for the audit ledger (docs/guard.md#text-in-the-audit-ledger).

A review or redaction reason, a store's name, description and metadata, and the names of who
acted and where (the actor, its session and scope; a push's ref names and commit authors) go into
``refs/gitmem/ledger``, which is hash-chained, checkpointed and cloned: nothing in it can be
redacted. :func:`screen_ledger_text` (with :func:`screen_settings`, :func:`screen_who`, and
:func:`refusal` for the pre-receive hook) refuse such text before the operation does anything, for
any finding the store's policy acts on (flag mode too: ledger text cannot be flagged and kept).
``gitmem.engine.ledger.append`` screens every entry's actor and the fields of :data:`LEDGER_TEXT`
and :data:`LEDGER_NAMES` again as a last line (:func:`screen_entry`), and :func:`settings_entry`
withholds what nobody screened from settings entries.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gitmem.engine.guard_policy import policy_for
from gitmem.errors import GuardRejectedError
from gitmem.model.guard import AllowEntry, Finding, GuardPolicy, action_for, scan
from gitmem.model.versions import resolve_actor

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
# The fields besides the actor that hold names a caller chose (who acted, where), screened again by
# ledger.append under :func:`name_policy` (``a[].b``: the ``b`` of each mapping in the list ``a``;
# a list of strings: each of them).
LEDGER_NAMES: dict[str, tuple[str, ...]] = {
    "push": ("authors", "session", "push_options", "updates[].ref"),
    "flag": ("scope", "session"),
}
_CLEAN_TEXTS: OrderedDict[tuple[GuardPolicy, str], None] = OrderedDict()
_CLEAN_TEXTS_MAX = 256
_CLEAN_LOCK = threading.Lock()


def acts(policy: GuardPolicy) -> bool:
    """Whether ``policy`` can find anything at all (``secrets: off``, ``pii: off``, no patterns:
    nothing is scanned)."""
    return not (
        policy.secrets == "off" and policy.pii == "off" and not policy.patterns and not policy.deny_patterns
    )


@functools.lru_cache(maxsize=64)
def name_policy(policy: GuardPolicy) -> GuardPolicy:
    """``policy`` for a name the ledger records (an actor, a commit's author or committer, a
    session, a scope or ref): the same, but an e-mail address in it is who acted (or whose scope
    it is), the identity the ledger is there to record, not PII to refuse (``pii: flag`` must not
    refuse every author). Secrets, the store's patterns and the other PII rules still apply; a
    secret inside an address still outranks it."""
    if policy.pii == "off":
        return policy
    return dataclasses.replace(policy, allow=(*policy.allow, AllowEntry("rule", "email")))


def ledger_findings(text: str, policy: GuardPolicy) -> list[Finding]:
    """The findings in ``text`` that keep it out of the ledger: every one the policy rejects *or
    flags* (flag mode included: a ledger entry cannot be redacted)."""
    return [f for f in scan(text, policy) if action_for(f, policy) != "none"]


def refusal(field: str, text: Any, policy: GuardPolicy) -> GuardRejectedError | None:
    """Why ``text`` may not go into the ledger field ``field`` under ``policy``: the error naming
    the field, the rules and masked previews (never the text), whose message ends before the
    caller's "nothing was written"; None when the guard finds nothing (clean texts are remembered,
    so a text screened again is a lookup)."""
    if not isinstance(text, str) or not text or not acts(policy):
        return None
    key = (policy, text)
    with _CLEAN_LOCK:
        if key in _CLEAN_TEXTS:
            _CLEAN_TEXTS.move_to_end(key)
            return None
    found = ledger_findings(text, policy)
    if found:
        shown = "; ".join(f.describe() for f in found[:MAX_IN_MESSAGE])
        more = f"; and {len(found) - MAX_IN_MESSAGE} more" if len(found) > MAX_IN_MESSAGE else ""
        return GuardRejectedError(
            f"{field}: refused by the store's guard: {shown}{more}. It would be kept in the audit "
            "ledger, which nothing can redact: remove it (see docs/guard.md#text-in-the-audit-ledger)",
            tuple(found),
        )
    with _CLEAN_LOCK:
        _CLEAN_TEXTS[key] = None
        while len(_CLEAN_TEXTS) > _CLEAN_TEXTS_MAX:
            _CLEAN_TEXTS.popitem(last=False)
    return None


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
    refused = refusal(field, text, policy)
    if refused is not None:
        raise GuardRejectedError(f"{refused.message}; nothing was written", refused.findings)


def screen_who(
    store: StoreCore | None,
    actor: str | None,
    session: str | None = None,
    scope: str | None = None,
    *,
    policies: Sequence[GuardPolicy] = (),
) -> None:
    """Refuse an operation before it writes anything when the guard finds anything in the actor it
    records, its session or its scope (names: :func:`name_policy`): each goes into the operation's
    ledger entries. Under ``policies`` when given (a new store's guard, a settings change's before
    and after), else the store's."""
    chosen = list(policies)
    if not chosen:
        if store is None:
            raise ValueError("screen_who needs a store or policies")
        chosen = [policy_for(store)]
    for policy in dict.fromkeys(chosen):
        if not acts(policy):
            continue
        names = name_policy(policy)
        screen_ledger_text(None, "actor", actor, names)
        screen_ledger_text(None, "session", session, names)
        screen_ledger_text(None, "scope", scope, names)


def recorded_actor(
    store: StoreCore, actor: str | None, session: str | None = None, scope: str | None = None
) -> str:
    """The actor an operation records (``resolve_actor``: as given, else the session's, else
    ``user:local``), refused with its session and scope when the store's guard finds anything in
    them (:func:`screen_who`): every write, proposal, review decision, redaction and compaction
    resolves its actor here, before it writes anything."""
    who = resolve_actor(actor, session)
    screen_who(store, who, session, scope)
    return who


def _texts(data: Mapping[str, Any], key: str) -> list[str]:
    """The strings at ``key`` of an entry's data (see :data:`LEDGER_NAMES`)."""
    head, _, rest = key.partition("[].")
    value = data.get(head)
    if rest:
        items = value if isinstance(value, list) else []
        return [t for v in items if isinstance(v, Mapping) for t in _texts(v, rest)]
    if isinstance(value, str):
        return [value]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def screen_entry(store: StoreCore, kind: str, data: Mapping[str, Any], actor: str | None) -> None:
    """The last line, in ``ledger.append``: the entry's actor and its fields in :data:`LEDGER_TEXT`
    and :data:`LEDGER_NAMES` screened again (its caller found them clean already: a lookup).
    GuardRejectedError before anything is appended."""
    policy = policy_for(store)
    if not acts(policy):
        return
    for key in LEDGER_TEXT.get(kind, ()):
        screen_ledger_text(None, f"the {kind} entry's {key}", data.get(key), policy)
    names = name_policy(policy)
    screen_ledger_text(None, f"the {kind} entry's actor", actor, names)
    for key in LEDGER_NAMES.get(kind, ()):
        for text in _texts(data, key):
            screen_ledger_text(None, f"the {kind} entry's {key}", text, names)


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
        found = ledger_findings(value, policy) if value and acts(policy) else []
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
