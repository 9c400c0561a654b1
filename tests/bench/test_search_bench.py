"""The search benchmark runs end to end on a tiny store (numbers only, no timing asserts), and its
check that gitmem and the bare FTS5 table give the same answers holds."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "search_bench.py"


def test_search_bench_smoke(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("search_bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "out.json"
    assert bench.main(["--memories", "60", "--queries", "12", "--writes", "2", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["query"]["queries"] == 12 and results["query"]["mean_hits"] > 0
    assert results["query"]["ratio_median"] > 0 and results["write"]["ratio"] > 0
