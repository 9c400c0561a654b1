"""``bench/serve_bench.py --many --quick`` runs and reports the many-stores row (no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs a benchmark script end to end

ROOT = Path(__file__).resolve().parents[2]


def test_serve_bench_many_quick(tmp_path: Path) -> None:
    out = tmp_path / "many.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "serve_bench.py"), "--many", "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    many = json.loads(out.read_text())["many"]
    assert many["stores"] == 60 and many["touched"] == 12 and many["clients"] == 8
    for phase in ("reads", "writes"):
        assert many[phase]["n"] == 32 and many[phase]["p99_ms"] >= many[phase]["p50_ms"] > 0
    assert many["peak_rss_mb"] > 0 and many["max_open_fds"] >= many["started_fds"] > 0
    assert "p99/p50" in proc.stdout and "open files at most" in proc.stdout
