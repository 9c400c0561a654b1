"""The cluster's shared state in PostgreSQL: nodes, store placement, write leases with fencing
epochs, and the replication queue (docs/cluster.md).

Every time is PostgreSQL's ``now()``, never a node's clock, so nodes whose clocks drift still agree
on who holds a lease. A lease's **epoch** only grows: a takeover sets it to the old epoch plus one,
and a node may publish a store's writes only while ``fence_ok(store, node, epoch)`` holds for the
epoch it was granted. A home that was taken over, however it comes back, carries an old epoch and
is refused.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from gitmem.cluster import schema
from gitmem.errors import ConflictError, InvalidInputError, NotFoundError, UnavailableError

DEFAULT_LEASE_SECONDS = 10.0
DEFAULT_HEALTHY_SECONDS = 15.0  # a node not seen for this long is down
CLAIM_SECONDS = 60.0  # a claimed queue item not acknowledged by then is handed out again


@dataclass(frozen=True)
class Node:
    name: str
    url: str
    healthy: bool
    draining: bool
    seen_seconds_ago: float


@dataclass(frozen=True)
class Placement:
    store_id: str
    home: str
    replicas: tuple[str, ...]
    moving_to: str | None = None  # a requested move, handed over by the home (cluster/handoff.py)


@dataclass(frozen=True)
class Lease:
    store_id: str
    holder: str
    epoch: int
    valid: bool  # not yet expired, by PostgreSQL's clock


@dataclass(frozen=True)
class QueueItem:
    id: int
    store_id: str
    target: str
    epoch: int
    kind: str
    payload: dict[str, Any]
    attempts: int


def _unavailable(exc: Exception) -> UnavailableError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return UnavailableError(f"the cluster database cannot be reached: {first}")


def _connect(dsn: str) -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise InvalidInputError("the cluster needs psycopg: pip install 'gitmem-store[cluster]'") from exc

    class Connection(psycopg.Connection[Any]):
        """A lost database is UnavailableError (503, exit 8) at every statement, not a driver error."""

        def execute(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().execute(*args, **kwargs)
            except psycopg.OperationalError as exc:
                raise _unavailable(exc) from None

    try:
        # keepalives and a TCP timeout: a database cut off by a partition fails a statement in
        # seconds instead of hanging a heartbeat (the fence closes on its own clock meanwhile)
        return Connection.connect(
            dsn, autocommit=True, connect_timeout=10, keepalives=1, keepalives_idle=5,
            keepalives_interval=2, keepalives_count=2, tcp_user_timeout=10000,
        )  # fmt: skip
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnavailableError(f"the cluster database cannot be reached: {first}") from None


class ClusterState:
    """One node's handle on the shared state: a connection per thread, opened on first use."""

    def __init__(self, dsn: str, *, healthy_seconds: float = DEFAULT_HEALTHY_SECONDS) -> None:
        if not dsn:
            raise InvalidInputError("no cluster database URL (cluster.database in the config)")
        self.dsn = dsn
        self.healthy_seconds = healthy_seconds
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ connections
    def conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = _connect(self.dsn)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        import psycopg

        conn = self.conn()
        try:
            with conn.transaction():
                yield conn
        except psycopg.OperationalError as exc:  # the commit itself met a lost database
            raise _unavailable(exc) from None

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()

    def __enter__(self) -> ClusterState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def init(self) -> list[int]:
        """Create or upgrade the schema; the migrations applied."""
        return schema.migrate(self.conn())

    def check_schema(self) -> None:
        schema.check(self.conn())

    # ------------------------------------------------------------------ nodes
    def join(self, name: str, url: str) -> Node:
        """Register (or re-register) a node; it counts as seen now."""
        if not name or not url:
            raise InvalidInputError("a node needs a name and a URL")
        self.conn().execute(
            "INSERT INTO nodes (name, url) VALUES (%s, %s) ON CONFLICT (name) DO UPDATE"
            " SET url = EXCLUDED.url, last_seen = now()",
            (name, url),
        )
        return self.node(name)

    def heartbeat(self, name: str) -> None:
        cur = self.conn().execute("UPDATE nodes SET last_seen = now() WHERE name = %s", (name,))
        if cur.rowcount == 0:
            raise NotFoundError(f"node {name!r} has not joined the cluster")

    def set_draining(self, name: str, draining: bool = True) -> None:
        cur = self.conn().execute("UPDATE nodes SET draining = %s WHERE name = %s", (draining, name))
        if cur.rowcount == 0:
            raise NotFoundError(f"node {name!r} has not joined the cluster")

    def nodes(self) -> list[Node]:
        rows = (
            self.conn()
            .execute(
                "SELECT name, url, draining, extract(epoch FROM now() - last_seen) FROM nodes ORDER BY name"
            )
            .fetchall()
        )
        return [Node(n, u, float(s) <= self.healthy_seconds, bool(d), float(s)) for n, u, d, s in rows]

    def node(self, name: str) -> Node:
        for n in self.nodes():
            if n.name == name:
                return n
        raise NotFoundError(f"node {name!r} has not joined the cluster")

    # ------------------------------------------------------------------ placement
    def place(
        self, store_id: str, home: str | None = None, replicas: int | Sequence[str] = 1, name: str = ""
    ) -> Placement:
        """Place a new store: ``home`` (else the healthy, non-draining node homing fewest stores)
        and its replicas (a count, picked the same way, or names). Placing a placed store is a
        conflict: use :meth:`move`."""
        with self.transaction() as conn:
            conn.execute("LOCK TABLE placements IN SHARE ROW EXCLUSIVE MODE")
            if conn.execute("SELECT 1 FROM placements WHERE store_id = %s", (store_id,)).fetchone():
                raise ConflictError(f"store {store_id} is already placed")
            candidates = self._by_load(conn)
            if home is None:
                if not candidates:
                    raise ConflictError("no healthy node to place the store on")
                home = candidates[0]
            self._require_node(conn, home)
            if isinstance(replicas, int):
                chosen = [c for c in candidates if c != home][:replicas]
            else:
                chosen = [r for r in replicas if r != home]
                for r in chosen:
                    self._require_node(conn, r)
            conn.execute(
                "INSERT INTO placements (store_id, name, home, replicas) VALUES (%s, %s, %s, %s)",
                (store_id, name, home, chosen),
            )
        return Placement(store_id, home, tuple(chosen))

    def _by_load(self, conn: Any) -> list[str]:
        rows = conn.execute(
            "SELECT n.name FROM nodes n LEFT JOIN placements p ON p.home = n.name"
            " WHERE NOT n.draining AND n.last_seen > now() - make_interval(secs => %s)"
            " GROUP BY n.name ORDER BY count(p.store_id), n.name",
            (self.healthy_seconds,),
        ).fetchall()
        return [r[0] for r in rows]

    def _require_node(self, conn: Any, name: str) -> None:
        if not conn.execute("SELECT 1 FROM nodes WHERE name = %s", (name,)).fetchone():
            raise NotFoundError(f"node {name!r} has not joined the cluster")

    def placement(self, store_id: str) -> Placement:
        row = (
            self.conn()
            .execute("SELECT home, replicas, moving_to FROM placements WHERE store_id = %s", (store_id,))
            .fetchone()
        )
        if row is None:
            raise NotFoundError(f"store {store_id} is not placed in the cluster")
        return Placement(store_id, row[0], tuple(row[1]), row[2])

    def resolve(self, store: str) -> Placement:
        """The placement of the store with this id, else of the one store with this name."""
        rows = (
            self.conn()
            .execute(
                "SELECT store_id, home, replicas FROM placements WHERE store_id = %s OR name = %s",
                (store, store),
            )
            .fetchall()
        )
        by_id = [r for r in rows if r[0] == store]
        chosen = by_id or (rows if len(rows) == 1 else [])
        if not chosen:
            raise NotFoundError(f"store {store} is not placed in the cluster")
        return Placement(chosen[0][0], chosen[0][1], tuple(chosen[0][2]))

    def home_url(self, store: str) -> tuple[str, str]:
        """(home node, its URL) of the store with this id, else of the one store with this name."""
        rows = (
            self.conn()
            .execute(
                "SELECT p.home, n.url, p.store_id = %s FROM placements p JOIN nodes n ON n.name = p.home"
                " WHERE p.store_id = %s OR p.name = %s",
                (store, store, store),
            )
            .fetchall()
        )
        by_id = [r for r in rows if r[2]]
        chosen = by_id or (rows if len(rows) == 1 else [])
        if not chosen:
            raise NotFoundError(f"store {store} is not placed in the cluster")
        return chosen[0][0], chosen[0][1]

    def name_of(self, store_id: str) -> str:
        row = self.conn().execute("SELECT name FROM placements WHERE store_id = %s", (store_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"store {store_id} is not placed in the cluster")
        return str(row[0])

    def secret(self) -> bytes:
        """The cluster's secret, which signs requests one node forwards to another."""
        row = self.conn().execute("SELECT secret FROM cluster_secret").fetchone()
        return bytes(row[0])

    def placements(self) -> list[Placement]:
        rows = (
            self.conn()
            .execute("SELECT store_id, home, replicas, moving_to FROM placements ORDER BY store_id")
            .fetchall()
        )
        return [Placement(s, h, tuple(r), m) for s, h, r, m in rows]

    def move(self, store_id: str, node: str) -> Placement:
        """Make ``node`` the store's home at once; the old home becomes a replica. The lease is not
        moved here: the new home takes it over when the old one's expires. This is failover's step
        (the old home is down); a move of a live home is a handoff (cluster/handoff.py)."""
        with self.transaction() as conn:
            self._require_node(conn, node)
            row = conn.execute(
                "SELECT home, replicas FROM placements WHERE store_id = %s FOR UPDATE", (store_id,)
            ).fetchone()
            if row is None:
                raise NotFoundError(f"store {store_id} is not placed in the cluster")
            old, replicas = row[0], [r for r in row[1] if r != node]
            if old != node and old not in replicas:
                replicas.append(old)
            conn.execute(
                "UPDATE placements SET home = %s, replicas = %s, moving_to = NULL, placed_at = now()"
                " WHERE store_id = %s",
                (node, replicas, store_id),
            )
        return Placement(store_id, node, tuple(replicas))

    # ------------------------------------------------------------------ leases and fencing
    def acquire(self, store_id: str, node: str, seconds: float = DEFAULT_LEASE_SECONDS) -> Lease:
        """Take or renew the store's write lease for ``node``. A renewal by the holder keeps its
        epoch; a takeover (no lease yet, or the holder's expired) bumps it. ConflictError while
        another node holds a valid lease."""
        with self.transaction() as conn:
            first = conn.execute(
                "INSERT INTO leases (store_id, holder, epoch, expires_at)"
                " VALUES (%s, %s, 1, now() + make_interval(secs => %s))"
                " ON CONFLICT (store_id) DO NOTHING RETURNING epoch",
                (store_id, node, seconds),
            ).fetchone()
            if first is not None:  # the store's first lease
                return Lease(store_id, node, 1, True)
            row = conn.execute(
                "SELECT holder, epoch, expires_at > now() FROM leases WHERE store_id = %s FOR UPDATE",
                (store_id,),
            ).fetchone()
            holder, epoch, valid = row
            if holder != node and valid:
                raise ConflictError(f"store {store_id}'s lease is held by {holder} (epoch {epoch})")
            new_epoch = epoch if holder == node and valid else epoch + 1
            conn.execute(
                "UPDATE leases SET holder = %s, epoch = %s, expires_at = now() + make_interval(secs => %s)"
                " WHERE store_id = %s",
                (node, new_epoch, seconds, store_id),
            )
            return Lease(store_id, node, int(new_epoch), True)

    def renew(self, store_id: str, node: str, epoch: int, seconds: float = DEFAULT_LEASE_SECONDS) -> bool:
        """Extend the lease only if ``node`` still holds it at ``epoch`` and it has not expired."""
        cur = self.conn().execute(
            "UPDATE leases SET expires_at = now() + make_interval(secs => %s)"
            " WHERE store_id = %s AND holder = %s AND epoch = %s AND expires_at > now()",
            (seconds, store_id, node, epoch),
        )
        return bool(cur.rowcount)

    def release(self, store_id: str, node: str, epoch: int) -> None:
        """Give the lease up at once (a clean move); the next taker bumps the epoch."""
        self.conn().execute(
            "UPDATE leases SET expires_at = now() - interval '1 second'"
            " WHERE store_id = %s AND holder = %s AND epoch = %s",
            (store_id, node, epoch),
        )

    def lease(self, store_id: str) -> Lease:
        row = (
            self.conn()
            .execute("SELECT holder, epoch, expires_at > now() FROM leases WHERE store_id = %s", (store_id,))
            .fetchone()
        )
        if row is None:
            raise NotFoundError(f"store {store_id} has no lease")
        return Lease(store_id, row[0], int(row[1]), bool(row[2]))

    def fence_ok(self, store_id: str, node: str, epoch: int) -> bool:
        """Whether ``node`` may publish a write of the store under ``epoch`` right now."""
        row = (
            self.conn()
            .execute(
                "SELECT 1 FROM leases WHERE store_id = %s AND holder = %s AND epoch = %s AND expires_at > now()",
                (store_id, node, epoch),
            )
            .fetchone()
        )
        return row is not None

    # ------------------------------------------------------------------ replica positions
    def record_position(self, store_id: str, node: str, refs_sha256: str, seq: int = 0) -> None:
        """A replica says it applied replication number ``seq`` of the store (now)."""
        self.conn().execute(
            "INSERT INTO replica_positions (store_id, node, refs_sha256, seq) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (store_id, node) DO UPDATE SET refs_sha256 = EXCLUDED.refs_sha256,"
            " seq = EXCLUDED.seq, applied_at = now()",
            (store_id, node, refs_sha256, seq),
        )

    def next_seq(self) -> int:
        """A number larger than every one handed out before, cluster-wide (a replication's order)."""
        return int(self.conn().execute("SELECT nextval('replication_seq')").fetchone()[0])

    # ------------------------------------------------------------------ replication queue
    def enqueue(self, store_id: str, target: str, epoch: int, kind: str, payload: dict[str, Any]) -> int:
        from psycopg.types.json import Jsonb

        row = (
            self.conn()
            .execute(
                "INSERT INTO replication_queue (store_id, target, epoch, kind, payload)"
                " VALUES (%s, %s, %s, %s, %s) RETURNING id",
                (store_id, target, epoch, kind, Jsonb(payload)),
            )
            .fetchone()
        )
        return int(row[0])

    def claim(self, target: str, limit: int = 16, seconds: float = CLAIM_SECONDS) -> list[QueueItem]:
        """Up to ``limit`` items due for ``target``, oldest first, each claimed by one caller only
        (``FOR UPDATE SKIP LOCKED``) until acknowledged or its claim runs out."""
        with self.transaction() as conn:
            rows = conn.execute(
                "SELECT id, store_id, target, epoch, kind, payload, attempts FROM replication_queue"
                " WHERE target = %s AND done_at IS NULL AND not_before <= now()"
                " AND (claimed_until IS NULL OR claimed_until < now())"
                " ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
                (target, limit),
            ).fetchall()
            ids = [r[0] for r in rows]
            if ids:
                conn.execute(
                    "UPDATE replication_queue SET claimed_by = %s, attempts = attempts + 1,"
                    " claimed_until = now() + make_interval(secs => %s) WHERE id = ANY(%s)",
                    (target, seconds, ids),
                )
        return [QueueItem(int(i), s, t, int(e), k, dict(p), int(a) + 1) for i, s, t, e, k, p, a in rows]

    def ack(self, item_id: int) -> None:
        self.conn().execute("UPDATE replication_queue SET done_at = now() WHERE id = %s", (item_id,))

    def fail(self, item_id: int, error: str, backoff_seconds: float) -> None:
        """Hand the item back, due again after ``backoff_seconds``."""
        self.conn().execute(
            "UPDATE replication_queue SET claimed_by = NULL, claimed_until = NULL, last_error = %s,"
            " not_before = now() + make_interval(secs => %s) WHERE id = %s",
            (error[:2000], backoff_seconds, item_id),
        )

    def pending(self, store_id: str | None = None) -> int:
        if store_id is None:
            row = (
                self.conn().execute("SELECT count(*) FROM replication_queue WHERE done_at IS NULL").fetchone()
            )
        else:
            row = (
                self.conn()
                .execute(
                    "SELECT count(*) FROM replication_queue WHERE done_at IS NULL AND store_id = %s",
                    (store_id,),
                )
                .fetchone()
            )
        return int(row[0])
