"""`bench/console_bench.py --quick` runs and reports both rows (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs a benchmark script end to end

pytest.importorskip("jinja2", reason="the console needs jinja2 (pip install 'gitmem-store[server]')")
ROOT = Path(__file__).resolve().parents[2]


def test_console_bench_quick(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "console_bench.py"), "--quick", "--json", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    rows = json.loads(out.read_text())
    assert [r["case"] for r in rows] == ["store page, 300 memories", "history page, 300 versions"]
    assert all(r["page_s"] > 0 and r["api_s"] > 0 for r in rows)
