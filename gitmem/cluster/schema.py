"""The cluster's PostgreSQL schema, as numbered migrations applied once each, in order.

``migrate(conn)`` takes a transaction-level advisory lock, so that nodes starting together apply
each migration exactly once; the table ``gitmem_schema`` records what is applied. A database whose
schema is newer than this code knows is refused: an old node must not write to a layout it does not
understand (docs/cluster.md#what-is-built).
"""

from __future__ import annotations

from typing import Any

from gitmem.errors import ConfigError

# pg_advisory_xact_lock key: "gitmem" in ASCII, so other users of the database are not blocked.
MIGRATION_LOCK = 0x6769746D656D

MIGRATIONS: tuple[tuple[int, str, str], ...] = (
    (
        1,
        "nodes, placement, leases with fencing epochs, tokens, the replication queue",
        """
        CREATE TABLE nodes (
            name        text PRIMARY KEY,
            url         text NOT NULL,
            joined_at   timestamptz NOT NULL DEFAULT now(),
            last_seen   timestamptz NOT NULL DEFAULT now(),
            draining    boolean NOT NULL DEFAULT false
        );
        CREATE TABLE placements (
            store_id    text PRIMARY KEY,
            name        text NOT NULL DEFAULT '',
            home        text NOT NULL REFERENCES nodes(name),
            replicas    text[] NOT NULL DEFAULT '{}',
            placed_at   timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX placements_name ON placements (name);
        CREATE TABLE cluster_secret (
            one         boolean PRIMARY KEY DEFAULT true CHECK (one),
            secret      bytea NOT NULL
        );
        INSERT INTO cluster_secret (secret) VALUES (uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()));
        CREATE TABLE leases (
            store_id    text PRIMARY KEY,
            holder      text NOT NULL REFERENCES nodes(name),
            epoch       bigint NOT NULL CHECK (epoch > 0),
            expires_at  timestamptz NOT NULL
        );
        CREATE TABLE tokens (
            id          text PRIMARY KEY,
            record      jsonb NOT NULL
        );
        CREATE TABLE token_generation (
            one         boolean PRIMARY KEY DEFAULT true CHECK (one),
            generation  bigint NOT NULL
        );
        INSERT INTO token_generation (generation) VALUES (0);
        CREATE SEQUENCE replication_seq;
        CREATE TABLE replica_positions (
            store_id    text NOT NULL,
            node        text NOT NULL REFERENCES nodes(name),
            refs_sha256 text NOT NULL,
            applied_at  timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (store_id, node)
        );
        CREATE TABLE replication_queue (
            id          bigserial PRIMARY KEY,
            store_id    text NOT NULL,
            target      text NOT NULL REFERENCES nodes(name),
            epoch       bigint NOT NULL,
            kind        text NOT NULL,
            payload     jsonb NOT NULL DEFAULT '{}',
            enqueued_at timestamptz NOT NULL DEFAULT now(),
            not_before  timestamptz NOT NULL DEFAULT now(),
            claimed_by  text,
            claimed_until timestamptz,
            attempts    integer NOT NULL DEFAULT 0,
            last_error  text,
            done_at     timestamptz
        );
        CREATE INDEX replication_queue_pending ON replication_queue (target, not_before) WHERE done_at IS NULL;
        """,
    ),
    (
        2,
        "move handoffs, replica positions by replication number, the sync ack point, lost writes, purge proofs",
        """
        ALTER TABLE placements ADD COLUMN moving_to text REFERENCES nodes(name);
        ALTER TABLE replica_positions ADD COLUMN seq bigint NOT NULL DEFAULT 0;
        CREATE TABLE acked (
            store_id    text PRIMARY KEY,
            seq         bigint NOT NULL
        );
        CREATE TABLE lost_writes (
            id          bigserial PRIMARY KEY,
            store_id    text NOT NULL,
            node        text NOT NULL,
            epoch       bigint NOT NULL,
            ref         text NOT NULL,
            commit_id   text NOT NULL,
            summary     text NOT NULL,
            bundle      text NOT NULL,
            found_at    timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE purges (
            store_id    text NOT NULL,
            node        text NOT NULL,
            denylist_sha256 text NOT NULL,
            proved      boolean NOT NULL,
            detail      text NOT NULL DEFAULT '',
            updated_at  timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (store_id, node)
        );
        """,
    ),
    (
        3,
        "a lost write is recorded once per store, old home, epoch and commit",
        """
        DELETE FROM lost_writes a USING lost_writes b
            WHERE a.store_id = b.store_id AND a.node = b.node AND a.epoch = b.epoch
            AND a.commit_id = b.commit_id AND a.id > b.id;
        CREATE UNIQUE INDEX lost_writes_once ON lost_writes (store_id, node, epoch, commit_id);
        """,
    ),
    (
        4,
        "webhooks: the cluster's endpoints, workspace ids and each store's delivery cursors",
        """
        CREATE TABLE webhook_endpoints (
            id          text PRIMARY KEY,
            body        jsonb NOT NULL,
            removed     boolean NOT NULL DEFAULT false,
            updated_at  timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE webhook_workspace (
            one         boolean PRIMARY KEY DEFAULT true CHECK (one),
            ids         jsonb NOT NULL
        );
        CREATE TABLE webhook_cursors (
            endpoint_id text NOT NULL,
            store_id    text NOT NULL,
            cursor      jsonb NOT NULL,
            node        text NOT NULL,
            updated_at  timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (endpoint_id, store_id)
        );
        """,
    ),
    (
        5,
        "webhooks: the store-level journal shared, and which endpoint each entry was sent to",
        """
        CREATE TABLE webhook_journal (
            seq         bigserial PRIMARY KEY,
            id          text NOT NULL UNIQUE,
            store_id    text NOT NULL,
            type        text NOT NULL,
            created_at  text NOT NULL,
            node        text NOT NULL,
            node_seq    integer NOT NULL
        );
        CREATE INDEX webhook_journal_node ON webhook_journal (node, node_seq);
        CREATE TABLE webhook_journal_sent (
            endpoint_id text NOT NULL,
            event_id    text NOT NULL,
            node        text NOT NULL,
            sent_at     timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (endpoint_id, event_id)
        );
        ALTER TABLE webhook_endpoints ADD COLUMN journal_from bigint;  -- NULL: an endpoint from before
        """,
    ),
)
LATEST = MIGRATIONS[-1][0]


