"""The tree differ of long walks (an index catch-up, a rebuild): the deltas of many commits in a row,
from the raw tree objects, each read and parsed once (:class:`TreeDiffer`). It gives exactly
:func:`gitmem.git.treedelta.tree_deltas`' answer; that module's names are importable from here too.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from itertools import accumulate
from operator import itemgetter

import pygit2

from gitmem.git.treedelta import (
    PY_DIFF_MAX_ENTRIES,
    Change,
    Delta,
    changes_of,
    deltas_libgit2,
    diff_trees,
    merge_own_changes,
    tree_deltas,
)

__all__ = ["Change", "Delta", "TreeDiffer", "diff_trees", "merge_own_changes", "tree_deltas"]

# ---------------------------------------------------------------------- raw trees, for long walks
# A tree object is a run of ``<octal mode> <name>\0<20-byte id>`` entries.
_ENTRY_RE = re.compile(rb"([0-7]+) ([^\0]+)\0(.{20})", re.S)
_OBJ_TREE = 2

_MODES: dict[bytes, int] = {}


def _mode(raw: bytes) -> int:
    """A tree entry's mode as libgit2 reports it (``normalize_filemode``: 100664 is 100644, ...)."""
    mode = _MODES.get(raw)
    if mode is None:
        m = int(raw, 8)
        kind = m & 0o170000
        if kind == 0o040000:
            mode = 0o040000
        elif m & 0o100:
            mode = 0o100755
        elif kind in (0o160000, 0o120000):
            mode = kind
        else:
            mode = 0o100644
        if len(_MODES) < 64:
            _MODES[raw] = mode
    return mode


class _Tree:
    """One parsed tree object: its bytes, its entries (mode, name, id) in order, the offset where
    each entry ends (its 20-byte id is the last of it), and, on demand, the entries as a set."""

    __slots__ = ("data", "_entries", "ends", "_set")

    def __init__(
        self, data: bytes, entries: list[tuple[bytes, bytes, bytes]] | None, ends: list[int]
    ) -> None:
        self.data = data
        self._entries = entries  # None: parsed on first use (``data`` is known to tile as ``ends``)
        self.ends = ends
        self._set: frozenset[tuple[bytes, bytes, bytes]] | None = None

    @property
    def entries(self) -> list[tuple[bytes, bytes, bytes]]:
        if self._entries is None:
            self._entries = _ENTRY_RE.findall(self.data)
        return self._entries

    def entry(self, i: int) -> tuple[bytes, bytes, bytes]:
        """Entry ``i`` (mode, name, id), without parsing the others."""
        if self._entries is not None:
            return self._entries[i]
        end = self.ends[i]
        mode, name = self.data[self.ends[i - 1] if i else 0 : end - 21].split(b" ", 1)
        return mode, name, self.data[end - 20 : end]

    @property
    def set(self) -> frozenset[tuple[bytes, bytes, bytes]]:
        if self._set is None:
            self._set = frozenset(self.entries)
        return self._set


_EMPTY = _Tree(b"", [], [])
_XOR_MAX = 4096  # below this many bytes _first_diff compares by XOR, above by memcmp
_KEEP_BYTES = 16 << 20  # raw tree bytes a TreeDiffer keeps per generation (two generations)


def _first_diff(a: bytes, b: bytes) -> int:
    """The offset of the first byte where ``a`` and ``b`` differ (the shorter one's length when
    it is a prefix of the other): a binary search of ``memcmp`` over memoryview slices, so a
    directory of 10,000 entries is compared in C, without copies."""
    hi = min(len(a), len(b))
    if hi <= _XOR_MAX:  # small: one XOR of the two as integers is quicker
        x = int.from_bytes(a[:hi], "big") ^ int.from_bytes(b[:hi], "big")
        return hi - 1 - (x.bit_length() - 1) // 8 if x else hi
    mb = memoryview(b)
    if a.startswith(mb[:hi]):
        return hi
    lo = 0  # a[:lo] == b[:lo]; a[:hi] != b[:hi]
    while hi - lo > 32:
        mid = (lo + hi) // 2
        if a.startswith(mb[lo:mid], lo):
            lo = mid
        else:
            hi = mid
    while a[lo] == b[lo]:
        lo += 1
    return lo


