"""The benchmark's pieces work on a tiny store: they build it, measure, and produce numbers.

No timing is asserted (timings belong to ``bench/run.py``); what is asserted is that the generated
store is what gitmem would have written, and that each measurement returns finite, positive figures.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

import gitmem

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import common, run  # noqa: E402

TINY = common.Spec(memories=12, versions=30)


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    built = common.cached_store(TINY, cache=tmp_path / "cache", log=lambda _msg: None)
    return common.work_copy(built, tmp_path / "work")


def _numbers(result: common.Result) -> None:
    assert result.gitmem_s > 0 and result.floor_s > 0
    assert math.isfinite(result.ratio)


def test_generated_store_is_a_valid_gitmem_store(tiny: Path) -> None:
    store = gitmem.open_store(tiny)
    assert len(store.versions(scope="main")) == TINY.versions
    assert len(store.list("/")) == TINY.memories
    path = common.memory_path(3, TINY.memories)
    assert store.read(path).content.startswith("# memory 3, version ")  # type: ignore[union-attr]
    store.close()
    fsck = subprocess.run(["git", "-C", str(tiny), "fsck", "--strict"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr


def test_generation_is_deterministic() -> None:
    a = list(common.fast_import_stream(common.spec_ops(TINY), TINY.memories))
    b = list(common.fast_import_stream(common.spec_ops(TINY), TINY.memories))
    assert a == b


def test_write_measurement_produces_numbers(tiny: Path) -> None:
    results = run.measure_write(tiny, "tiny", rounds=2, memory=1, memories=TINY.memories)
    for result in results:
        _numbers(result)
    assert [r.floor for r in results] == [
        "raw pygit2, unsynced",
        "raw pygit2, libgit2 fsync",
        "raw pygit2 + one syncfs",
    ]
    assert [r.limit for r in results] == [None, 1.0, 1.25]
    assert "| write, tiny " in common.table(results)


def test_group_commit_and_clone_measurements_produce_numbers(tmp_path: Path, tiny: Path) -> None:
    results = run.measure_group(tiny, writers=3, per_writer=2, rounds=1)
    assert [r.limit for r in results] == [0.25, 0.5]  # threads >= 4x one writer, processes >= 2x
    for result in results:
        _numbers(result)
    with gitmem.open_store(tiny) as store:  # every group-commit write landed
        # 1 writer x 4, 3 threads x 2, 3 processes x 2 plus one untimed warm-up write each
        assert sum(1 for v in store.versions() if v.path.startswith("/group/")) == 4 + 6 + 6 + 3
    _numbers(run.measure_clone(tiny, "tiny", tmp_path))


@pytest.mark.slow  # runs the benchmark script end to end
def test_run_quick_prints_its_table(tmp_path: Path) -> None:
    """``bench/run.py --quick`` completes and prints every row (no timing asserted); stores of
    1,000 versions, not the quick run's 5,000, which only took longer to build."""
    res = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "run.py"),
            "--quick",
            "--versions",
            "1000",
            "--cache",
            str(tmp_path / "cache"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    for row in (
        "raw pygit2, unsynced",
        "raw pygit2, libgit2 fsync",
        "raw pygit2 + one syncfs",
        "raw tree[path]",
        "git fast-import",
        "git log --raw",
        "group commit, 8 threads",
        "group commit, 8 processes",
        "git clone --bare --no-local",
        "pre- plus post-receive added to a 1-commit push",
    ):
        assert row in res.stdout, row


def test_read_and_history_measurements_produce_numbers(tiny: Path) -> None:
    _numbers(run.measure_read(tiny, "tiny", rounds=1, memories=TINY.memories, per_round=5))
    history = run.measure_history(tiny, "tiny", rounds=1, git_rounds=1, memory=2, memories=TINY.memories)
    _numbers(history)
    assert "MISMATCH" not in history.note


def test_history_length_measurement_compares_two_stores(tmp_path: Path, tiny: Path) -> None:
    longer = common.cached_store(common.Spec(12, 60), cache=tmp_path / "cache", log=lambda _msg: None)
    result = run.measure_history_length(tiny, common.work_copy(longer, tmp_path / "work"), rounds=2)
    _numbers(result)
    assert result.name == "write, 12 mem: 60 vs 30 versions"


def test_seeded_store_has_one_version_per_memory_plus_modifications(tmp_path: Path) -> None:
    spec = common.Spec(memories=30, versions=40, seed_chunk=10)
    built = common.cached_store(spec, cache=tmp_path / "cache", log=lambda _msg: None)
    store = gitmem.open_store(built.path)
    assert len(store.list("/")) == 30
    assert len(store.versions(scope="main")) == 40
    store.close()
    log = subprocess.run(
        ["git", "-C", str(built.path), "rev-list", "--count", "main"], capture_output=True, text=True
    )
    assert log.stdout.strip() == "13"  # 3 seed commits + 10 single-memory modifications
