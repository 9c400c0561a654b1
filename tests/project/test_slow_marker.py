"""The `slow` marker is registered and carried: `pytest -m "not slow"` is the quick loop (docs/testing notes)."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def test_the_slow_marker_is_registered(pytestconfig: pytest.Config) -> None:
    assert any(line.startswith("slow:") for line in pytestconfig.getini("markers"))


def test_some_scenario_tests_carry_the_slow_marker() -> None:
    marked = [p for p in TESTS.rglob("test_*.py") if "pytest.mark.slow" in p.read_text()]
    assert any(p.parent.name == "cluster" for p in marked)
