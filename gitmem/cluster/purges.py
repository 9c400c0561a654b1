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

import contextlib
import hashlib
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitmem.errors import GitmemError, NotFoundError
from gitmem.store import purge_and_prove

if TYPE_CHECKING:
    from gitmem.cluster.nodeview import NodeView
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


LOST_DIR = "gitmem/lost"  # the async tails' bundles on an old home (cluster/endpoints.report_tail)


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _denied(git_dir: Path) -> set[str]:
    """The object ids of a copy's deny-list (the format of gitmem/engine/denylist.py)."""
    path = git_dir / "gitmem" / "denylist"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    return {
        item
        for item in (line.split("#", 1)[0].strip().lower() for line in text.splitlines())
        if len(item) == 40 and all(c in "0123456789abcdef" for c in item)
    }


def _held(bundle: Path) -> set[str] | None:
    """The objects a lost-tail bundle holds (listed beside it when it was made); None: unknown."""
    try:
        return set(bundle.with_suffix(".objects").read_text().split())
    except FileNotFoundError:
        return None


def purge_lost(git_dir: Path) -> tuple[list[str], str]:
    """Drop every lost-tail bundle of this copy that holds a deny-listed object (or whose objects
    are not listed, so cannot be told apart), leaving a report beside it
    (``<bundle>.dropped.json``: when, why, which deny-listed ids); then prove that no bundle left
    holds one. (the bundles dropped, "" once proved, else why not)."""
    lost = git_dir / LOST_DIR
    denied = _denied(git_dir) if lost.is_dir() else set()
    if not denied:
        return [], ""
    import datetime as dt

    dropped: list[str] = []
    for bundle in sorted(lost.glob("*.bundle")):
        held = _held(bundle)
        hit = sorted(held & denied) if held is not None else None
        if hit == []:
            continue
        report = {
            "bundle": f"{LOST_DIR}/{bundle.name}",
            "dropped_at": dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z"),
            "reason": "it held objects a redaction retired" if hit else "its objects were not listed",
            "denied_objects": hit,
        }
        write_atomic(bundle.with_suffix(".dropped.json"), json.dumps(report, indent=2) + "\n")
        bundle.unlink()
        bundle.with_suffix(".objects").unlink(missing_ok=True)
        dropped.append(f"{LOST_DIR}/{bundle.name}")
    for bundle in lost.glob("*.bundle"):  # the proof: what is left holds no deny-listed id
        held = _held(bundle)
        if held is None or held & denied:
            return dropped, f"the lost-tail bundle {bundle.name} still holds a redacted object"
    return dropped, ""


def record_dropped(state: ClusterState, store_id: str, node: str, bundles: list[str]) -> None:
    """The lost writes whose bundle was dropped say so (``gitmem cluster status`` lists them)."""
    for bundle in bundles:
        state.conn().execute(
            "UPDATE lost_writes SET bundle = %s WHERE store_id = %s AND node = %s AND bundle = %s",
            (f"dropped (held a redacted object; report: {bundle[:-7]}.dropped.json)", store_id, node, bundle),
        )


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


# ---------------------------------------------------------------------- the redaction's own answer
REDACTION = re.compile(r"^/v1/memory_stores/(?P<store>[^/]+)/memory_versions/[^/]+/redact/?$")
SETTLE_SECONDS = 10.0  # the most a redaction's answer waits for its replicas' proofs
# The replications a redaction's answer waits for run here (a few long-lived threads, as each keeps
# a database connection of its own); one that outlasts the wait goes on, and the beat retries.
_SETTLING = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gitmem-purge-settle")


def settle(node: NodeView, store: str, wait: float = SETTLE_SECONDS) -> PurgeState | None:
    """After a redaction of ``store`` homed here: send its replicas the new deny-list now (each
    purges and proves before it answers), waiting at most ``wait`` seconds (a replica that does not
    answer by then stays pending; the beat sends it again), and say whether every replica proved
    it. None when the store is not homed here (nothing of ours to say)."""
    try:
        placement = node.state.resolve(store)
    except NotFoundError:  # not placed: not a cluster store (yet)
        return None
    path = node._local.get(placement.store_id)
    if placement.home != node.name or path is None:
        return None
    if placement.replicas:
        done = _SETTLING.submit(_replicate_quietly, node, placement.store_id, path, placement.replicas)
        with contextlib.suppress(TimeoutError):
            done.result(timeout=wait)
    return status(node.state, placement.store_id, path)


def _replicate_quietly(node: NodeView, store_id: str, path: Path, replicas: tuple[str, ...]) -> None:
    try:
        node.replicate(store_id, path, replicas)
    except Exception as exc:  # noqa: BLE001 - a thread's error would be lost: the beat retries it
        node.replication_errors.append(f"{store_id}: purge on the replicas: {exc}")


def answer_json(got: PurgeState) -> dict[str, Any]:
    return {"verified": got.verified, "pending": dict(sorted(got.pending.items()))}


class PurgeAnswer:
    """A redaction's answer (``POST .../memory_versions/{id}/redact``) at the store's home gains
    ``purge``: ``verified`` only once every replica proved the purge, and the ``pending`` replicas
    with the reason (:func:`settle`; the answer never waits more than :data:`SETTLE_SECONDS`)."""

    def __init__(self, app: Any, node: NodeView, wait: float = SETTLE_SECONDS) -> None:
        self.app, self.node, self.wait = app, node, wait

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        import anyio.to_thread

        m = REDACTION.match(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if m is None:
            await self.app(scope, receive, send)
            return
        held: list[Any] = []

        async def hold(message: Any) -> None:  # the answer is small: held until the purge is known
            held.append(message)

        await self.app(scope, receive, hold)
        start = next(x for x in held if x["type"] == "http.response.start")
        body = b"".join(x.get("body", b"") for x in held if x["type"] == "http.response.body")
        got = None
        if 200 <= start["status"] < 300:
            try:
                got = await anyio.to_thread.run_sync(settle, self.node, m.group("store"), self.wait)
                data = json.loads(body)
            except (GitmemError, ValueError) as exc:
                got, data = PurgeState(m.group("store"), False, {"?": f"unknown: {exc}"}), None
            if got is not None and isinstance(data, dict):
                data["purge"] = answer_json(got)
                body = json.dumps(data).encode()
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body})
