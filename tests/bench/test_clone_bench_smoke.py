"""``bench/clone_bench.py --quick`` (on a smaller store than its 2k / 20k) completes and prints
its rows (no timing asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_bench

pytestmark = pytest.mark.slow  # runs a benchmark script end to end


def test_clone_bench_quick_runs(tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    res = run_bench(
        "clone_bench.py", "--quick", "--json", str(out), "--memories", "500", "--versions", "2000",
        "--cache", str(tmp_path / "cache"),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "clone + first ls, 500 mem / 2k ver" in res.stdout
    rows = json.loads(out.read_text())
    assert [r["floor"] for r in rows] == ["git clone --no-local"] * 3
    assert rows[0]["limit"] == 1.5 and all(r["gitmem_s"] > 0 for r in rows)
