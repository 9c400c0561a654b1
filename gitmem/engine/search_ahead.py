"""The full-text rows of a fresh walk's heads, written by a thread while the walk derives its
versions (:class:`SearchAhead`).

A rebuild (a scope derived from nothing) used to write one FTS5 row per head at its end: FTS5's
porter tokenizer over every head's text, about a third of a rebuild's CPU, after the walk and on
the same core. A head's row depends on its path and its content only (the description is parsed
from the content), and when the walk has no merge a scope's heads at its end are the files of the
walk's tip. So a thread reads the tip's file list through git (``git ls-tree``: no GIL held while
git reads) and, as the walk hands it the contents of the versions it derives, inserts the row of
each path whose content is the tip's, once, into the walk's own transaction on the same
connection: SQLite runs with the GIL released while it tokenizes, so the rows are written on the
other core while the walk's Python runs. Docids follow the order in which the paths reached their
final content (a rebuild used to number them in path order; a store indexed write by write
numbers them in the order of its writes: nothing reads the order). At its end the walk checks that
its heads are exactly the files the thread indexed (path and blob id); otherwise (a merge, a
snapshot commit naming fewer files, a git that failed) the thread's rows are deleted and the
heads' rows written at the end as before.
"""

from __future__ import annotations

import queue
import sqlite3
import threading

from gitmem.engine import search
from gitmem.git.tipfiles import tip_files
from gitmem.model.frontmatter import parse_description

_ROWS = 64  # rows per executemany
_BATCH = 64  # contents handed over at once (one wake-up of the thread per batch, not per item)
_QUEUE = 64  # batches handed over and not indexed yet (the walk waits beyond)
_Item = tuple[str, str, bytes]  # (path, blob id, content)


class SearchAhead:
    """The FTS5 rows of the files of ``tip_hex`` inserted into ``db`` by a thread, with docids
    from ``after + 1``, from the contents :meth:`offer` hands it. :meth:`finish` or
    :meth:`discard` must be called before the walk's transaction ends (both wait for the thread)."""

    def __init__(self, db: sqlite3.Connection, git_dir: str, tip_hex: str, after: int) -> None:
        self._db, self._git_dir, self._tip, self._after = db, git_dir, tip_hex, after
        self._queue: queue.Queue[list[_Item] | None] = queue.Queue(_QUEUE)  # None: the end
        self._batch: list[_Item] = []
        # The tip's files (path -> blob id), once the thread read them: the walk then offers
        # only the contents that are final (the thread checks again those offered before).
        self.files: dict[str, str] | None = None
        self._done: dict[str, tuple[int, str | None]] = {}  # path -> (docid, description)
        self._ok = False  # every item up to the end was indexed
        self._wrote = False  # some row may be in the table
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gitmem-search-ahead", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        get = self._queue.get
        try:
            files = tip_files(self._git_dir, self._tip)
            if files is None:
                return
            self.files = files
            done, rows, docid = self._done, [], self._after
            while (batch := get()) is not None:
                for path, blob, data in batch:
                    if files.get(path) != blob or path in done:
                        continue
                    text = data.decode("utf-8", "replace")
                    desc = parse_description(text) if data.startswith(b"---") else None
                    docid += 1
                    done[path] = (docid, desc)
                    rows.append((docid, path, desc, search.body_text(text)))
                if len(rows) >= _ROWS:
                    if not self._insert(rows):
                        return
                    rows = []
            self._ok = self._insert(rows)
        except Exception:  # noqa: BLE001 - git or SQLite failed: the walk writes the rows itself
            return
        finally:
            self._stop.set()  # the walk's later offers go nowhere
            _drain(self._queue)

    def offer(self, path: str, blob: str, data: bytes) -> None:
        """Hand the thread the content of a version the walk derived (by batches: the walk
        waits while the thread is behind by more than a queue's worth)."""
        batch = self._batch
        batch.append((path, blob, data))
        if len(batch) >= _BATCH:
            self._batch = []
            self._put(batch)

    def _put(self, batch: list[_Item] | None) -> None:
        put = self._queue.put
        while not self._stop.is_set():
            try:
                put(batch, timeout=0.05)
                return
            except queue.Full:
                continue

    def _insert(self, rows: list[tuple[int, str, str | None, str]]) -> bool:
        if self._stop.is_set():
            return False
        self._wrote = True
        search.index_bodies(self._db, rows)
        return True

    def finish(self, heads: dict[str, str]) -> dict[str, tuple[int, str | None]] | None:
        """Wait for the thread; each head's (docid, description) by path when its rows are those
        of ``heads`` (path -> blob id: the walk's heads), else None (its rows deleted)."""
        self._end()
        if self._ok and self.files == heads and len(self._done) == len(heads):
            return self._done
        self.discard()
        return None

    def discard(self) -> None:
        """Stop the thread and delete whatever rows it wrote."""
        self._stop.set()
        self._end()
        if self._wrote:
            search.unindex_after(self._db, self._after)
            self._wrote = False
        self._ok = False
        self.files = None

    def _end(self) -> None:
        batch, self._batch = self._batch, []
        if self._stop.is_set():  # offers go nowhere now: make room and wake the thread
            _drain(self._queue)
            self._queue.put(None)
        else:
            self._put(batch)
            self._put(None)
        self._thread.join()


def _drain(q: queue.Queue[list[_Item] | None]) -> None:
    """Empty ``q`` (a walk blocked on a full queue goes on)."""
    while True:
        try:
            q.get_nowait()
        except queue.Empty:
            return
