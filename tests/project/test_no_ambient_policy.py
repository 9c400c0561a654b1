"""No policy lives in a context variable (docs/access.md): review mode, the reader's proposal and
every other policy input arrive with the explicit Caller, never ambiently."""

from __future__ import annotations

from pathlib import Path

import gitmem

PACKAGE = Path(gitmem.__file__).parent


def test_the_library_keeps_no_policy_in_a_context_variable() -> None:
    found = [
        str(p.relative_to(PACKAGE))
        for p in sorted(PACKAGE.rglob("*.py"))
        if "contextvars" in p.read_text(encoding="utf-8") or "ContextVar" in p.read_text(encoding="utf-8")
    ]
    assert found == [], f"a context variable carries state in {found}: pass it with the Caller"
