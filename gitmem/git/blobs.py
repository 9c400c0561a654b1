"""A blob of the store as planners see it: its content read and inflated once.

pygit2's ``Blob.data`` reads the object from the object database and inflates it again at every
access (it is ``read_raw()``), and ``Blob.size`` loads the whole object the first time: a write
that compared, hashed and screened a memory's old content paid three or four inflates of it
(about 0.3 ms each for 100 kB). :class:`StoredBlob` loads it once and keeps the bytes.
"""

from __future__ import annotations

import pygit2


class StoredBlob:
    """``id``, ``data`` and ``size`` of a blob, its content read once (on first use)."""

    __slots__ = ("id", "_blob", "_data")

    def __init__(self, blob: pygit2.Blob) -> None:
        self.id: pygit2.Oid = blob.id
        self._blob = blob
        self._data: bytes | None = None

    @property
    def data(self) -> bytes:
        if self._data is None:
            # The loaded object's buffer (git_blob_rawcontent): one read, then a copy.
            self._data = bytes(memoryview(self._blob))
        return self._data

    @property
    def size(self) -> int:
        return len(self._data) if self._data is not None else self._blob.size

    def __repr__(self) -> str:
        return f"StoredBlob({self.id})"
