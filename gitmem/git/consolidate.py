"""Merge a store's small packs into one, in-process (docs/durability.md, "Maintenance").

Every group commit and batch publishes its objects as a small pack of its own
(gitmem/git/packwriter.py), and so does every push. Left alone, the small packs pile up and every lookup that misses
searches them all, so maintenance merges them once there are :data:`SMALL_PACKS_MAX`: their
objects are read back, written as one pack with :func:`gitmem.git.packwriter.encode_pack` (no
deltas, no subprocess: about a millisecond for a few hundred objects, where ``git repack`` takes
about 50 ms to start), and the small ones are deleted once a flush has carried the new pack to
disk: the next write's own flush, so a merge costs no flush of its own. Larger
packs are left to ``git repack -d --geometric=2`` (:meth:`gitmem.git.repo.Repo.repack`).

Safety, the same as a repack's:

- the merge holds the store lock (``gitmem/lock``) shared, so it never runs beside a history
  rewrite, whose purge holds it exclusively (a merge that read a pack before a purge and wrote its
  pack after it would put the purged objects back);
- a small pack is deleted only once the merged pack holding every one of its objects is in place
  and a later flush of the filesystem (counted by :func:`gitmem.git.intent.flushes`) made it
  durable: a crash at any point leaves every object in at least one pack on disk (at worst in
  both, until a later merge or repack);
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
import zlib
from collections.abc import Iterator

import pygit2

from gitmem.errors import GitmemError
from gitmem.git import intent
from gitmem.git.intent import syncfs
from gitmem.git.locks import close_lock_fd, open_lock_fd
from gitmem.git.packwriter import install_pack, pack_entries, whole_entry
from gitmem.git.repo import STORE_LOCK

SMALL_PACK_BYTES = 1 << 20  # a pack this small or smaller is merged in-process
SMALL_PACKS_MAX = 16  # merge the packs of one size tier once there are this many
TIER_BYTES = 64 << 10  # tier 0: packs under 64 KiB (a group commit's own); tier 1: up to SMALL_PACK_BYTES
MERGE_MAX_BYTES = 8 << 20  # at most this many bytes of small packs in one merge
_SIDE_FILES = (".pack", ".rev", ".bitmap", ".mtimes", ".promisor")  # deleted after the .idx


def _scan(pack_dir: str) -> list[tuple[str, int]]:
    """(path without suffix, size) of every mergeable small pack: a ``.pack`` of at most
    :data:`SMALL_PACK_BYTES` with its ``.idx``, no ``.keep``; oldest first. One listing and
    one ``stat`` a pack."""
    try:
        names = set(os.listdir(pack_dir))
    except FileNotFoundError:
        return []
    found: list[tuple[float, str, int]] = []
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
            found.append((st.st_mtime, os.path.join(pack_dir, base), st.st_size))
    return [(path, size) for _mtime, path, size in sorted(found)]


def small_packs(pack_dir: str, tier: int | None = None) -> list[str]:
    """Paths (without suffix) of the mergeable small packs (only those of size ``tier``, if
    given); oldest first."""
    return [path for path, size in _scan(pack_dir) if tier is None or _tier(size) == tier]


def _tier(size: int) -> int:
    return 0 if size < TIER_BYTES else 1


def _mergeable(scan: list[tuple[str, int]]) -> int | None:
    counts = [0, 0]
    for _path, size in scan:
        counts[_tier(size)] += 1
    for tier, count in enumerate(counts):
        if count >= SMALL_PACKS_MAX:
            return tier
    return None


def mergeable_tier(pack_dir: str) -> int | None:
    """The smallest size tier holding :data:`SMALL_PACKS_MAX` small packs, or None. Packs are
    merged with packs of about their size (a group commit's or push's own first, then merges), so
    an object is copied about twice before ``git repack`` takes over, not once every merge."""
    return _mergeable(_scan(pack_dir))


def needs_merge(pack_dir: str) -> bool:
    return mergeable_tier(pack_dir) is not None


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


def merge_small_packs(git_dir: str, store_lock: str, odb: pygit2.Odb | None = None) -> list[str]:
    """Merge the small packs of one size tier of the repository at ``git_dir`` into one pack when
    there are enough of them (:func:`needs_merge`), reading their objects through ``odb`` (the
    store's own, else one opened here). Returns the packs the merged one replaces (paths without
    suffix), still in place: :func:`remove_replaced` deletes them once a flush has carried the
    merged pack to disk. Empty when nothing was done, also when a history rewrite holds
    ``store_lock`` or another merge of this store runs."""
    pack_dir = os.path.join(git_dir, "objects", "pack")
    if not needs_merge(pack_dir):
        return []
    try:
        return _locked_merge(git_dir, pack_dir, store_lock, odb)
    except OSError as exc:  # the write this follows is published: it must not fail for it
        raise GitmemError(f"cannot merge the small packs of {git_dir}: {exc}") from None


def _locked_merge(git_dir: str, pack_dir: str, store_lock: str, odb: pygit2.Odb | None) -> list[str]:
    os.makedirs(os.path.dirname(store_lock), exist_ok=True)
    lock = open_lock_fd(store_lock)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return []  # a history rewrite runs; it repacks what it touches
        mine = open_lock_fd(store_lock + "-merge")
        try:
            try:
                fcntl.flock(mine, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return []  # another merge of this store runs
            return _merge(git_dir, pack_dir, odb)
        finally:
            close_lock_fd(mine)
    finally:
        close_lock_fd(lock)


def remove_replaced(git_dir: str, packs: list[str], flushes_at: int) -> bool:
    """Delete ``packs`` (what :func:`merge_small_packs` returned when this process had made
    ``flushes_at`` flushes of the store's filesystem) once a later flush has made the merged pack
    durable; False (nothing deleted) until then. The ``.idx`` goes first: no new reader finds the
    pack; one that has it open keeps reading it."""
    if intent.flushes(git_dir) <= flushes_at:
        return False
    try:
        mine = open_lock_fd(store_lock_of(git_dir) + "-merge")
        try:
            try:
                fcntl.flock(mine, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # a merge runs, or verify's fsck paused them: later
            pack_dir = os.path.join(git_dir, "objects", "pack")
            _drop_midx_naming(pack_dir, packs)
            for base in packs:
                for suffix in (".idx", *_SIDE_FILES):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(base + suffix)
        finally:
            close_lock_fd(mine)
    except OSError as exc:
        raise GitmemError(f"cannot delete the merged small packs of {git_dir}: {exc}") from None
    return True


def store_lock_of(git_dir: str) -> str:
    """The store lock, ``gitmem/lock`` in the git directory."""
    return os.path.join(git_dir, "gitmem", STORE_LOCK)


def merge_now(git_dir: str, odb: pygit2.Odb | None = None) -> int:
    """:func:`merge_small_packs`, then a flush of its own and the replaced packs deleted at once
    (maintenance that does not wait for the next write's flush). Returns how many packs went."""
    at = intent.flushes(git_dir)
    replaced = merge_small_packs(git_dir, store_lock_of(git_dir), odb)
    if not replaced:
        return 0
    syncfs(os.path.join(git_dir, "objects", "pack"))
    intent.note_flush(git_dir)
    remove_replaced(git_dir, replaced, at)
    return len(replaced)


def _merge(git_dir: str, pack_dir: str, odb: pygit2.Odb | None) -> list[str]:
    scan = _scan(pack_dir)  # again under the merge lock: another merge may have run meanwhile
    tier = _mergeable(scan)
    if tier is None:
        return []
    chosen: list[str] = []
    total = 0
    for base, size in scan:
        if _tier(size) != tier:
            continue
        if chosen and total + size > MERGE_MAX_BYTES:
            break
        chosen.append(base)
        total += size
    if len(chosen) < 2:
        return []
    if odb is None:
        odb = pygit2.Odb(os.path.join(git_dir, "objects"))
    entries: dict[pygit2.Oid, bytes] = {}
    merged: list[str] = []
    for base in chosen:
        try:
            found = _whole_entries(base) or _entries_read(base, odb)
        except (OSError, ValueError, KeyError, pygit2.GitError):
            continue  # deleted meanwhile (another merge or a repack), or unreadable: leave it
        for oid, entry in found.items():
            entries.setdefault(oid, entry)
        merged.append(base)
    if len(merged) < 2:
        return []
    pack, index, name = pack_entries(entries)
    new = install_pack(pack_dir, name, pack, index)[: -len(".pack")]
    # Not flushed here: the next publish's flush carries it (remove_replaced waits for that).
    return [base for base in merged if base != new]


def _index_entries(idx_path: str) -> list[tuple[int, pygit2.Oid, int]]:
    """(offset, id, crc32) of every entry a version-2 index lists, by offset."""
    with open(idx_path, "rb") as fh:
        data = fh.read()
    oids = index_oids(idx_path)
    n = len(oids)
    crcs = struct.unpack_from(f">{n}I", data, 8 + 1024 + 20 * n)
    offsets = struct.unpack_from(f">{n}I", data, 8 + 1024 + 24 * n)
    if any(o & 0x80000000 for o in offsets):
        raise ValueError(f"{idx_path}: a pack past 2 GiB is not small")
    return sorted(zip(offsets, oids, crcs, strict=True))


def _whole_entries(base: str) -> dict[pygit2.Oid, bytes] | None:
    """The entries of pack ``base`` as stored, when every one is a whole object (the packs gitmem
    writes): copied into the merged pack without inflating or deflating anything. None for a pack
    holding deltas (a push's), whose objects are read back instead. Each entry's bytes are checked
    against the checksum its index records."""
    listed = _index_entries(base + ".idx")
    with open(base + ".pack", "rb") as fh:
        pack = fh.read()
    if pack[:4] != b"PACK" or len(pack) < 32:
        raise ValueError(f"{base}.pack: not a pack")
    ends = [offset for offset, _oid, _crc in listed[1:]] + [len(pack) - 20]
    out: dict[pygit2.Oid, bytes] = {}
    for (offset, oid, crc), end in zip(listed, ends, strict=True):
        entry = pack[offset:end]
        if not entry or (entry[0] >> 4) & 7 not in (1, 2, 3, 4):
            return None  # a delta (or something else): read the objects back
        if zlib.crc32(entry) != crc:
            raise ValueError(f"{base}.pack: entry {oid} does not match its index")
        out[oid] = entry
    return out


def _entries_read(base: str, odb: pygit2.Odb) -> dict[pygit2.Oid, bytes]:
    """The objects of pack ``base`` read back whole (deltas resolved) and packed again."""
    objects: dict[pygit2.Oid, tuple[int, bytes]] = {}
    for oid in index_oids(base + ".idx"):
        kind, data = odb.read(oid)
        objects[oid] = (int(kind), data)
    return {oid: whole_entry(kind, data) for oid, (kind, data) in objects.items()}


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
    """No merge of this store starts, and no merged pack is deleted, inside the block (one
    running is waited for): ``git fsck`` lists the packs first and reads them after, and a pack
    deleted meanwhile fails it ("packfile ... index not opened") although every object is in the
    merged pack. Where the lock file cannot be opened (a read-only store, a clone without
    ``gitmem/``), nothing is paused: no merge can run there either."""
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
