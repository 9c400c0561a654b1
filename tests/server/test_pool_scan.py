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


def _no_full_scan(home: Path) -> list[gitmem.config.StoreSettings]:
    raise AssertionError("every settings file is in gitmem's form: no full scan")


def test_concurrent_misses_share_one_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = []
    for i in range(5):
        with gitmem.create_store(f"s{i}", home=tmp_path) as st:
            ids.append(st.settings.id)
    scans = []
    real = StorePool._quick_scan

    def slow_scan(self: StorePool) -> tuple[dict[str, str], bool]:
        scans.append(threading.get_ident())
        time.sleep(0.3)  # a big workspace: every other lookup arrives while this one runs
        return real(self)

    monkeypatch.setattr(StorePool, "_quick_scan", slow_scan)
    monkeypatch.setattr(pool_mod, "list_stores", _no_full_scan)
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


def test_a_settings_file_written_by_hand_is_still_found(tmp_path: Path) -> None:
    """An id line not in gitmem's own form (quoted, say): the quick scan is incomplete, so the
    lookup reads every settings file as before."""
    with gitmem.create_store("hand", home=tmp_path) as st:
        sid = st.settings.id
        settings = st.path / "gitmem.yaml"
    settings.write_text(settings.read_text().replace(f"id: {sid}", f"id: '{sid}'"))
    with gitmem.create_store("other", home=tmp_path) as st:
        other = st.settings.id
    pool = StorePool(tmp_path)
    found: list[str] = []
    run_threads(lambda k: found.append(pool.name_of(sid)), 8)  # waiters on an incomplete scan read all
    assert found == ["hand"] * 8
    assert pool.name_of(other) == "other"
    with pytest.raises(NotFoundError):
        pool.name_of("memstore_01ZZZZZZZZZZZZZZZZZZZZZZZZ")
    pool.close()
