"""The tests, benchmarks and examples use one HTTP client, httpx2 (the one the SDKs depend on),
declared in the dev extra: plain ``httpx`` is a second client that nothing declares."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLAIN = re.compile(r"^\s*(import httpx\b(?!2)|from httpx\b(?!2))", re.MULTILINE)


def test_nothing_imports_plain_httpx() -> None:
    found = [
        str(p.relative_to(ROOT))
        for folder in ("gitmem", "tests", "bench", "examples")
        for p in (ROOT / folder).rglob("*.py")
        if PLAIN.search(p.read_text(encoding="utf-8"))
    ]
    assert not found, f"import httpx2 (as httpx) instead of plain httpx in: {found}"


def test_httpx2_is_declared_for_the_tests_and_the_demo() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    dev = pyproject.split("dev = [", 1)[1].split("]", 1)[0]
    demo = pyproject.split("demo = [", 1)[1].split("]", 1)[0]
    assert '"httpx2' in dev and '"httpx2' in demo
