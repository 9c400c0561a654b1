"""The process-wide registry of group-commit queues stays bounded (a server sees many stores)."""

from __future__ import annotations

from pathlib import Path

import pytest

import gitmem
from gitmem.engine import group


def test_idle_group_queues_are_dropped_past_the_bound(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(group, "_GROUPS_MAX", 4)
    monkeypatch.setattr(group, "_GROUPS", {})
    with gitmem.create_store("notes", home=workspace) as s:
        for i in range(10):
            s.write("/a.md", f"v{i}\n", scope=f"s{i}")
        assert len(group._GROUPS) <= 4
        assert [s.read("/a.md", scope=f"s{i}").content for i in range(10)] == [f"v{i}\n" for i in range(10)]
