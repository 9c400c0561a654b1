"""The server pool's id lookup: concurrent misses share one scan of the workspace (with 10,000
stores a scan reads 10,000 settings files), a store created after a scan is still found, and an
unknown id is still a 404."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import gitmem
from gitmem.errors import NotFoundError
from gitmem.server import pool as pool_mod
from gitmem.server.pool import StorePool
from tests.helpers import run_threads


def test_concurrent_misses_share_one_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = []
    for i in range(5):
        with gitmem.create_store(f"s{i}", home=tmp_path) as st:
            ids.append(st.settings.id)
    scans = []
    real = pool_mod.list_stores

    def slow_scan(home: Path) -> list[gitmem.config.StoreSettings]:
        scans.append(threading.get_ident())
        time.sleep(0.3)  # a big workspace: every other lookup arrives while this one runs
        return real(home)

    monkeypatch.setattr(pool_mod, "list_stores", slow_scan)
    pool = StorePool(tmp_path)
    names: list[str] = []
    run_threads(lambda k: names.append(pool.name_of(ids[k % 5])), 16)
    assert sorted(names) == sorted(f"s{k % 5}" for k in range(16))
    assert len(scans) == 1
    # a store made after that scan: its first lookup scans again and finds it
    with gitmem.create_store("late", home=tmp_path) as st:
        late = st.settings.id
    assert pool.name_of(late) == "late"
    assert len(scans) == 2
    with pytest.raises(NotFoundError):
        pool.name_of("memstore_01ZZZZZZZZZZZZZZZZZZZZZZZZ")
    assert len(scans) == 3
    pool.close()
