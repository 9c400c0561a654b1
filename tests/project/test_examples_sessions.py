"""examples/two_sessions.py runs, and its second session sees what the first one learned."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two_sessions.py"


def test_two_sessions_example() -> None:
    out = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == "session 1: morning drink: coffee or tea? You said tea; noted. (Be brief.)"
    assert lines[1] == "  system prompt lists: assistant, handbook"
    assert "session 2: afternoon drink: making tea, as you like it. (Be brief.)" in lines
    assert [line.split(" (")[0] for line in lines if line.startswith("  saved")] == [
        "  saved created /log.md",
        "  saved created /scratch.md",
        "  saved created /user/preferences.md",
        "  saved deleted /scratch.md",
        "  saved modified /log.md",
    ]
    assert lines[-1] == "preferences: - prefers tea, no sugar"
