"""The server pool's id lookup: a store of this release is found by its id, which is its directory,
without a listing; one of the old layout (``stores/<name>.git``) is found in a listing of the
workspace, and concurrent misses share one listing (with 10,000 stores a listing reads 10,000
settings files); a store created after a listing is still found, and an unknown id is a 404."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

import gitmem
from gitmem.errors import NotFoundError
from gitmem.server import pool as pool_mod
from gitmem.server.pool import StorePool
from gitmem.store import StoreRef, all_refs
from tests.helpers import run_threads

UNKNOWN = "memstore_01ZZZZZZZZZZZZZZZZZZZZZZZZ"


def _old_layout_store(home: Path, name: str) -> tuple[str, Path]:
    """A store as the previous release laid it out: its name is its directory (id, path)."""
    with gitmem.create_store(name, home=home) as st:
        sid, path = st.settings.id, st.path
    old = home / "stores" / f"{name}.git"
    path.rename(old)
    return sid, old


def _counted_listing(monkeypatch: pytest.MonkeyPatch, delay: float = 0.0) -> list[int]:
    listings: list[int] = []
    real = all_refs

    def listing(home: str | os.PathLike[str] | None = None, *, strict: bool = True) -> list[StoreRef]:
        listings.append(threading.get_ident())
        time.sleep(delay)  # a big workspace: every other lookup arrives while this one runs
        return real(home, strict=strict)

    monkeypatch.setattr(pool_mod, "all_refs", listing)
    return listings


def test_concurrent_misses_share_one_listing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = [_old_layout_store(tmp_path, f"s{i}")[0] for i in range(5)]
    listings = _counted_listing(monkeypatch, delay=0.3)
    pool = StorePool(tmp_path)
    names: list[str] = []
    run_threads(lambda k: names.append(pool.name_of(ids[k % 5])), 16)
    assert sorted(names) == sorted(f"s{k % 5}" for k in range(16))
    assert len(listings) == 1
    assert pool.name_of(ids[2]) == "s2" and len(listings) == 1  # cached: no listing
    # a store of this release: its id is its directory, no listing at all
    with gitmem.create_store("fresh", home=tmp_path) as st:
        fresh = st.settings.id
    assert pool.name_of(fresh) == fresh and len(listings) == 1
    # an old-layout store made after that listing: its first lookup lists again and finds it
    late, _path = _old_layout_store(tmp_path, "late")
    assert pool.name_of(late) == "late"
    assert len(listings) == 2
    with pytest.raises(NotFoundError):
        pool.name_of(UNKNOWN)
    assert len(listings) == 3
    pool.close()


def test_a_settings_file_written_by_hand_is_still_found(tmp_path: Path) -> None:
    """An id line not in gitmem's own form (quoted, say) is still that store's id, in the old
    layout (found by a listing) as in this release's (found by its directory)."""
    sid, path = _old_layout_store(tmp_path, "hand")
    settings = path / "gitmem.yaml"
    settings.write_text(settings.read_text().replace(f"id: {sid}", f"id: '{sid}'"))
    assert f"id: '{sid}'" in settings.read_text()
    with gitmem.create_store("other", home=tmp_path) as st:
        other = st.settings.id
        mine = st.path / "gitmem.yaml"
    mine.write_text(mine.read_text().replace(f"id: {other}", f'id: "{other}"'))
    assert f'id: "{other}"' in mine.read_text()
    pool = StorePool(tmp_path)
    found: list[str] = []
    run_threads(lambda k: found.append(pool.name_of(sid)), 8)
    assert found == ["hand"] * 8
    assert pool.name_of(other) == other
    with pytest.raises(NotFoundError):
        pool.name_of(UNKNOWN)
    pool.close()
