"""The history rewrite engine: commits and trees rewritten as raw bytes into one new pack, and the
purge of retired objects with its proof (used by :mod:`gitmem.audit.journal` for redaction and compaction).
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from collections.abc import Callable

import pygit2

from gitmem.errors import GitmemError, IntegrityError
from gitmem.git.packwriter import install_pack
from gitmem.git.repo import Repo

_BLOB = pygit2.enums.ObjectType.BLOB
_TREE = pygit2.enums.ObjectType.TREE
_COMMIT = pygit2.enums.ObjectType.COMMIT


class PackWriter:
    """New objects written as one pack (``git index-pack`` would make the same files): a rewrite
    creates up to one commit per commit of history, and 100k loose files cost more than the rewrite."""

    TYPES = {_COMMIT: 1, _TREE: 2}

    def __init__(self, store: Repo) -> None:
        self.store = store
        self.pending: list[tuple[bytes, bytes, bytes]] = []  # (oid, pack entry header, data)
        self.seen: set[bytes] = set()

    def add(self, kind: pygit2.enums.ObjectType, data: bytes) -> pygit2.Oid:
        name = {_COMMIT: b"commit", _TREE: b"tree"}[kind]
        raw = hashlib.sha1(b"%s %d\0" % (name, len(data)) + data).digest()
        if raw not in self.seen:
            self.seen.add(raw)
            size = len(data)
            head = bytearray()
            c = (self.TYPES[kind] << 4) | (size & 15)
            size >>= 4
            while size:
                head.append(c | 0x80)
                c = size & 0x7F
                size >>= 7
            head.append(c)
            self.pending.append((raw, bytes(head), data))
        return pygit2.Oid(raw=raw)

    def _entries(self) -> list[tuple[bytes, int, bytes]]:
        """(oid, crc32, packed bytes) of the pending objects; zlib runs on every core (it drops the GIL)."""
        from concurrent.futures import ThreadPoolExecutor

        def pack(part: list[tuple[bytes, bytes, bytes]]) -> list[tuple[bytes, int, bytes]]:
            out = []
            for raw, head, data in part:
                packed = head + zlib.compress(data, 1)
                out.append((raw, zlib.crc32(packed), packed))
            return out

        workers = max(1, min(os.cpu_count() or 1, 4))
        step = -(-len(self.pending) // workers)
        parts = [self.pending[i : i + step] for i in range(0, len(self.pending), step)]
        with ThreadPoolExecutor(workers) as pool:
            return [e for done in pool.map(pack, parts) for e in done]

    def flush(self) -> None:
        """Write ``objects/pack/pack-<sha>.pack`` and its ``.idx`` (fsynced; the ``.pack`` renamed in
        last, gitmem.git.packwriter.install_pack)."""
        if not self.pending:
            return
        entries = self._entries()
        body = bytearray(b"PACK" + struct.pack(">II", 2, len(entries)))
        offsets = {}
        for raw, _crc, packed in entries:
            offsets[raw] = len(body)
            body += packed
        if len(body) >= 1 << 31:
            raise GitmemError("a rewrite of this size needs large pack offsets; not supported")
        checksum = hashlib.sha1(body).digest()
        body += checksum
        ordered = sorted(entries)
        fanout = [0] * 256
        for raw, _crc, _packed in ordered:
            fanout[raw[0]] += 1
        total = 0
        for i in range(256):
            total += fanout[i]
            fanout[i] = total
        idx = bytearray(b"\377tOc" + struct.pack(">I", 2) + struct.pack(">256I", *fanout))
        idx += b"".join(raw for raw, _c, _p in ordered)
        idx += b"".join(struct.pack(">I", crc) for _r, crc, _p in ordered)
        idx += b"".join(struct.pack(">I", offsets[raw]) for raw, _c, _p in ordered)
        idx += checksum
        idx += hashlib.sha1(idx).digest()
        install_pack(
            str(self.store.path / "objects" / "pack"), checksum.hex(), bytes(body), bytes(idx), durable=True
        )
        self.pending.clear()


class Rewriter:
    """Rewrites commits with some blobs replaced; every other byte of each commit is kept.

    Trees are rewritten as raw bytes (only the changed entries' ids differ), commits by their raw
    header (see :func:`rewrite_header`); both go to one new pack (:meth:`flush`)."""

    def __init__(
        self,
        store: Repo,
        blob_map: dict[pygit2.Oid, pygit2.Oid],
        *,
        rename: Callable[[bytes], bytes] | None = None,
        message: Callable[[bytes], bytes] | None = None,
    ) -> None:
        self.store = store
        self.repo = store.repo
        self.odb = store.repo.odb
        self.blobs = {k.raw: v.raw for k, v in blob_map.items()}
        self.trees: dict[bytes, bytes] = {}
        self.commits: dict[pygit2.Oid, pygit2.Oid] = {}
        self.pack = PackWriter(store)
        # Path redaction: ``rename`` maps a tree entry's name to its new name, ``message`` a commit
        # message to its new text (both identity for what they do not match).
        self.rename = rename
        self.message = message

    def tree(self, oid: pygit2.Oid) -> pygit2.Oid:
        return pygit2.Oid(raw=self._tree(oid.raw))

    def _tree(self, raw_id: bytes) -> bytes:
        done = self.trees.get(raw_id)
        if done is not None:
            return done
        if self.rename is not None:
            return self._tree_renamed(raw_id)
        data = self.odb.read(pygit2.Oid(raw=raw_id))[1]
        out: bytearray | None = None
        pos, end = 0, len(data)
        while pos < end:
            nul = data.index(b"\0", pos)
            sha = data[nul + 1 : nul + 21]
            # "40000 ..." is a subtree; anything else a blob (a gitlink's id is never in the map)
            new = self._tree(sha) if data[pos] == 0x34 else self.blobs.get(sha, sha)
            if new != sha:
                if out is None:
                    out = bytearray(data)
                out[nul + 1 : nul + 21] = new
            pos = nul + 21
        result = raw_id if out is None else self.pack.add(_TREE, bytes(out)).raw
        self.trees[raw_id] = result
        return result

    def _tree_renamed(self, raw_id: bytes) -> bytes:
        """A tree with replaced blobs and renamed entries, re-sorted in git's order (a directory
        sorts as its name + "/"); two entries renamed to one name is an IntegrityError."""
        assert self.rename is not None
        data = self.odb.read(pygit2.Oid(raw=raw_id))[1]
        entries: list[tuple[bytes, bytes, bytes]] = []  # (mode, name, sha)
        changed = False
        pos, end = 0, len(data)
        while pos < end:
            space = data.index(b" ", pos)
            nul = data.index(b"\0", space)
            mode, name, sha = data[pos:space], data[space + 1 : nul], data[nul + 1 : nul + 21]
            new = self._tree(sha) if mode == b"40000" else self.blobs.get(sha, sha)
            new_name = self.rename(name)
            changed = changed or new != sha or new_name != name
            entries.append((mode, new_name, new))
            pos = nul + 21
        if not changed:
            self.trees[raw_id] = raw_id
            return raw_id
        names = [e[1] for e in entries]
        if len(set(names)) != len(names):
            raise IntegrityError("a path redaction would give two entries of one directory the same name")
        entries.sort(key=lambda e: e[1] + b"/" if e[0] == b"40000" else e[1])
        out = b"".join(mode + b" " + name + b"\0" + sha for mode, name, sha in entries)
        result = self.pack.add(_TREE, out).raw
        self.trees[raw_id] = result
        return result

    def tree_at(self, oid: pygit2.Oid, paths: list[list[bytes]]) -> pygit2.Oid:
        """Like :meth:`tree` when the caller knows every replaced blob in it is at one of ``paths``
        (tree path segments): only the trees along them are read."""
        return pygit2.Oid(raw=self._tree_at(oid.raw, paths))

    def _tree_at(self, raw_id: bytes, paths: list[list[bytes]]) -> bytes:
        done = self.trees.get(raw_id)
        if done is not None:
            return done
        data = self.odb.read(pygit2.Oid(raw=raw_id))[1]
        groups: dict[bytes, list[list[bytes]]] = {}
        for p in paths:
            groups.setdefault(p[0], []).append(p[1:])
        out: bytearray | None = None
        found = 0
        pos, end = 0, len(data)
        while pos < end and found < len(groups):
            nul = data.index(b"\0", pos)
            name = data[data.index(b" ", pos) + 1 : nul]
            rest = groups.get(name)
            if rest is not None:
                found += 1
                deeper = [r for r in rest if r]
                sha = data[nul + 1 : nul + 21]
                if deeper and data[pos] != 0x34:  # not a directory, though the index says so
                    return self._tree(raw_id)
                new = self._tree_at(sha, deeper) if deeper else self.blobs.get(sha, sha)
                if new != sha:
                    if out is None:
                        out = bytearray(data)
                    out[nul + 1 : nul + 21] = new
            pos = nul + 21
        if found < len(groups):
            return self._tree(raw_id)  # not where the index said: walk the whole tree
        result = raw_id if out is None else self.pack.add(_TREE, bytes(out)).raw
        self.trees[raw_id] = result
        return result

    def commit(
        self,
        commit: pygit2.Commit,
        parents: list[pygit2.Oid] | None = None,
        *,
        paths: list[list[bytes]] | None = None,
        same_tree: bool = False,
    ) -> pygit2.Oid:
        """``commit`` with its tree rewritten (only along ``paths`` when given; kept when
        ``same_tree``: no replaced blob is in it) and its parents mapped (or ``parents``)."""
        done = self.commits.get(commit.id)
        if done is not None and parents is None:
            return done
        old_parents = list(commit.parent_ids)
        new_parents = [self.commits.get(p, p) for p in old_parents] if parents is None else parents
        if same_tree:
            new_tree = commit.tree_id
        elif paths is not None:
            new_tree = self.tree_at(commit.tree_id, paths)
        else:
            new_tree = self.tree(commit.tree_id)
        raw = self.odb.read(commit.id)[1]
        new_raw = raw
        if self.message is not None:
            header, sep, text = raw.partition(b"\n\n")
            new_raw = header + sep + self.message(text)
        if new_tree == commit.tree_id and new_parents == old_parents and new_raw == raw:
            return commit.id
        oid = self.pack.add(_COMMIT, rewrite_header(new_raw, new_tree, new_parents))
        self.commits[commit.id] = oid
        return oid

    def flush(self) -> None:
        self.pack.flush()

    def retired_trees(self) -> list[str]:
        return [old.hex() for old, new in self.trees.items() if old != new]


def rewrite_header(raw: bytes, tree: pygit2.Oid, parents: list[pygit2.Oid]) -> bytes:
    """A raw commit with new ``tree`` and ``parent`` lines; author, committer, encoding and the
    message stay byte for byte. A signature (``gpgsig``) would no longer verify, so it is dropped."""
    header, sep, message = raw.partition(b"\n\n")
    out = [b"tree " + str(tree).encode()] + [b"parent " + str(p).encode() for p in parents]
    skipping = False
    for line in header.split(b"\n"):
        if line.startswith(b" ") and skipping:
            continue
        skipping = line.startswith((b"gpgsig", b"gpgsig-sha256"))
        if skipping or line.startswith((b"tree ", b"parent ")):
            continue
        out.append(line)
    return b"\n".join(out) + sep + message


# The purge lives in gitmem.git.purge; these names stay importable from here.
from gitmem.git.purge import (  # noqa: E402
    _git,
    existing_objects,
    missing_objects,
    packs_without,
    purge,
    reachable_retired,
    scrub_maintenance,
)

__all__ = [
    "PackWriter",
    "Rewriter",
    "_git",
    "existing_objects",
    "missing_objects",
    "packs_without",
    "purge",
    "reachable_retired",
    "rewrite_header",
    "scrub_maintenance",
]
