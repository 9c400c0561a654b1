"""The redaction benchmark runs end to end on a small store (``--quick``), including the case of a
second scope holding the same content; no timing is asserted (timings belong to ``bench/``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import run_bench

pytestmark = pytest.mark.slow  # runs a benchmark script end to end


def small(tmp_path: Path, out: Path) -> list[str]:
    """A store smaller than --quick's, its figures to ``out``, its cache under ``tmp_path``."""
    return ["--versions", "300", "--memories", "40", "--json", str(out), "--cache", str(tmp_path / "cache")]


def test_redact_bench_quick_runs_every_case(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = run_bench("redact_bench.py", "--quick", "--no-compare", *small(tmp_path, out))
    assert res.returncode == 0, res.stderr
    rows = json.loads(out.read_text())
    assert [r["name"] for r in rows] == [
        "redact, early blob, 0k commits",
        "redact, recent blob, 0k commits",
        "redact, early, 2 scopes blob, 0k commits",
    ]
    assert all(r["gitmem_s"] > 0 for r in rows)


def test_redact_bench_quick_compares_with_filter_repo_or_says_what_is_missing(tmp_path: Path) -> None:
    """``--quick`` compares with git filter-repo (the dev extra installs it); in an environment
    without it the run stops at once, before building a store, and says how to install it."""
    probe = subprocess.run([sys.executable, "-c", "import git_filter_repo"], capture_output=True, check=False)
    out = tmp_path / "r.json"
    res = run_bench("redact_bench.py", "--quick", *small(tmp_path, out))
    if probe.returncode == 0:
        assert res.returncode == 0, res.stderr
        rows = json.loads(out.read_text())
        assert [r["floor"] for r in rows] == ["git filter-repo"] * 3
        assert all(r["gitmem_s"] > 0 and r["floor_s"] > 0 for r in rows)
    else:
        assert res.returncode == 1 and not out.exists()
        assert "git-filter-repo is not installed" in res.stderr and "pip install -e '.[dev]'" in res.stderr
        assert "--no-compare" in res.stderr
        assert not list((tmp_path / "cache").glob("*"))  # stopped before building anything