class TreeDiffer:
    """The tree diff of many commits in a row (an index catch-up): the same deltas as
    :func:`tree_deltas`, in the same order, computed from the raw tree objects.

    Each tree is read and parsed once (a commit's trees are its child's parent trees). When a
    directory's new version is its old one with one entry's id changed (the usual edit), one
    entry added (the usual create) or one removed (the usual delete), and every other byte as in
    the old one, the new directory is the old one spliced: no parse, no per-entry work in
    Python, whatever the directory's size (the comparison is a few ``memcmp``; see
    :func:`_first_diff`), and only that entry is followed down. Otherwise the two directories
    are compared by set difference of their entries (in C), not entry by entry in Python.

    A pair of directories over ``PY_DIFF_MAX_ENTRIES`` entries gives libgit2's answer, exactly
    as :func:`tree_deltas`: a one-entry change there is that entry's delta (what libgit2 lists
    too), and below it libgit2's answer for the changed subdirectory. Not thread-safe: one per
    walk."""

    def __init__(self, repo: pygit2.Repository, keep: int = 4096, keep_bytes: int = _KEEP_BYTES) -> None:
        self._repo = repo
        self._odb = repo.odb
        # Two generations of parsed trees: the newer is retired whole when it fills up (in
        # trees, or in bytes: a directory of 10,000 entries is half a megabyte).
        self._trees: dict[bytes, _Tree] = {}
        self._older: dict[bytes, _Tree] = {}
        self._keep = keep
        self._keep_bytes = keep_bytes
        self._bytes = 0
        self._commit_trees: dict[pygit2.Oid, pygit2.Oid] = {}

    def commit_changes(self, commit: pygit2.Commit) -> list[Change]:
        """What ``commit`` changed against its first parent (:func:`diff_trees` of the two trees)."""
        tree_id = commit.tree_id
        parent_tree: pygit2.Oid | None = None
        if commit.parent_ids:
            pid = commit.parent_ids[0]
            parent_tree = self._commit_trees.get(pid)
            if parent_tree is None:
                parent = self._repo[pid]
                assert isinstance(parent, pygit2.Commit)
                parent_tree = parent.tree_id
        if len(self._commit_trees) >= self._keep:
            self._commit_trees.clear()
        self._commit_trees[commit.id] = tree_id
        return self.changes(parent_tree, tree_id)

    def prefetched(self, blob_hex: str) -> bytes | None:
        """The content of a blob the walk's commits add, when already read (here: never)."""
        return None

    def changes(self, old: pygit2.Oid | None, new: pygit2.Oid | None) -> list[Change]:
        return changes_of(self.deltas(old, new))

    def deltas(self, old: pygit2.Oid | None, new: pygit2.Oid | None) -> list[Delta]:
        out: list[Delta] = []
        if old is not None and new is not None:
            if old != new:
                self._chain(old.raw, new.raw, out)
        elif old != new:
            self._deltas(old.raw if old is not None else None, new.raw if new is not None else None, b"", out)
        return out

    def _chain(self, old: bytes, new: bytes, out: list[Delta]) -> None:
        """:meth:`_deltas` of two trees, the usual case first: while each new directory is its
        old one with one entry's id changed, follow that entry down; a directory that gained or
        lost one entry gives that entry's deltas; the first directory that differs otherwise is
        compared in full by :meth:`_deltas`. This runs for every directory level of every commit
        of a rebuild."""
        base = b""
        oid = pygit2.Oid
        read = self._odb.read
        from_bytes = int.from_bytes
        git_order = False  # a pair over the threshold was passed: below it, libgit2's answer
        while True:
            o = self._trees.get(old) or self._tree(old)
            data: bytes | None = None
            if new not in self._trees and new not in self._older:
                kind, raw = read(oid(raw=new))[:2]
                if kind != _OBJ_TREE:
                    raise pygit2.GitError(f"object {new.hex()} is not a tree")
                data = bytes(raw)
                od, ends = o.data, o.ends
                size, o_size, count = len(data), len(od), len(ends)
                if size == o_size:
                    # :meth:`_one_entry` inlined (it runs for every level of every commit): the
                    # first differing byte, the entry it falls in, and every byte past that
                    # entry's id as in ``old``.
                    if size <= _XOR_MAX:
                        x = from_bytes(od, "big") ^ from_bytes(data, "big")
                        first = size - 1 - (x.bit_length() - 1) // 8 if x else size
                    else:
                        first = _first_diff(od, data)
                    i = bisect_right(ends, first)
                    end = ends[i] if i < count else 0
                    if i < count and first >= end - 20 and data.startswith(memoryview(od)[end:], end):
                        self._keep_tree(new, _Tree(data, None, ends))
                        git_order = git_order or 2 * count > PY_DIFF_MAX_ENTRIES
                        mode, name, old_id = o.entry(i)
                        new_id = data[end - 20 : end]
                        m = _MODES.get(mode) or _mode(mode)
                        if m == 0o040000:
                            old, new, base = old_id, new_id, base + name + b"/"
                            continue
                        out.append(Delta("modified", base + name, oid(raw=old_id), oid(raw=new_id), m, m))
                        return
                else:
                    grown = size > o_size
                    one = self._one_added(o, new, data) if grown else self._one_removed(o, new, data)
                    if one is not None:
                        mode, name, one_id = one
                        m = _MODES.get(mode) or _mode(mode)
                        path = base + name
                        if m == 0o040000:
                            was, now = (None, one_id) if grown else (one_id, None)
                            if git_order or 2 * count + (1 if grown else -1) > PY_DIFF_MAX_ENTRIES:
                                self._libgit2(was, now, path + b"/", out)
                            else:
                                self._deltas(was, now, path + b"/", out)
                        elif grown:
                            out.append(Delta("added", path, None, oid(raw=one_id), 0, m))
                        else:
                            out.append(Delta("deleted", path, oid(raw=one_id), None, m, 0))
                        return
            self._deltas(old, new, base, out, data, git_order)
            return

    def _one_added(self, old: _Tree, raw_id: bytes, data: bytes) -> tuple[bytes, bytes, bytes] | None:
        """The one entry ``data`` (the new version of the directory) adds to ``old``, every other
        byte as in ``old`` (the usual create), or None (then ``data`` must be parsed)."""
        od, ends = old.data, old.ends
        extra = len(data) - len(od)
        first = _first_diff(od, data)
        i = bisect_right(ends, first)  # the entry of ``old`` it falls in (len(ends): past the end)
        at = ends[i - 1] if i else 0
        if not data.startswith(memoryview(od)[at:], at + extra):
            return None
        m = _ENTRY_RE.fullmatch(data, at, at + extra)
        if m is None:
            return None
        entry: tuple[bytes, bytes, bytes] = m.groups()  # type: ignore[assignment]
        if b" " + entry[1] + b"\0" in od:
            return None  # maybe a second entry of that name: _parse reports the tree malformed
        entries = old._entries
        self._keep_tree(
            raw_id,
            _Tree(
                data,
                None if entries is None else [*entries[:i], entry, *entries[i:]],
                [*ends[:i], at + extra, *map(extra.__add__, ends[i:])],
            ),
        )
        return entry

    def _one_removed(self, old: _Tree, raw_id: bytes, data: bytes) -> tuple[bytes, bytes, bytes] | None:
        """The one entry of ``old`` that ``data`` (the new version of the directory) lacks, every
        other byte as in ``old`` (the usual delete), or None (then ``data`` must be parsed)."""
        od, ends = old.data, old.ends
        gone = len(od) - len(data)
        i = bisect_right(ends, _first_diff(od, data))  # the entry the first difference falls in
        if i >= len(ends):
            return None
        at = ends[i - 1] if i else 0
        if ends[i] - at != gone or not data.startswith(memoryview(od)[at + gone :], at):
            return None
        entry = old.entry(i)
        entries = old._entries
        self._keep_tree(
            raw_id,
            _Tree(
                data,
                None if entries is None else [*entries[:i], *entries[i + 1 :]],
                [*ends[:i], *map((-gone).__add__, ends[i + 1 :])],
            ),
        )
        return entry

    def _cached(self, raw_id: bytes) -> _Tree | None:
        got = self._trees.get(raw_id)
        if got is None:
            got = self._older.get(raw_id)
            if got is not None:
                self._keep_tree(raw_id, got)
        return got

    def _keep_tree(self, raw_id: bytes, tree: _Tree) -> None:
        if len(self._trees) >= self._keep or self._bytes >= self._keep_bytes:
            self._older = self._trees
            self._trees = {}
            self._bytes = 0
        self._trees[raw_id] = tree
        self._bytes += len(tree.data)

    def _read(self, raw_id: bytes) -> bytes:
        kind, data = self._odb.read(pygit2.Oid(raw=raw_id))[:2]
        if kind != _OBJ_TREE:
            raise pygit2.GitError(f"object {raw_id.hex()} is not a tree")
        return bytes(data)

    def _parse(self, raw_id: bytes, data: bytes) -> _Tree:
        found = _ENTRY_RE.findall(data)
        ends = list(accumulate([len(m) + len(n) + 22 for m, n, _ in found]))
        # The matches must tile the object (findall skips what does not match) and names be unique.
        if (ends[-1] if ends else 0) != len(data) or len(set(map(itemgetter(1), found))) != len(found):
            raise pygit2.GitError(f"tree {raw_id.hex()} is malformed")
        tree = _Tree(data, found, ends)
        self._keep_tree(raw_id, tree)
        return tree

    def _tree(self, raw_id: bytes) -> _Tree:
        return self._cached(raw_id) or self._parse(raw_id, self._read(raw_id))

    def _one_entry(self, old: _Tree, raw_id: bytes, data: bytes) -> int:
        """The index of the one entry of ``old`` whose id is all that differs in ``data`` (the
        new version of the directory), or -1 (then ``data`` must be parsed)."""
        od, ends = old.data, old.ends
        if len(data) != len(od) or not data:
            return -1
        first = _first_diff(od, data)
        i = bisect_right(ends, first)
        if i >= len(ends):
            return -1
        end = ends[i]
        if first < end - 20 or not data.startswith(memoryview(od)[end:], end):
            return -1
        # Every byte outside entry i's id is as in ``old``: the same entries, one new id.
        self._keep_tree(raw_id, _Tree(data, None, ends))
        return i

    def _libgit2(self, old: bytes | None, new: bytes | None, base: bytes, out: list[Delta]) -> None:
        repo = self._repo
        o_tree = repo[pygit2.Oid(raw=old)] if old is not None else None
        n_tree = repo[pygit2.Oid(raw=new)] if new is not None else None
        if not isinstance(o_tree, pygit2.Tree | None) or not isinstance(n_tree, pygit2.Tree | None):
            raise pygit2.GitError(f"object {(old or new or b'').hex()} is not a tree")
        deltas_libgit2(o_tree, n_tree, base, out)

    def _deltas(
        self,
        old: bytes | None,
        new: bytes | None,
        base: bytes,
        out: list[Delta],
        data: bytes | None = None,
        git_order: bool = False,
    ) -> None:
        o = self._tree(old) if old is not None else _EMPTY
        n: _Tree | None = None
        names: list[bytes] = []
        one = -1
        if new is None:
            n = _EMPTY
        else:
            n = self._cached(new)
            if n is None:
                data = self._read(new) if data is None else data
                i = self._one_entry(o, new, data) if old is not None else -1
                if i >= 0:
                    n, one = self._trees[new], i
                    names = [o.entry(i)[1]]
                else:
                    n = self._cached(new) or self._parse(new, data)
        if git_order or len(o.ends) + len(n.ends) > PY_DIFF_MAX_ENTRIES:
            self._libgit2(old, new, base, out)
            return
        if one >= 0:  # the one entry that differs
            o_map = {names[0]: o.entry(one)}
            n_map = {names[0]: n.entry(one)}
        else:
            o_map = {e[1]: e for e in o.set - n.set}
            n_map = {e[1]: e for e in n.set - o.set}
            names = sorted(o_map.keys() | n_map.keys())
        for name in names:
            oe, ne = o_map.get(name), n_map.get(name)
            o_mode = _mode(oe[0]) if oe is not None else 0
            n_mode = _mode(ne[0]) if ne is not None else 0
            if oe is not None and ne is not None and oe[2] == ne[2] and o_mode == n_mode:
                continue  # the same entry, its mode written differently
            path = base + name
            o_tree_id = oe[2] if oe is not None and o_mode == 0o040000 else None
            n_tree_id = ne[2] if ne is not None and n_mode == 0o040000 else None
            if o_tree_id is not None or n_tree_id is not None:
                self._deltas(o_tree_id, n_tree_id, path + b"/", out)
            o_file = oe[2] if oe is not None and o_tree_id is None else None
            n_file = ne[2] if ne is not None and n_tree_id is None else None
            if o_file is not None and n_file is not None:
                out.append(
                    Delta("modified", path, pygit2.Oid(raw=o_file), pygit2.Oid(raw=n_file), o_mode, n_mode)
                )
            elif n_file is not None:
                out.append(Delta("added", path, None, pygit2.Oid(raw=n_file), 0, n_mode))
            elif o_file is not None:
                out.append(Delta("deleted", path, pygit2.Oid(raw=o_file), None, o_mode, 0))
