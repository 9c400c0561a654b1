"""The small packs writes leave are merged in-process (gitmem.git.consolidate), safely."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest

import gitmem
from gitmem.audit.verify import verify
from gitmem.engine import pipeline
from gitmem.git import consolidate, intent
from gitmem.git.repo import STORE_LOCK
from tests.helpers import git


@pytest.fixture(autouse=True)
def _every_write_a_pack(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lone writes keep loose objects; here every write publishes a pack of its own, as group
    commits and batches do, so that small packs pile up quickly."""
    monkeypatch.setattr(pipeline, "PACK_MIN", 1)  # group commits and batches alike


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


def _unmaintained(store: gitmem.Store, prefix: str, n: int) -> None:
    """``n`` writes under ``/prefix/``, each a small pack, with no merge by the writes themselves
    (the test merges by hand)."""
    store.core.writes_unchecked = -(1 << 30)
    for k in range(n):
        store.write(f"/{prefix}/{k}.md", f"{prefix} {k}\n")


def _all_objects(path: Path) -> set[str]:
    return set(git(path, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").stdout.split())


def test_a_merge_keeps_every_object_and_deletes_the_merged_packs_only_after_a_flush(workspace: Path) -> None:
    with gitmem.create_store("merge", home=workspace) as store:
        path = store.path
        for k in range(20):
            store.write(f"/a/{k}.md", f"a {k}\n")
        git(path, "repack", "-a", "-d", "-q")  # one big pack: left alone
        big = {p.name for p in _packs(path)}
        n = consolidate.SMALL_PACKS_MAX + 2
        _unmaintained(store, "b", n)
        pack_dir = path / "objects" / "pack"
        small = consolidate.small_packs(str(pack_dir))
        kept_pack = Path(small[0] + ".keep")
        kept_pack.write_text("kept by the operator\n")  # a .keep pack is never merged
        before = _all_objects(path)
        at = intent.flushes(str(path))
        replaced = consolidate.merge_small_packs(str(path), str(path / "gitmem" / STORE_LOCK))
        assert sorted(replaced) == sorted(small[1:])
        # The merged pack is not flushed yet: nothing is deleted.
        assert not consolidate.remove_replaced(str(path), replaced, at)
        assert all(Path(s + ".pack").exists() for s in small)
        assert _all_objects(path) == before
        store.write("/c.md", "a write: its publish flushes the filesystem\n")
        assert consolidate.remove_replaced(str(path), replaced, at)
        after = {p.name for p in _packs(path)}
        assert big <= after and Path(small[0] + ".pack").exists() and kept_pack.exists()
        assert not any(Path(s + ".pack").exists() or Path(s + ".idx").exists() for s in small[1:])
        assert before <= _all_objects(path)
        assert [store.read(f"/b/{k}.md").content for k in range(n)] == [f"b {k}\n" for k in range(n)]
    assert git(path, "fsck", "--full", "--strict").returncode == 0


def test_no_merge_while_a_history_rewrite_holds_the_store_lock(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consolidate, "SMALL_PACKS_MAX", 3)
    with gitmem.create_store("held", home=workspace) as store:
        path = store.path
        _unmaintained(store, "c", 5)
        before = _packs(path)
        lock = path / "gitmem" / STORE_LOCK
        with open(lock, "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # as a redaction's purge holds it
            assert consolidate.merge_small_packs(str(path), str(lock)) == []
            assert _packs(path) == before
        at = intent.flushes(str(path))
        replaced = consolidate.merge_small_packs(str(path), str(lock))
        assert len(replaced) == len(before) == 5
        store.write("/d.md", "flushed\n")
        assert consolidate.remove_replaced(str(path), replaced, at)
        assert len(_packs(path)) == 2  # the merged pack and the last write's own


def test_a_handle_merges_as_it_writes_and_deletes_after_its_next_flush(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consolidate, "SMALL_PACKS_MAX", 4)
    with gitmem.create_store("handle", home=workspace) as store:
        path = store.path
        for k in range(4):
            store.write(f"/e/{k}.md", f"e {k}\n")
        store.core.writes_unchecked = 1 << 30  # the next write looks
        store.write("/e/4.md", "e 4\n")
        assert store.core._replaced is not None  # merged; the small packs wait for a flush
        waiting = list(store.core._replaced[0])
        assert all(Path(p + ".pack").exists() for p in waiting)
        store.core.writes_unchecked = 1 << 30
        store.write("/e/5.md", "e 5\n")  # flushed by its own publish: the next look deletes
        assert not any(Path(p + ".pack").exists() for p in waiting)
        assert [store.read(f"/e/{k}.md").content for k in range(6)] == [f"e {k}\n" for k in range(6)]
    assert git(path, "fsck", "--full", "--strict").returncode == 0


def test_a_handle_beside_other_writer_processes_flushes_its_merge_and_deletes_at_once(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Most groups are other processes' publishes there: the packs a merge replaced must not wait
    for this handle's next flush (every process would see them as small packs to merge again)."""
    monkeypatch.setattr(consolidate, "SMALL_PACKS_MAX", 4)
    with gitmem.create_store("elsewhere", home=workspace) as store:
        path = store.path
        _unmaintained(store, "o", 4)
        store.core.writers_elsewhere = True  # as after a group commit that met a queue
        before = set(_packs(path))
        flushed = intent.flushes(str(path))
        store.core.writes_unchecked = 1 << 30  # the next write looks
        store.write("/o/4.md", "o 4\n")
        assert store.core._replaced is None  # merged and deleted: nothing waits
        assert intent.flushes(str(path)) == flushed + 2  # the write's flush, and the merge's own
        assert len(before - set(_packs(path))) >= 4  # the merged packs are gone
        assert [store.read(f"/o/{k}.md").content for k in range(5)] == [f"o {k}\n" for k in range(5)]
    assert git(path, "fsck", "--full", "--strict").returncode == 0


def test_maintenance_counts_the_versions_a_handle_published(workspace: Path) -> None:
    """A group or batch of several versions counts each toward the next look at the packs."""
    from gitmem.engine.batch import BatchOp, apply_batch
    from gitmem.engine.writer import MAINTENANCE_EVERY

    with gitmem.create_store("counted", home=workspace) as store:
        store.write("/first.md", "first\n")  # a handle's first write looks
        assert store.core.writes_unchecked == 0
        ops = [BatchOp("write", f"/b/{k}.md", content=f"b {k}\n") for k in range(MAINTENANCE_EVERY - 1)]
        apply_batch(store.core, ops)
        assert store.core.writes_unchecked == MAINTENANCE_EVERY - 1  # one batch, its versions counted
        store.write("/last.md", "last\n")
        assert store.core.writes_unchecked == 0  # the 8th version looked


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


def test_packs_with_deltas_are_read_back_and_whole_packs_copied_as_stored(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consolidate, "SMALL_PACKS_MAX", 3)
    with gitmem.create_store("deltas", home=workspace) as store:
        path = store.path
        store.core.writes_unchecked = -(1 << 30)
        text = "".join(f"line {i} of a long memory that changes a little each time\n" for i in range(200))
        for k in range(6):
            store.write("/long.md", text + f"edit {k}\n")
        git(path, "repack", "-a", "-d", "-f", "-q", "--window=10")  # one small pack with deltas
        (delta_pack,) = _packs(path)
        assert "delta" in git(path, "verify-pack", "-v", str(delta_pack.with_suffix(".idx"))).stdout
        for k in range(3):
            store.write(f"/w/{k}.md", f"whole {k}\n")  # small packs of whole objects
        before = _all_objects(path)
        at = intent.flushes(str(path))
        replaced = consolidate.merge_small_packs(str(path), str(path / "gitmem" / STORE_LOCK))
        assert str(delta_pack.with_suffix("")) in replaced and len(replaced) == 4
        store.write("/flush.md", "flush\n")
        assert consolidate.remove_replaced(str(path), replaced, at)
        assert not delta_pack.exists()
        assert before <= _all_objects(path)
        assert store.read("/long.md").content == text + "edit 5\n"
        for p in _packs(path):
            assert git(path, "verify-pack", str(p.with_suffix(".idx"))).returncode == 0
    assert git(path, "fsck", "--full", "--strict").returncode == 0


def test_a_pack_whose_bytes_do_not_match_its_index_is_not_merged(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consolidate, "SMALL_PACKS_MAX", 3)
    with gitmem.create_store("damaged", home=workspace) as store:
        path = store.path
        _unmaintained(store, "z", 4)
        victim = consolidate.small_packs(str(path / "objects" / "pack"))[-1]
        data = bytearray(Path(victim + ".pack").read_bytes())
        data[20] ^= 0xFF  # inside the first entry: its checksum no longer matches the index
        Path(victim + ".pack").chmod(0o644)
        Path(victim + ".pack").write_bytes(bytes(data))
        replaced = consolidate.merge_small_packs(str(path), str(path / "gitmem" / STORE_LOCK))
        assert victim not in replaced and len(replaced) >= 2
