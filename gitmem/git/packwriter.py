"""Write the new objects of a group commit or a batch as one pack, in-process (docs/durability.md).

libgit2 writes every object as its own loose file: a version is a blob, its spine of trees and a
commit, five or six files (and as many directory entries) that one flush must then carry to disk.
While a :class:`Staging` is active, the objects a thread creates through :class:`gitmem.git.repo.Repo`
go to memory instead (a pygit2 odb backend of our own, in front of the repository's pack and
loose backends, so every existing object still reads); :meth:`Staging.write` then writes them as
one pack and its index into ``objects/pack/`` (written under temporary names, the ``.pack`` renamed
into place last, after its ``.idx``: see :func:`install_pack`). Nothing is flushed here: the publish that follows covers the two
files with its one flush. No deltas (a later geometric repack finds them).
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import zlib

import pygit2

from gitmem.errors import GitmemError

_MAX_OFFSET = 0x7FFFFFFF
_TREE = 2  # the object type of trees, in libgit2 and in packs
_TYPE_NAMES = {1: b"commit", 2: b"tree", 3: b"blob", 4: b"tag"}  # as an object's id hashes them
STAGE_MAX_BYTES = 64 << 20  # staged object bytes held in memory before a pack is written


class _Memory(pygit2.OdbBackend):
    """A write-back odb backend: new objects stay in a dict until the stage is written."""

    def __init__(self) -> None:
        super().__init__()
        self.objects: dict[pygit2.Oid, tuple[int, bytes]] = {}
        self.bytes = 0

    def write_cb(self, oid: pygit2.Oid, data: bytes, kind: int) -> None:
        self.objects[oid] = (int(kind), bytes(data))
        self.bytes += len(data)

    def read_cb(self, oid: pygit2.Oid) -> tuple[int, bytes]:
        return self.objects[oid]

    def read_prefix_cb(self, oid: pygit2.Oid) -> tuple[int, bytes, pygit2.Oid]:
        kind, data = self.objects[oid]
        return kind, data, oid

    def read_header_cb(self, oid: pygit2.Oid) -> tuple[int, int]:
        kind, data = self.objects[oid]
        return kind, len(data)

    def exists_cb(self, oid: pygit2.Oid) -> bool:
        return oid in self.objects

    def exists_prefix_cb(self, oid: pygit2.Oid) -> pygit2.Oid:
        if oid in self.objects:
            return oid
        raise KeyError(oid)

    def refresh_cb(self) -> None:
        return None


class _ReadThrough(pygit2.OdbBackend):
    """The store's packs and loose objects, for reading only, behind one backend that never
    claims to hold an object.

    Before libgit2 writes an object it asks every backend whether the object exists, and on a
    miss (every new object is one) it refreshes them and asks again: a pack backend then lists
    ``objects/pack/``, looks for a multi-pack-index and opens each new index, and a loose backend
    touches the object's would-be file. That cost 25-150 us an object here, several times the
    rest of the write. Saying "not here" is always safe for a writer: at worst an object the
    store already has is written into the group's pack again, which git allows (a repack keeps
    one copy). Reads (a tree a new one is built from, the objects a builder checks) go straight
    to the store's own object database."""

    def __init__(self, objects_dir: str, odb: pygit2.Odb | None = None) -> None:
        """``odb``: the store's object database to read through (the writing thread's own
        repository's, whose pack indexes and caches are warm already); else one of its own."""
        super().__init__()
        if odb is None:
            odb = pygit2.Odb()
            odb.add_backend(pygit2.OdbBackendPack(objects_dir), 1)
            odb.add_backend(pygit2.OdbBackendLoose(objects_dir, 1, False), 2)
        self.odb = odb

    def read_cb(self, oid: pygit2.Oid) -> tuple[int, bytes]:
        kind, data = self.odb.read(oid)
        return int(kind), data

    def read_prefix_cb(self, prefix: str) -> tuple[int, bytes, pygit2.Oid]:
        # pygit2 passes the short id as hex; libgit2 needs the object's full id back.
        kind, data = self.odb.read(prefix)
        header = b"%s %d\0" % (_TYPE_NAMES[int(kind)], len(data))
        return int(kind), data, pygit2.Oid(raw=hashlib.sha1(header + data).digest())

    def read_header_cb(self, oid: pygit2.Oid) -> tuple[int, int]:
        kind, data = self.odb.read(oid)
        return int(kind), len(data)

    def write_cb(self, oid: pygit2.Oid, data: bytes, kind: int) -> None:
        # Reached only when the writing backend in front failed a tree or commit write: a
        # concurrent ``git repack -d`` removed the ``objects/xx/`` directory the loose write had
        # just made. Write as the store's own database would (it makes the directory again).
        # Blobs are streamed to the loose backend alone; their failure is retried by the caller.
        try:
            self.odb.write(kind, data)
        except Exception:
            # Any other exception would stay set beside libgit2's own result (pygit2 clears a
            # KeyError): the write then fails as the loose backend's did, and is retried.
            raise KeyError(oid) from None

    def exists_cb(self, oid: pygit2.Oid) -> bool:
        return False

    def exists_prefix_cb(self, oid: pygit2.Oid) -> pygit2.Oid:
        raise KeyError(oid)

    def refresh_cb(self) -> None:
        return None


