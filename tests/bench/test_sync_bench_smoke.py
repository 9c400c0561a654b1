"""``bench/sync_bench.py --quick`` completes and prints its rows: each sync committed one version
per changed file and left the mount's store holding what ``apply_batch`` wrote to the floor's (the
bench checks it and fails otherwise); no timing is asserted (timings belong to ``bench/``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_bench

pytestmark = pytest.mark.slow  # runs a benchmark script end to end


def test_sync_bench_quick_reports_every_row(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    res = run_bench("sync_bench.py", "--quick", "--json", str(out), "--cache", str(tmp_path / "cache"))
    assert res.returncode == 0, res.stderr
    for row in (
        "session start (materialise 1000 files): ",
        "sync of 100 changed files: ",
        "apply_batch of the same 100 writes: ",
        "ratio sync / apply_batch: ",
    ):
        assert row in res.stdout, res.stdout
    figures = json.loads(out.read_text())
    assert (figures["memories"], figures["changes"], figures["rounds"]) == (1000, 100, 1)
    assert figures["versions_per_sync"] == 100  # one version per changed file
    assert figures["paths_equal"] == 100  # both stores hold the last round's content
    assert figures["session_start_s"] > 0 and figures["sync_s"] > 0 and figures["apply_batch_s"] > 0
    assert (
        abs(figures["ratio"] - figures["sync_s"] / figures["apply_batch_s"]) < 0.05 * figures["ratio"] + 0.01
    )
