"""Following a history rewrite (gitmem.audit.redact, compaction) in the derived index: new commit
ids and the redacted blobs forgotten in place, or the scope re-derived when the index was not at
the rewrite's old tip. The redaction marks themselves are :class:`gitmem.engine.index_records.Records`'."""

from __future__ import annotations

from typing import Any

from gitmem.engine.index_catchup import CatchUp


class Rewrites(CatchUp):
    """History rewrites (a part of :class:`gitmem.engine.index.Index`)."""

    def apply_rewrite(
        self,
        scope: str,
        old_tip: str,
        new_tip: str,
        commit_map: dict[str, str],
        blob_map: dict[str, list[Any]],
    ) -> None:
        """Follow a history rewrite without re-deriving the scope: new commit ids, and the redacted
        blobs forgotten (``blob_map``: old blob -> [new blob, sha256, size]). When the index was not
        at ``old_tip``, the scope is dropped and re-derived from git on the next read."""
        stale = False
        with self._write() as db:
            row = db.execute("SELECT tip FROM scopes WHERE scope=?", (scope,)).fetchone()
            if row is not None and row[0] == new_tip:
                return
            if row is None or row[0] != old_tip:
                # Re-derived below, in one transaction: dropping the scope here and deriving it in
                # another would let a writer (whose handle knows the tip) see an empty scope between
                # the two and mint new memory ids for paths that have one.
                stale = True
            else:
                # One pass over the scope (a rewrite may map 100k commits).
                db.execute("CREATE TEMP TABLE IF NOT EXISTS rewrite_map(old TEXT PRIMARY KEY, new TEXT)")
                db.execute("DELETE FROM rewrite_map")
                db.executemany("INSERT INTO rewrite_map VALUES(?,?)", commit_map.items())
                big = len(commit_map) > 5000  # rebuilding the commit index beats updating it row by row
                if big:
                    db.execute("DROP INDEX IF EXISTS versions_commit")
                db.execute(
                    "UPDATE versions SET commit_id=(SELECT new FROM rewrite_map WHERE old=versions.commit_id) "
                    "WHERE scope=? AND commit_id IN (SELECT old FROM rewrite_map)",
                    (scope,),
                )
                if big:
                    db.execute("CREATE INDEX IF NOT EXISTS versions_commit ON versions(commit_id)")
                db.execute("DELETE FROM rewrite_map")
                db.executemany(
                    "UPDATE versions SET blob=?, sha256=?, size=? WHERE scope=? AND blob=?",
                    [(n[0], n[1], n[2], scope, old) for old, n in blob_map.items()],
                )
                db.execute("UPDATE scopes SET tip=? WHERE scope=?", (new_tip, scope))
        self._known_tips.pop(scope, None)
        if stale:
            self._catch_up(scope, self.store.tip(scope))  # atomic: drop and re-derive in one transaction
        self.ensure(scope)
        self.purge_search()
