"""``FileIssue``: a change that was not saved, and why (a session sync's refusals, a revert's)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FileIssue:
    """A change that was not saved, and why."""

    path: str
    reason: str
