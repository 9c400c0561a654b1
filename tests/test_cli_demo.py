"""The ``make demo`` tour runs end to end (examples are run by a test, so they never rot)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parent.parent / "examples" / "demo.py"


def test_demo_tour_runs_and_shows_history() -> None:
    proc = subprocess.run([sys.executable, str(DEMO)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "$ gitmem store create notes" in out
    assert "Error: /prefs/editor.md already exists in scope 'main'" in out
    assert "Gitmem-Actor: session:sesn_demo" in out  # plain git log shows the trailers
    assert "-Alice edits with vim.\n+Alice edits with helix.\n" in out
    assert out.endswith("demo finished: every step behaved as expected\n")
