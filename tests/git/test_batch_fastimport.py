"""Large batches go through git fast-import; the result must be exactly what pygit2 would write."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import gitmem
from gitmem.engine import batch, pipeline
from gitmem.engine.batch import BatchOp, apply_batch


def _ops() -> list[BatchOp]:
    ops = [BatchOp("write", f"/t{i % 5}/m{i}.md", f'c {i} "q" ü\n') for i in range(40)]
    return ops + [
        BatchOp("rename", "/base/old.md", new_path="/renamed/o.md"),
        BatchOp("write", "/t1/m1.md", "changed", description="d"),
        BatchOp("delete", "/dir/x.md"),
        BatchOp("create", "/dir", "now a file"),
        BatchOp("create", "/t0", "refused: a directory of memories is there"),
        BatchOp("write", '/sp ace/q"uote\\b.md', "odd path"),
        BatchOp("create", "/t1/m1.md/x", "refused: inside a memory"),
        BatchOp("delete", "/t2/m2.md"),
        BatchOp("create", "/t2/m2.md", "again"),
    ]


def _run(home: Path, minimum: int, monkeypatch: pytest.MonkeyPatch) -> tuple[gitmem.Store, batch.BatchResult]:
    monkeypatch.setattr(pipeline, "FAST_IMPORT_MIN", minimum)
    store = gitmem.create_store("s", home=home)
    store.write("/base/old.md", "o")
    store.write("/dir/x.md", "x")
    return store, apply_batch(store.core, _ops(), skip_refused=True, session="sesn_1")


def test_fast_import_writes_the_same_trees_as_pygit2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slow, slow_result = _run(tmp_path / "a", 10**9, monkeypatch)
    fast, fast_result = _run(tmp_path / "b", 1, monkeypatch)
    assert [str(r.error) for r in fast_result.refused] == [str(r.error) for r in slow_result.refused]
    assert len(fast_result.refused) == 2
    slow_trees = [slow.core.commit(v.commit).tree.id for v in slow_result.versions]
    fast_trees = [fast.core.commit(v.commit).tree.id for v in fast_result.versions]
    assert fast_trees == slow_trees and len(fast_trees) == 47


def test_fast_import_batch_moves_the_branch_once_and_indexes_like_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, result = _run(tmp_path, 1, monkeypatch)
    count = subprocess.run(
        ["git", "rev-list", "--count", "main"], cwd=store.path, capture_output=True, text=True, check=True
    )
    assert int(count.stdout) == 2 + len(result.versions)
    refs = subprocess.run(["git", "for-each-ref"], cwd=store.path, capture_output=True, text=True).stdout
    assert "gitmem-tmp" not in refs
    assert subprocess.run(["git", "fsck", "--strict"], cwd=store.path, capture_output=True).returncode == 0
    recorded = {
        (v.id, v.memory_id, v.operation, v.path, v.previous_path) for v in store.versions(scope="main")
    }
    store.core.index.rebuild()
    rebuilt = {
        (v.id, v.memory_id, v.operation, v.path, v.previous_path) for v in store.versions(scope="main")
    }
    assert rebuilt == recorded
    assert store.read("/renamed/o.md").memory_id == store.versions("/renamed/o.md")[-1].memory_id
    assert store.read("/t1/m1.md").description == "d"
