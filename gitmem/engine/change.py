"""What one planned version does (the planners' answer): below the writer and the guard, which
both work on it (the guard screens a change and fills in its flags; the writer publishes it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gitmem.model.guard import Finding


@dataclass(frozen=True)
class Change:
    """What one version does: the planner's answer."""

    operation: str  # created | modified | deleted
    path: str
    data: bytes | None
    memory_id: str
    previous_path: str | None = None
    reverts: str | None = None  # revert-session: the session this version undoes (Gitmem-Reverts)
    #: What the guard flagged in ``data`` (gitmem.engine.guard.screen fills it while planning).
    flags: list[Finding] = field(default_factory=list, compare=False)
