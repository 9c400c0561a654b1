"""What runs when a store handle meets new commits, and after a history rewrite.

The lists live here, in the base layer, so every layer can run them and none has to import the one
that fills them: the engine runs :data:`NEW_COMMIT` when a handle opens and when its index meets
new commits (gitmem.engine.core), the audit layer runs :data:`AFTER_REWRITE` once a redaction or
compaction is complete (gitmem.audit.journal). The push layer's two hooks (record spooled pushes,
push a rewrite to the read replicas) are registered by :func:`gitmem.install_default_hooks`, which
``gitmem/__init__.py`` calls: every process that imports any part of gitmem has them, however it
opens a store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Called with a store handle (gitmem.engine.core.StoreCore) on open and when its index meets new commits.
NEW_COMMIT: list[Callable[[Any], object]] = []
#: Called with the store handle after a rewrite completed and its store lock was released.
AFTER_REWRITE: list[Callable[[Any], object]] = []


def register(hooks: list[Callable[[Any], object]], hook: Callable[[Any], object]) -> None:
    """Add ``hook`` to ``hooks`` once (registering twice is a no-op)."""
    if hook not in hooks:
        hooks.append(hook)
