"""``bench/rebuild_bench.py --quick`` completes and prints its table (no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs a benchmark script end to end

ROOT = Path(__file__).resolve().parents[2]


def test_rebuild_bench_quick_runs(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "rebuild_bench.py"),
            "--quick",
            "--json",
            str(out),
            "--cache",
            str(tmp_path / "cache"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    for layout in ("", ", flat", ", deep"):
        assert f"index rebuild, 500 mem / 2k ver{layout}" in res.stdout
    rows = json.loads(out.read_text())
    floors = ["git log --raw", "git log --raw", "rebuild of half as many"]
    assert [r["floor"] for r in rows] == floors * 3
    assert all(r["gitmem_s"] > 0 for r in rows)
    assert "linear in versions, flat: 2,000 vs 1,000 versions" in res.stdout