def loose_writer(objects_dir: str, odb: pygit2.Odb | None = None) -> pygit2.Repository:
    """A repository (no working directory, no refs) that writes new objects as loose files, as
    the store's own repository would (zlib level 1, mode 0444, through a temporary file), and
    reads the store's objects through :class:`_ReadThrough`: a write then skips libgit2's
    existence check and refresh of the pack directory. Nothing is flushed here (the publish that
    follows flushes). One per thread, like every libgit2 repository; ``odb`` as for
    :class:`_ReadThrough`."""
    writer = pygit2.Odb()
    writer.add_backend(_ReadThrough(objects_dir, odb), 1)
    writer.add_backend(pygit2.OdbBackendLoose(objects_dir, -1, False), 1000)  # the writes
    repo = pygit2.Repository()
    repo.set_odb(writer)
    return repo


class Staging:
    """A thread's object writer that keeps new objects in memory until :meth:`write`.

    ``repo`` is a pygit2 repository without a working directory or refs whose odb reads the
    store's packs and loose objects (:class:`_ReadThrough`) and writes to memory. One per thread
    (libgit2 objects must not be shared between threads), reused across commits; ``odb`` as
    for :class:`_ReadThrough`."""

    def __init__(self, git_dir: str, odb: pygit2.Odb | None = None) -> None:
        objects = os.path.join(git_dir, "objects")
        self.objects_dir = objects
        self.memory = _Memory()
        odb_ = pygit2.Odb()
        odb_.add_backend(_ReadThrough(objects, odb), 1)
        odb_.add_backend(self.memory, 1000)  # the highest priority takes the writes
        self.repo = pygit2.Repository()
        self.repo.set_odb(odb_)

    @property
    def pending(self) -> int:
        return len(self.memory.objects)

    def write_if_large(self) -> None:
        """Write what is staged as a pack of its own once it passes :data:`STAGE_MAX_BYTES` (a long
        chain whose trees are large must not pile up in memory); later objects of the chain go
        into the next pack, and objects already written read back from the first."""
        if self.memory.bytes > STAGE_MAX_BYTES:
            self.write()

    def discard(self) -> None:
        self.memory.objects.clear()
        self.memory.bytes = 0

    def write(self) -> str | None:
        """Write the staged objects as one pack (not flushed); returns its path, None if none."""
        objects = self.memory.objects
        if not objects:
            return None
        try:
            pack, index, name = encode_pack(objects)
            path = install_pack(os.path.join(self.objects_dir, "pack"), name, pack, index)
        finally:
            objects.clear()
            self.memory.bytes = 0
        return path


def _entry_header(kind: int, size: int) -> bytes:
    out = bytearray()
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


def _deflate(kind: int, data: bytes) -> bytes:
    """zlib of one object, fast. Trees are mostly binary object ids, which compress little, and
    setting up a deflater costs more time than the bytes it saves: they are written as stored
    (uncompressed) deflate blocks, which any inflater reads. A pack of a batch of small memories
    is about 20% larger for it (1.59 against 1.32 MB for 1,000); ``git repack -a -d -f`` or
    ``git gc --aggressive`` compresses and deltas them (a plain repack reuses objects as they
    are). Other small objects get a small window and hash table, a fraction of zlib's default
    state to set up."""
    if kind == _TREE:
        return _stored(data)
    if len(data) < 4096:
        c = zlib.compressobj(1, zlib.DEFLATED, 12, 2)
    else:
        c = zlib.compressobj(1, zlib.DEFLATED, 15, 8)
    return c.compress(data) + c.flush()


_STORED_MAX = 0xFFFF  # bytes in one stored deflate block


def _stored(data: bytes) -> bytes:
    """A zlib stream (RFC 1950) holding ``data`` in stored deflate blocks (RFC 1951, BTYPE 00)."""
    out = bytearray(b"\x78\x01")  # deflate, 32 KiB window, no dictionary, fastest
    n = len(data)
    start = 0
    while True:
        end = min(start + _STORED_MAX, n)
        size = end - start
        out.append(1 if end == n else 0)  # BFINAL on the last block
        out += struct.pack("<HH", size, size ^ 0xFFFF)
        out += data[start:end]
        if end == n:
            break
        start = end
    out += struct.pack(">I", zlib.adler32(data))
    return bytes(out)


