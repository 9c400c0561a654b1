"""Merge a store's small packs into one, in-process (docs/durability.md, "Maintenance").

Every write publishes its objects as a small pack of its own (gitmem/git/packwriter.py): two files
in ``objects/pack/`` instead of five or six loose files, each in an ``objects/xx/`` directory that
may have to be made first. Left alone, the small packs pile up and every lookup that misses
searches them all, so maintenance merges them once there are :data:`SMALL_PACKS_MAX`: their
objects are read back, written as one pack with :func:`gitmem.git.packwriter.encode_pack` (no
deltas, no subprocess: a few milliseconds for a few hundred objects, where ``git repack`` takes
about 50 ms to start), the new pack is flushed, and only then are the small ones deleted. Larger
packs are left to ``git repack -d --geometric=2`` (:meth:`gitmem.git.repo.Repo.repack`).

Safety, the same as a repack's:

- the merge holds the store lock (``gitmem/lock``) shared, so it never runs beside a history
  rewrite, whose purge holds it exclusively (a merge that read a pack before a purge and wrote its
  pack after it would put the purged objects back);
- a small pack is deleted only once the merged pack holding every one of its objects is in place
  and flushed: a crash at any point leaves every object in at least one pack on disk;
- a reader that had a deleted pack open keeps reading it (its file stays open); one that looks for
  an object in it afterwards misses, refreshes its list of packs and finds the merged one, as
  after ``git repack -d``;
- two merges at once (two processes) may both write a merged pack; each deletes only packs whose
  objects its own flushed pack holds, so nothing is lost, and a pack the other deleted first is
  skipped. A pack with a ``.keep`` file is never touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
from collections.abc import Iterator

import pygit2

from gitmem.errors import GitmemError
from gitmem.git.intent import syncfs
from gitmem.git.locks import close_lock_fd, open_lock_fd
from gitmem.git.packwriter import encode_pack, install_pack

SMALL_PACK_BYTES = 256 << 10  # a pack this small or smaller is merged in-process
SMALL_PACKS_MAX = 16  # merge once there are this many small packs
MERGE_MAX_BYTES = 8 << 20  # at most this many bytes of small packs in one merge
_SIDE_FILES = (".pack", ".rev", ".bitmap", ".mtimes", ".promisor")  # deleted after the .idx


def small_packs(pack_dir: str) -> list[str]:
    """Paths (without suffix) of the mergeable small packs: a ``.pack`` of at most
    :data:`SMALL_PACK_BYTES` with its ``.idx``, no ``.keep``; oldest first."""
    try:
        names = set(os.listdir(pack_dir))
    except FileNotFoundError:
        return []
    found: list[tuple[float, str]] = []
    for name in names:
        if not (name.startswith("pack-") and name.endswith(".pack")):
            continue
        base = name[: -len(".pack")]
        if base + ".idx" not in names or base + ".keep" in names:
            continue
        try:
            st = os.stat(os.path.join(pack_dir, name))
        except FileNotFoundError:
            continue
        if st.st_size <= SMALL_PACK_BYTES:
            found.append((st.st_mtime, os.path.join(pack_dir, base)))
    return [path for _mtime, path in sorted(found)]


def needs_merge(pack_dir: str) -> bool:
    return len(small_packs(pack_dir)) >= SMALL_PACKS_MAX


def index_oids(idx_path: str) -> list[pygit2.Oid]:
    """The object ids a version-2 pack index lists (what its pack holds)."""
    with open(idx_path, "rb") as fh:
        data = fh.read()
    if data[:8] != b"\377tOc\0\0\0\2" or len(data) < 8 + 1024:
        raise ValueError(f"{idx_path}: not a version-2 pack index")
    count = struct.unpack_from(">I", data, 8 + 255 * 4)[0]
    start = 8 + 1024
    if len(data) < start + 20 * count:
        raise ValueError(f"{idx_path}: truncated")
    return [pygit2.Oid(raw=data[start + 20 * i : start + 20 * (i + 1)]) for i in range(count)]


def merge_small_packs(git_dir: str, store_lock: str) -> int:
    """Merge the small packs of the repository at ``git_dir`` into one when there are enough of
    them (:func:`needs_merge`); returns how many packs were merged (0: nothing done, also when
    a history rewrite holds ``store_lock`` or another merge of this store runs)."""
    pack_dir = os.path.join(git_dir, "objects", "pack")
    if not needs_merge(pack_dir):
        return 0
    try:
        return _locked_merge(git_dir, pack_dir, store_lock)
    except OSError as exc:  # the write this follows is published: it must not fail for it
        raise GitmemError(f"cannot merge the small packs of {git_dir}: {exc}") from None


def _locked_merge(git_dir: str, pack_dir: str, store_lock: str) -> int:
    os.makedirs(os.path.dirname(store_lock), exist_ok=True)
    lock = open_lock_fd(store_lock)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # a history rewrite runs; it repacks what it touches
        mine = open_lock_fd(store_lock + "-merge")
        try:
            try:
                fcntl.flock(mine, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return 0  # another merge of this store runs
            return _merge(git_dir, pack_dir)
        finally:
            close_lock_fd(mine)
    finally:
        close_lock_fd(lock)


def _merge(git_dir: str, pack_dir: str) -> int:
    packs = small_packs(pack_dir)
    chosen: list[str] = []
    total = 0
    for base in packs:
        try:
            size = os.path.getsize(base + ".pack")
        except FileNotFoundError:
            continue  # removed since it was listed (a repack, another merge): not this merge's
        if chosen and total + size > MERGE_MAX_BYTES:
            break
        chosen.append(base)
        total += size
    if len(chosen) < 2:
        return 0
    odb = pygit2.Odb(os.path.join(git_dir, "objects"))
    objects: dict[pygit2.Oid, tuple[int, bytes]] = {}
    merged: list[str] = []
    for base in chosen:
        try:
            oids = index_oids(base + ".idx")
            for oid in oids:
                if oid not in objects:
                    kind, data = odb.read(oid)
                    objects[oid] = (int(kind), data)
        except (OSError, ValueError, KeyError, pygit2.GitError):
            continue  # deleted meanwhile (another merge or a repack), or unreadable: leave it
        merged.append(base)
    if len(merged) < 2:
        return 0
    pack, index, name = encode_pack(objects)
    new = install_pack(pack_dir, name, pack, index)[: -len(".pack")]
    syncfs(pack_dir)  # the merged pack is on disk before any pack it replaces is deleted
    _drop_midx_naming(pack_dir, merged)
    for base in merged:
        if base == new:
            continue
        for suffix in (".idx", *_SIDE_FILES):  # the index first: no new reader finds the pack
            with contextlib.suppress(FileNotFoundError):
                os.unlink(base + suffix)
    return len(merged)


def _drop_midx_naming(pack_dir: str, bases: list[str]) -> None:
    """Remove a multi-pack index (``git multi-pack-index write``, ``git maintenance``) that names
    one of the packs about to be deleted, with its bitmap and reverse index, as ``git repack -d``
    does: left, it names a missing pack and ``git fsck`` fails ("failed to load pack entry").
    Readers fall back to the packs themselves."""
    midx = os.path.join(pack_dir, "multi-pack-index")
    try:
        with open(midx, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return
    if not any(os.path.basename(b).encode() + b".idx\0" in data for b in bases):
        return
    for name in os.listdir(pack_dir):
        if name == "multi-pack-index" or name.startswith("multi-pack-index-"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(pack_dir, name))


@contextlib.contextmanager
def merges_paused(store_lock: str) -> Iterator[None]:
    """No merge of this store starts inside the block (one running is waited for): ``git fsck``
    lists the packs first and reads them after, and a pack a merge deleted meanwhile fails it
    ("packfile ... index not opened") although every object is in the merged pack. Where the lock
    file cannot be opened (a read-only store, a clone without ``gitmem/``), nothing is paused:
    no merge can run there either."""
    try:
        fd = open_lock_fd(store_lock + "-merge")
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        close_lock_fd(fd)
