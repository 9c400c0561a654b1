"""max_store_bytes holds across scopes even when writers in different scopes race (processes)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import gitmem
from gitmem.config import Limits
from gitmem.engine.batch import BatchOp, apply_batch
from gitmem.errors import LimitExceededError


def _fill(args: tuple[str, str, int]) -> int:
    path, scope, count = args
    with gitmem.open_store(path) as store:
        ops = [BatchOp("write", f"/{scope}/m{i}.md", "x" * 1000) for i in range(count)]
        result = apply_batch(store.core, ops, scope=scope, skip_refused=True)
        assert all(isinstance(r.error, LimitExceededError) for r in result.refused)
        return len(result.versions)


def _single(args: tuple[str, str, int]) -> int:
    path, scope, count = args
    written = 0
    with gitmem.open_store(path) as store:
        for i in range(count):
            try:
                store.write(f"/{scope}/s{i}.md", "y" * 1000, scope=scope)
                written += 1
            except LimitExceededError:
                pass
    return written


def test_writers_in_different_scopes_never_overshoot_max_store_bytes(workspace: Path) -> None:
    limits = Limits(max_memory_bytes=2000, max_store_bytes=30_000)
    with gitmem.create_store("tight", limits=limits, home=workspace) as store:
        path = str(store.path)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        batches = pool.map_async(_fill, [(path, f"b{i}", 20) for i in range(2)])
        singles = pool.map_async(_single, [(path, f"s{i}", 20) for i in range(2)])
        written = sum(batches.get(timeout=120)) + sum(singles.get(timeout=120))
    with gitmem.open_store(path) as store:
        store.core.index.rebuild()
        total = store.core.index.store_bytes()
    assert total == written * 1000
    assert 25_000 <= total <= 30_000  # full, and never past the limit
