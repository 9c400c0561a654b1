"""Queries of the derived index: heads, versions and a scope's counters (the names and signatures
that search, history and the faces read through :class:`gitmem.engine.index.Index`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gitmem.engine.index_db import IndexDb
from gitmem.engine.rows import VERSION_COLUMNS, HeadRow, VersionRow

_HEADS_CACHED = 512  # Index.head_at's rows (about 1 kB each), dropped whole when full


class Queries(IndexDb):
    """Reading the index (a part of :class:`gitmem.engine.index.Index`)."""

    def head_at(self, scope: str, path: str, tip: str, blob: str) -> HeadRow | None:
        """:meth:`head` for a reader that found ``blob`` at ``path`` in commit ``tip`` (and made
        the index current for it), remembered per path: a scope's head at one tip never changes.
        Only a row naming that very blob is kept, and one is only returned for the same tip and
        blob; any other answer comes from SQLite again. Saves a query (most of what a read costs
        beyond the raw tree lookup)."""
        key = (scope, path)
        hit = self._heads.get(key)
        if hit is not None and hit[0] == tip and hit[1].blob == blob:
            return hit[1]
        # The scope's indexed tip in the same query: a tip this handle indexed before may be one a
        # plain-git reset brought the branch back to after another handle moved the index on.
        found = self.db.execute(
            "SELECT s.tip, h.* FROM scopes s LEFT JOIN heads h ON h.scope = s.scope AND h.path = ? "
            "WHERE s.scope = ?",
            (path, scope),
        ).fetchone()
        if found is None or found[0] != tip:
            self._known_tips.pop(scope, None)  # the caller's next ensure catches up
            return None
        row = HeadRow(*found[1:]) if found[1] is not None else None
        if row is not None and row.blob == blob:
            if len(self._heads) >= _HEADS_CACHED:
                self._heads.clear()
            self._heads[key] = (tip, row)
        return row

    def head(self, scope: str, path: str) -> HeadRow | None:
        row = self.db.execute("SELECT * FROM heads WHERE scope=? AND path=?", (scope, path)).fetchone()
        return HeadRow(*row) if row else None

    def head_by_memory(self, scope: str, memory_id: str) -> HeadRow | None:
        row = self.db.execute(
            "SELECT * FROM heads WHERE scope=? AND memory_id=?", (scope, memory_id)
        ).fetchone()
        return HeadRow(*row) if row else None

    def heads(self, scope: str, prefix: str = "/") -> list[HeadRow]:
        if prefix == "/":
            cur = self.db.execute("SELECT * FROM heads WHERE scope=? ORDER BY path", (scope,))
        else:
            # Every path under the prefix sorts in [prefix, prefix with its final '/' bumped to '0').
            cur = self.db.execute(
                "SELECT * FROM heads WHERE scope=? AND path >= ? AND path < ? ORDER BY path",
                (scope, prefix, prefix[:-1] + "0"),
            )
        return [HeadRow(*r) for r in cur]

    def scope_stats(self, scope: str) -> tuple[int, int]:
        row = self.db.execute("SELECT memories, bytes FROM scopes WHERE scope=?", (scope,)).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def store_bytes(self) -> int:
        row = self.db.execute("SELECT COALESCE(SUM(bytes), 0) FROM scopes").fetchone()
        return int(row[0])

    def version_rows(
        self, where: str = "", params: Sequence[Any] = (), limit: int | None = None
    ) -> list[VersionRow]:
        sql = f"SELECT {VERSION_COLUMNS} FROM versions"
        if where:
            sql += " WHERE " + where
        sql += " ORDER BY created_at DESC, seq DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [VersionRow(*r) for r in self.db.execute(sql, tuple(params))]
