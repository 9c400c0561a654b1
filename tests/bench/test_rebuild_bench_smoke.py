"""``bench/rebuild_bench.py --quick`` completes and prints its table (no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
    assert "index rebuild, 200 mem / 2k ver" in res.stdout
    rows = json.loads(out.read_text())
    assert [r["floor"] for r in rows] == ["git log --raw"]
    assert rows[0]["gitmem_s"] > 0
