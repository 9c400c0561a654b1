"""Redactions and purges on every copy of a store (docs/cluster.md#redactions-on-replicas).

A redaction at the home rewrites history and deny-lists the retired objects. The home replicates
the forced refs and the deny-list; each replica, once its refs moved, purges the deny-listed
objects it still holds (:func:`gitmem.git.purge.purge`) and proves it with the same check a clone's
purge uses (:func:`gitmem.audit.purge_proof.prove_purged`), then records in the shared state which
deny-list it proved (by digest). A store's purge is **verified** only when every replica proved
the home's current deny-list: a replica that is down, or whose proof failed, keeps it pending,
and the home sends it again at every beat until it holds.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gitmem.store import purge_and_prove

if TYPE_CHECKING:
    from gitmem.cluster.state import ClusterState

PROVED_FILE = "gitmem/replica_purged"  # the deny-list digest this copy last proved


@dataclass(frozen=True)
class PurgeState:
    store_id: str
    verified: bool  # every replica proved the home's deny-list
    pending: dict[str, str]  # replica -> why it is not proved yet


def denylist_digest(git_dir: Path) -> str:
    """The digest of a copy's deny-list ("" when it has none)."""
    path = git_dir / "gitmem" / "denylist"
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""


def purge_copy(git_dir: Path) -> tuple[str, str]:
    """Purge a replica's copy of what its deny-list names and prove it: (digest proved, "") or
    (digest, the reason it is not proved). Skipped when this deny-list was proved here before."""
    digest = denylist_digest(git_dir)
    marker = git_dir / PROVED_FILE
    if not digest or (marker.exists() and marker.read_text().strip() == digest):
        return digest, ""
    problem = purge_and_prove(git_dir)
    if problem:
        return digest, problem
    tmp = marker.with_name(".replica_purged.tmp")
    tmp.write_text(digest)
    os.replace(tmp, marker)
    return digest, ""


def record(state: ClusterState, store_id: str, node: str, digest: str, problem: str) -> None:
    state.conn().execute(
        "INSERT INTO purges (store_id, node, denylist_sha256, proved, detail) VALUES (%s, %s, %s, %s, %s)"
        " ON CONFLICT (store_id, node) DO UPDATE SET denylist_sha256 = EXCLUDED.denylist_sha256,"
        " proved = EXCLUDED.proved, detail = EXCLUDED.detail, updated_at = now()",
        (store_id, node, digest, not problem, problem[:2000]),
    )


def status(state: ClusterState, store_id: str, home_copy: Path) -> PurgeState:
    """Whether every replica of the store proved the home's current deny-list."""
    want = denylist_digest(home_copy)
    placement = state.placement(store_id)
    rows = {
        n: (d, bool(p), t)
        for n, d, p, t in state.conn()
        .execute("SELECT node, denylist_sha256, proved, detail FROM purges WHERE store_id = %s", (store_id,))
        .fetchall()
    }
    pending: dict[str, str] = {}
    if want:
        for replica in placement.replicas:
            got = rows.get(replica)
            if got is None or got[0] != want:
                pending[replica] = "has not proved the current deny-list yet (down, or not yet sent)"
            elif not got[1]:
                pending[replica] = got[2] or "its proof failed"
    return PurgeState(store_id, not pending, pending)


def unproved(state: ClusterState) -> list[tuple[str, str, str]]:
    """(store, replica, why) for every replica copy whose last purge proof failed."""
    rows = (
        state.conn()
        .execute("SELECT store_id, node, detail FROM purges WHERE NOT proved ORDER BY store_id, node")
        .fetchall()
    )
    return [(str(s), str(n), str(d)) for s, n, d in rows]
