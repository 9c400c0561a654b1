"""``bench/cluster_bench.py --quick`` on a real PostgreSQL and real node processes: every row is
measured, proxied reads answered, and the failover took at least what the lease makes it take."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pgkit import bindir

pytestmark = pytest.mark.slow  # runs a benchmark script end to end

ROOT = Path(__file__).resolve().parents[2]


def test_cluster_bench_quick(tmp_path: Path) -> None:
    if bindir() is None:
        pytest.skip("needs PostgreSQL (Debian package postgresql)")
    out = tmp_path / "c.json"
    res = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "cluster_bench.py"), "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert rows["writes_per_s, 1 node"] > 0 and rows["writes_per_s, 3 nodes"] > 0
    for key in ("retrieve_ms, home p50/p99", "retrieve_ms, non-home p50/p99"):
        p50, p99 = rows[key]
        assert math.isfinite(p50) and 0 < p50 <= p99
    # a SIGKILLed home's lease was renewed at most a beat before it died: no takeover before then
    assert rows["failover_s"] >= rows["lease_s"] * 0.5
    assert "failover: SIGKILL of the home" in res.stdout