def encode_pack(objects: dict[pygit2.Oid, tuple[int, bytes]]) -> tuple[bytes, bytes, str]:
    """A version-2 pack of ``objects`` (whole, zlib-compressed) and its version-2 index; the name
    git gives it (the hex checksum of the pack)."""
    return pack_entries({oid: whole_entry(kind, data) for oid, (kind, data) in objects.items()})


def whole_entry(kind: int, data: bytes) -> bytes:
    """One object as a pack stores it whole: its type and size header, then its zlib stream."""
    return _entry_header(kind, len(data)) + _deflate(kind, data)


def pack_entries(stored: dict[pygit2.Oid, bytes]) -> tuple[bytes, bytes, str]:
    """A version-2 pack of whole-object entries as they are stored in a pack (type and size
    header, then the zlib stream), with its version-2 index and name, as :func:`encode_pack`."""
    pack = bytearray(b"PACK")
    pack += struct.pack(">II", 2, len(stored))
    entries: list[tuple[bytes, int, int]] = []
    for oid, entry in stored.items():
        offset = len(pack)
        pack += entry
        entries.append((oid.raw, zlib.crc32(entry), offset))
    checksum = hashlib.sha1(pack).digest()
    pack += checksum
    entries.sort()
    index = bytearray(b"\377tOc")
    index += struct.pack(">I", 2)
    counts = [0] * 256
    for raw, _crc, _off in entries:
        counts[raw[0]] += 1
    total = 0
    fanout = []
    for c in counts:
        total += c
        fanout.append(total)
    index += struct.pack(">256I", *fanout)
    index += b"".join(raw for raw, _c, _o in entries)
    index += struct.pack(f">{len(entries)}I", *(crc for _r, crc, _o in entries))
    large: list[int] = []
    small = []
    for _r, _c, off in entries:
        if off > _MAX_OFFSET:
            small.append(0x80000000 | len(large))
            large.append(off)
        else:
            small.append(off)
    index += struct.pack(f">{len(small)}I", *small)
    if large:
        index += struct.pack(f">{len(large)}Q", *large)
    index += checksum
    index += hashlib.sha1(index).digest()
    return bytes(pack), bytes(index), checksum.hex()


def install_pack(pack_dir: str, name: str, pack: bytes, index: bytes, durable: bool = False) -> str:
    """Write ``pack-<name>.pack`` and ``.idx`` through temporary files, then rename the ``.idx``
    into place first and the ``.pack`` last; ``durable``: each file is flushed before its rename.

    The ``.pack`` last, unlike git's own writers: ``git repack -a/-A -d`` lists the packs it will
    delete by their ``.pack`` files, before its pack-objects lists the packs it reads by their
    ``.idx`` files. A ``.pack`` renamed in before that listing and its ``.idx`` after the
    pack-objects' scan was deleted without its objects being packed or loosened (they were in
    no pack it read): a batch's commit, trees and blobs gone, the branch already moved to them
    (seen in test_writers_beside_git_maintenance_and_a_kill_lose_nothing under load, 49 ms
    between the two renames). With the ``.idx`` first, a repack that lists the ``.pack`` finds
    its index too. Readers skip an ``.idx`` whose ``.pack`` is not there yet (git and libgit2).

    A file already there (the same objects: the name is the pack's checksum) is not written
    again. A repack deleting that pack meanwhile (``.pack`` first, then ``.idx``) listed it by its
    ``.pack``, so its pack-objects read it: its objects are in the new pack or loose."""
    os.makedirs(pack_dir, exist_ok=True)
    final = os.path.join(pack_dir, f"pack-{name}")
    missing = [(s, d) for s, d in ((".idx", index), (".pack", pack)) if not os.path.exists(final + s)]
    try:
        _place(pack_dir, final, missing, durable)
    except OSError as exc:
        raise GitmemError(f"cannot write a pack in {pack_dir}: {exc}") from None
    return final + ".pack"


def _place(pack_dir: str, final: str, files: list[tuple[str, bytes]], durable: bool) -> None:
    """Write each of ``files`` (suffix, bytes) to a temporary file, then rename them in order."""
    temps: list[tuple[str, str]] = []
    try:
        for suffix, data in files:
            fd, tmp = tempfile.mkstemp(prefix="tmp_pack_gitmem_", dir=pack_dir)
            temps.append((tmp, suffix))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                if durable:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.chmod(tmp, 0o444)
        for tmp, suffix in temps:
            os.rename(tmp, final + suffix)
    finally:
        for tmp, _suffix in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)
