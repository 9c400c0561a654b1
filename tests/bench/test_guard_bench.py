"""The guard benchmark runs end to end with --quick (numbers only, no timing asserts): real writes
of a 10 kB and a 100 kB memory with and without the scan, and the corpus false-positive rate."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "guard_bench.py"


def test_guard_bench_quick_smoke(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("guard_bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclass looks its module up
    spec.loader.exec_module(bench)
    out = tmp_path / "out.json"
    assert bench.main(["--quick", "--rounds", "2", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert {(r["size"], r["policy"]) for r in results["writes"]} == {
        (size, policy) for size in (10_000, 100_000) for policy in bench.POLICIES
    }
    assert all(r["write_ms"] > 0 and math.isfinite(r["ratio"]) and r["ratio"] > 0 for r in results["writes"])
    assert results["false_positives"]["negatives"] > 20
    assert results["false_positives"]["flagged"] == 0
