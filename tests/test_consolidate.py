"""The small packs writes leave are merged in-process (gitmem.git.consolidate), safely."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest

import gitmem
from gitmem.audit.verify import verify
from gitmem.git import consolidate
from gitmem.git.repo import STORE_LOCK
from tests.helpers import git


def _packs(path: Path) -> list[Path]:
    return sorted((path / "objects" / "pack").glob("pack-*.pack"))


def _loose(path: Path) -> int:
    return sum(len(os.listdir(d)) for d in (path / "objects").iterdir() if len(d.name) == 2 and d.is_dir())


def test_single_writes_pack_their_objects_and_maintenance_merges_the_packs(workspace: Path) -> None:
    with gitmem.create_store("small", home=workspace) as store:
        path = store.path
        loose = _loose(path)  # the ledger's first entry, made with the store
        versions = [store.write(f"/m/{k}.md", f"memory {k}\n") for k in range(3)]
        assert _loose(path) == loose and len(_packs(path)) >= 3  # no loose objects: a pack each
        for k in range(3, 60):
            versions.append(store.write(f"/m/{k}.md", f"memory {k}\n"))
        small = consolidate.small_packs(str(path / "objects" / "pack"))
        assert len(small) < consolidate.SMALL_PACKS_MAX + 8  # merged as they piled up
        assert len(_packs(path)) < 30
        assert [store.read(f"/m/{k}.md").content for k in range(60)] == [f"memory {k}\n" for k in range(60)]
        assert all(v is not None and store.read(v.path, version=v.id).content for v in versions)
    assert git(path, "fsck", "--full", "--strict").returncode == 0
    with gitmem.open_store(path) as again:
        assert verify(again.core, raise_on_failure=False).ok


def test_a_merge_keeps_every_object_and_deletes_only_the_merged_packs(workspace: Path) -> None:
    with gitmem.create_store("merge", home=workspace) as store:
        path = store.path
        for k in range(20):
            store.write(f"/a/{k}.md", f"a {k}\n")
        git(path, "repack", "-a", "-d", "-q")  # one big pack: left alone
        big = {p.name for p in _packs(path)}
        store.core.writes_unchecked = -(1 << 30)  # no merge by the writes themselves
        for k in range(consolidate.SMALL_PACKS_MAX + 2):
            store.write(f"/b/{k}.md", f"b {k}\n")
        pack_dir = path / "objects" / "pack"
        small = consolidate.small_packs(str(pack_dir))
        big_now = {p.name for p in _packs(path)} - {Path(s).name + ".pack" for s in small}
        kept_pack = Path(small[0] + ".keep")
        kept_pack.write_text("kept by the operator\n")  # a .keep pack is never merged
        objects_before = set(
            git(path, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").stdout.split()
        )
        merged = consolidate.merge_small_packs(str(path), str(path / "gitmem" / STORE_LOCK))
        assert merged == len(small) - 1
        after = {p.name for p in _packs(path)}
        assert big <= after and big_now <= after
        assert Path(small[0] + ".pack").exists() and kept_pack.exists()
        assert not any(Path(s + ".pack").exists() or Path(s + ".idx").exists() for s in small[1:])
        objects_after = set(
            git(path, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").stdout.split()
        )
        assert objects_before <= objects_after
        assert [store.read(f"/b/{k}.md").content for k in range(consolidate.SMALL_PACKS_MAX + 2)] == [
            f"b {k}\n" for k in range(consolidate.SMALL_PACKS_MAX + 2)
        ]
    assert git(path, "fsck", "--full", "--strict").returncode == 0


def test_no_merge_while_a_history_rewrite_holds_the_store_lock(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consolidate, "SMALL_PACKS_MAX", 3)
    with gitmem.create_store("held", home=workspace) as store:
        path = store.path
        store.core.writes_unchecked = -(1 << 30)
        for k in range(5):
            store.write(f"/c/{k}.md", f"c {k}\n")
        before = _packs(path)
        lock = path / "gitmem" / STORE_LOCK
        with open(lock, "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # as a redaction's purge holds it
            assert consolidate.merge_small_packs(str(path), str(lock)) == 0
            assert _packs(path) == before
        assert consolidate.merge_small_packs(str(path), str(lock)) == 5
        assert len(_packs(path)) == 1


def test_a_merge_that_dies_before_deleting_leaves_every_object(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consolidate, "SMALL_PACKS_MAX", 3)
    with gitmem.create_store("crash", home=workspace) as store:
        path = store.path
        store.core.writes_unchecked = -(1 << 30)
        for k in range(4):
            store.write(f"/d/{k}.md", f"d {k}\n")
        calls = []

        def flush_then_die(p: str) -> None:
            calls.append(p)
            raise KeyboardInterrupt  # the process dies after the merged pack, before any delete

        monkeypatch.setattr(consolidate, "syncfs", flush_then_die)
        with pytest.raises(KeyboardInterrupt):
            consolidate.merge_small_packs(str(path), str(path / "gitmem" / STORE_LOCK))
        assert calls and len(_packs(path)) == 5  # four small packs and the merged one
        assert [store.read(f"/d/{k}.md").content for k in range(4)] == [f"d {k}\n" for k in range(4)]
    assert git(path, "fsck", "--full", "--strict").returncode == 0


def test_index_oids_reads_what_git_lists(workspace: Path) -> None:
    with gitmem.create_store("ids", home=workspace) as store:
        store.write("/x.md", "x\n")
        path = store.path
    (idx,) = (path / "objects" / "pack").glob("*.idx")
    with open(idx, "rb") as fh:
        out = subprocess.run(["git", "show-index"], stdin=fh, capture_output=True, text=True).stdout
    listed = {line.split()[1] for line in out.splitlines()}
    assert {str(o) for o in consolidate.index_oids(str(idx))} == listed
    bad = path / "objects" / "pack" / "pack-bad.idx"
    bad.write_bytes(b"not an index")
    with pytest.raises(ValueError):
        consolidate.index_oids(str(bad))