def applied(conn: Any) -> int:
    """The newest migration applied to the database (0: none)."""
    row = conn.execute(
        "SELECT to_regclass('gitmem_schema') IS NOT NULL",
    ).fetchone()
    if not row or not row[0]:
        return 0
    got = conn.execute("SELECT coalesce(max(version), 0) FROM gitmem_schema").fetchone()
    return int(got[0]) if got else 0


def migrate(conn: Any) -> list[int]:
    """Apply every migration the database lacks, in one transaction; the versions applied."""
    done: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS gitmem_schema ("
            " version integer PRIMARY KEY, description text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        current = applied(conn)
        if current > LATEST:
            raise ConfigError(
                f"the cluster database has schema version {current}, newer than this gitmem knows "
                f"({LATEST}): upgrade this node before it joins"
            )
        for version, description, sql in MIGRATIONS:
            if version <= current:
                continue
            conn.execute(sql)
            conn.execute(
                "INSERT INTO gitmem_schema (version, description) VALUES (%s, %s)", (version, description)
            )
            done.append(version)
    return done


def check(conn: Any) -> None:
    """Refuse a database whose schema is not exactly this code's (too old: run ``cluster init``)."""
    current = applied(conn)
    if current != LATEST:
        hint = "run 'gitmem cluster init'" if current < LATEST else "upgrade this node"
        raise ConfigError(
            f"the cluster database has schema version {current}, this gitmem needs {LATEST}: {hint}"
        )
