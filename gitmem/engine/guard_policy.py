"""The guard's policy of a store (docs/guard.md#policy-the-guard-key-of-gitmemyaml): the ``guard``
mapping of its settings as a :class:`~gitmem.model.guard.GuardPolicy`, cached by content. Apart
from :mod:`gitmem.engine.guard` so that the ledger's own check (:mod:`gitmem.engine.ledger_text`)
reads it without importing the write path's guard, which appends to the ledger."""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

from gitmem.model.guard import GuardPolicy

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore


def policy_for(store: StoreCore) -> GuardPolicy:
    """The policy a write to ``store`` is checked with: the ``guard`` of its settings. (Patterns
    remembered by redactions join it as ``deny_patterns``.)"""
    guard = store.settings.guard
    last = _LAST_POLICY
    if last is not None and last[0] is guard:  # the settings as last read: no canonical JSON again
        return last[1]
    policy = policy_of(guard)
    _remember_policy(guard, policy)
    return policy


# The guard mapping last checked and its policy (held, so its id is never another mapping's): a
# store's settings are read once and kept until their file changes (a new mapping then).
_LAST_POLICY: tuple[dict[str, Any], GuardPolicy] | None = None


def _remember_policy(guard: dict[str, Any], policy: GuardPolicy) -> None:
    global _LAST_POLICY
    _LAST_POLICY = (guard, policy)


def policy_of(guard: dict[str, Any], where: str = "gitmem.yaml") -> GuardPolicy:
    """:meth:`GuardPolicy.from_dict` of a settings ``guard`` mapping, cached by its content."""
    return _policy(json.dumps(guard, sort_keys=True), where)


@functools.lru_cache(maxsize=64)
def _policy(canonical: str, where: str) -> GuardPolicy:
    return GuardPolicy.from_dict(json.loads(canonical), where)
