"""RFC 6962 / RFC 9162 Merkle hash trees over SHA-256 (docs/transparency.md#the-merkle-tree).

Leaf hash ``SHA-256(0x00 || leaf)``, node hash ``SHA-256(0x01 || left || right)``, the empty tree's
root ``SHA-256("")``. Proofs are generated as RFC 6962 section 2.1.1 (PATH) and 2.1.2 (SUBPROOF)
define them and verified with the algorithms of RFC 9162 sections 2.1.3.2 and 2.1.4.2.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from gitmem.errors import InvalidInputError

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(leaf: bytes) -> bytes:
    """The hash of one leaf: ``SHA-256(0x00 || leaf)``."""
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """The hash of an inner node: ``SHA-256(0x01 || left || right)``."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


class Tree:
    """A tree over a list of leaf hashes. Every perfect, aligned subtree's hash is kept (levels), so
    :meth:`extend` costs O(log n) a leaf and any root or proof O(log^2 n) once built."""

    def __init__(self, leaf_hashes: Sequence[bytes] = ()) -> None:
        self.levels: list[list[bytes]] = [[]]
        self.extend(leaf_hashes)

    @property
    def leaves(self) -> list[bytes]:
        return self.levels[0]

    def extend(self, leaf_hashes: Sequence[bytes]) -> None:
        """Append leaf hashes."""
        for leaf in leaf_hashes:
            self.levels[0].append(leaf)
            h = 0
            while len(self.levels[h]) % 2 == 0:
                if len(self.levels) == h + 1:
                    self.levels.append([])
                pair = self.levels[h][-2:]
                self.levels[h + 1].append(node_hash(pair[0], pair[1]))
                h += 1

    def _hash(self, start: int, end: int) -> bytes:
        n = end - start
        if n == 0:
            return EMPTY_ROOT
        if n & (n - 1) == 0 and start % n == 0:  # a perfect, aligned subtree: kept
            return self.levels[n.bit_length() - 1][start // n]
        k = _split(n)
        return node_hash(self._hash(start, start + k), self._hash(start + k, end))

    def root(self, size: int | None = None) -> bytes:
        """The root hash of the first ``size`` leaves (all of them by default)."""
        size = len(self.leaves) if size is None else size
        _check_size(size, len(self.leaves))
        return self._hash(0, size)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """RFC 6962 PATH(index, D[0:size]): the audit path of leaf ``index`` in the tree of ``size``."""
        size = len(self.leaves) if size is None else size
        _check_size(size, len(self.leaves))
        if not 0 <= index < size:
            raise InvalidInputError(f"leaf index {index} is not in a tree of size {size}")
        return self._path(index, 0, size)

    def _path(self, m: int, start: int, end: int) -> list[bytes]:
        n = end - start
        if n == 1:
            return []
        k = _split(n)
        if m < k:
            return [*self._path(m, start, start + k), self._hash(start + k, end)]
        return [*self._path(m - k, start + k, end), self._hash(start, start + k)]

    def consistency_proof(self, old: int, new: int | None = None) -> list[bytes]:
        """RFC 6962 PROOF(old, D[0:new]); empty when ``old`` is 0 or equals ``new``."""
        new = len(self.leaves) if new is None else new
        _check_size(new, len(self.leaves))
        if not 0 <= old <= new:
            raise InvalidInputError(f"no consistency proof from size {old} to size {new}")
        if old in (0, new):
            return []
        return self._subproof(old, 0, new, True)

    def _subproof(self, m: int, start: int, end: int, whole: bool) -> list[bytes]:
        n = end - start
        if m == n:
            return [] if whole else [self._hash(start, end)]
        k = _split(n)
        if m <= k:
            return [*self._subproof(m, start, start + k, whole), self._hash(start + k, end)]
        return [*self._subproof(m - k, start + k, end, False), self._hash(start, start + k)]


def _check_size(size: int, have: int) -> None:
    if not 0 <= size <= have:
        raise InvalidInputError(f"tree size {size} is out of range (the tree has {have} leaves)")


def root_hash(leaf_hashes: Sequence[bytes]) -> bytes:
    """The root hash of a tree with these leaf hashes."""
    return Tree(leaf_hashes).root()


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> bool:
    """RFC 9162 section 2.1.3.2: does ``proof`` bind leaf hash ``leaf`` at ``index`` to ``root``?"""
    if not 0 <= index < size or any(len(p) != HASH_SIZE for p in proof):
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == root


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """RFC 9162 section 2.1.4.2, extended as tlog-witness requires: from size 0 any tree follows
    (the proof must be empty); equal sizes need equal roots and an empty proof."""
    if not 0 <= old_size <= new_size or any(len(p) != HASH_SIZE for p in proof):
        return False
    if old_size == 0:
        return not proof
    if old_size == new_size:
        return not proof and old_root == new_root
    if not proof:
        return False
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # an exact power of two: the old root is the first node
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return fr == old_root and sr == new_root and sn == 0


class CompactRange:
    """The roots of the perfect subtrees covering leaves ``[0, size)``: O(log n) append and root,
    so a new checkpoint costs a few hashes whatever the ledger's length."""

    def __init__(self, size: int = 0, hashes: Sequence[bytes] = ()) -> None:
        if len(hashes) != bin(size).count("1"):
            raise InvalidInputError(f"a compact range of size {size} has {bin(size).count('1')} hashes")
        self.size = size
        self.hashes = list(hashes)  # left to right, largest subtree first

    def append(self, leaf: bytes) -> None:
        """Add one leaf hash."""
        self.hashes.append(leaf)
        size = self.size
        while size & 1:
            right = self.hashes.pop()
            self.hashes[-1] = node_hash(self.hashes[-1], right)
            size >>= 1
        self.size += 1

    def root(self) -> bytes:
        """The root hash of the tree of ``size`` leaves."""
        if not self.hashes:
            return EMPTY_ROOT
        r = self.hashes[-1]
        for h in reversed(self.hashes[:-1]):
            r = node_hash(h, r)
        return r
