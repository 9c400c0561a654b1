"""`bench/serve_bench.py --quick` runs and reports every row (no timing is asserted)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs a benchmark script end to end

ROOT = Path(__file__).resolve().parents[2]


def test_serve_bench_quick(tmp_path: Path) -> None:
    out = tmp_path / "serve.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "serve_bench.py"), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    for n in ("clients_1", "clients_8"):
        assert set(result[n]) == {"create", "update", "retrieve", "list"}
        assert all(row["n"] > 0 and row["rps"] > 0 for row in result[n].values())
    assert all(math.isfinite(v) for v in result["ratios"].values())
    assert "target <= 1.5" in proc.stdout
    memory = result["memory"]  # a real `gitmem serve` subprocess, its peak RSS read from /proc
    assert memory["stores"] == 30 and memory["requests"] > 0 and memory["peak_rss_mb"] > 0
    assert "8 writers / 1 writer, durable versions/s" in proc.stdout and "peak RSS" in proc.stdout
