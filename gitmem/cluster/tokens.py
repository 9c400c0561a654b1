"""API tokens kept in the cluster's PostgreSQL, so a token works on every node and a revocation is
refused everywhere at the next request (docs/cluster.md#what-is-built).

:class:`ClusterTokenStore` is the workspace's :class:`~gitmem.server.tokens.TokenStore` with its
storage swapped: the same records (the token's fields and the SHA-256 of its secret, never the
secret), the same create/revoke/authenticate rules. Each request reads one row, the token
generation, which every change bumps in the same transaction; the records are fetched again only
when it moved.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gitmem.cluster.state import ClusterState
from gitmem.server.tokens import TokenStore


class _Where:
    """What ``TokenStore`` knows as its file's path: here it always exists (the table does)."""

    def exists(self) -> bool:
        return True

    def __str__(self) -> str:
        return "the cluster database's tokens table"


class ClusterTokenStore(TokenStore):
    """Tokens in the ``tokens`` table; see the module docstring."""

    def __init__(self, state: ClusterState) -> None:  # no workspace: nothing is read from disk
        self.state = state
        self.path = _Where()  # type: ignore[assignment]
        self._home = ""  # grants are by store id: no workspace resolves a name here
        self._lock = threading.Lock()
        self._generation: int | None = None
        self._records: dict[str, dict[str, Any]] = {}
        self._tokens = {}

    def _store_id(self, name: str) -> str:
        """A grant names a store by id, or by a name one placed store carries (docs/stores.md)."""
        from gitmem.ids import is_id

        if is_id(name, "memstore"):
            return name
        return self.state.resolve(name).store_id

    def _read_migrated(self) -> dict[str, dict[str, Any]]:
        return self._read()  # the cluster's records were made with ids

    def _load(self) -> dict[str, dict[str, Any]]:
        row = self.state.conn().execute("SELECT generation FROM token_generation").fetchone()
        generation = int(row[0]) if row else 0
        with self._lock:
            if generation == self._generation:
                return self._records
        records = self._read()
        with self._lock:
            self._records, self._tokens, self._generation = records, {}, generation
            return self._records

    def _read(self) -> dict[str, dict[str, Any]]:
        rows = self.state.conn().execute("SELECT id, record FROM tokens").fetchall()
        return {token_id: dict(record) for token_id, record in rows}

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self.state.transaction() as conn:
            conn.execute("SELECT generation FROM token_generation FOR UPDATE")  # one writer at a time
            yield

    def _save(self, records: dict[str, dict[str, Any]]) -> None:
        from psycopg.types.json import Jsonb

        conn = self.state.conn()  # inside _locked's transaction (the same thread's connection)
        current = self._read()
        for token_id in current.keys() - records.keys():
            conn.execute("DELETE FROM tokens WHERE id = %s", (token_id,))
        for token_id, record in records.items():
            if current.get(token_id) != record:
                conn.execute(
                    "INSERT INTO tokens (id, record) VALUES (%s, %s)"
                    " ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record",
                    (token_id, Jsonb(record)),
                )
        conn.execute("UPDATE token_generation SET generation = generation + 1")

    def import_records(self, source: TokenStore) -> int:
        """Copy a workspace's tokens (``tokens.json``) into the cluster; the number copied. Tokens
        already in the cluster are kept as they are."""
        incoming = source._read() if source.path.exists() else {}
        with self._locked():
            records = self._read()
            added = {k: json.loads(json.dumps(v)) for k, v in incoming.items() if k not in records}
            if added:
                self._save({**records, **added})
        return len(added)
