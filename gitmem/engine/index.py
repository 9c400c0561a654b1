"""The derived SQLite index: versions and heads of every scope (docs/architecture.md#the-index-and-search).

Git is the source of truth. The index lives in ``$GIT_DIR/gitmem/index.sqlite`` (WAL) and is caught
up incrementally from the last indexed commit of each scope; a missing, stale, corrupt or
rewritten-under-it index is rebuilt from git transparently. Writers record their own commit
directly (no diff) when the index was current at their parent; everyone else catches up.

:class:`Index` is composed of its parts, each a module: the connection, schema and write
transaction (:mod:`gitmem.engine.index_db`), the writers' records and redaction marks
(:mod:`gitmem.engine.index_records`), catch-up and rebuild (:mod:`gitmem.engine.index_catchup`),
history rewrites (:mod:`gitmem.engine.index_rewrites`) and queries
(:mod:`gitmem.engine.index_queries`). The names callers import stay here.
"""

from __future__ import annotations

from gitmem.engine.forkgate import FORK_WAIT
from gitmem.engine.index_db import BUSY_TIMEOUT, INDEX_FILE, PURGE_PENDING, SCHEMA_VERSION
from gitmem.engine.index_queries import Queries
from gitmem.engine.index_records import StagedRecord
from gitmem.engine.index_rewrites import Rewrites

__all__ = [
    "BUSY_TIMEOUT",
    "FORK_WAIT",
    "INDEX_FILE",
    "PURGE_PENDING",
    "SCHEMA_VERSION",
    "Index",
    "StagedRecord",
]


class Index(Rewrites, Queries):
    """The derived index of one store: one SQLite connection per thread, its schema and its write
    transaction; catch-up, the writers' own records and rewrites all go through that transaction."""
