"""One node of a gitmem cluster: it joins, keeps its heartbeat and the leases of the stores it
homes, places the stores it creates, and serves every face with the proxy in front
(docs/cluster.md)."""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitmem.cluster import handoff, webhook_state
from gitmem.cluster.endpoints import SIGNATURE
from gitmem.cluster.listing import RefListings
from gitmem.cluster.state import ClusterState, Placement
from gitmem.errors import ConflictError, GitmemError, NotFoundError, UnavailableError
from gitmem.store import ref_generation, shut_fence, write_fence

HOME_CACHE_SECONDS = 1.0  # a placement lookup is reused this long (a move is seen within it)


@dataclass
class ClusterNode:
    home: Path
    database: str
    name: str
    url: str
    replicas: int = 1
    heartbeat_seconds: float = 2.0
    lease_seconds: float = 10.0
    healthy_seconds: float | None = None  # default: 1.5 leases
    sync: bool = False  # acknowledge a write only once a replica holds it (docs/cluster.md)
    refs_recheck_seconds: float = 30.0  # a beat lists a store's refs at least this often (uncounted moves)
    state: ClusterState = field(init=False)
    epochs: dict[str, int] = field(default_factory=dict, init=False)  # store id -> lease epoch held
    forwarded: int = field(default=0, init=False)
    failovers: list[tuple[str, int]] = field(default_factory=list, init=False)  # (store id, epoch) taken over
    # the last errors of replications, moves and beats (bounded: a replica down for days is one error a beat)
    replication_errors: deque[str] = field(default_factory=lambda: deque(maxlen=200), init=False)
    moves: list[tuple[str, str, int]] = field(
        default_factory=list, init=False
    )  # (store, to, epoch) handed over
    lost: list[handoff.LostWrite] = field(default_factory=list, init=False)  # found on this node's old copies

    def __post_init__(self) -> None:
        if self.healthy_seconds is None:
            self.healthy_seconds = 1.5 * self.lease_seconds
        self.state = ClusterState(self.database, healthy_seconds=self.healthy_seconds)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cache: dict[str, tuple[float, tuple[str, str] | None]] = {}
        self._cache_lock = threading.Lock()
        # (store, replica) -> (digest, replication number) it was brought level to
        self._sent: dict[tuple[str, str], tuple[str, int]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._secret = b""
        self._local: dict[str, Path] = {}  # store id -> this node's repository of it (last listing)
        self._names: dict[str, str] = {}  # store id -> its name (last listing)
        self._tick_lock = threading.Lock()
        self._writes: dict[str, int] = {}  # store (id or name, as requested) -> writes in flight here
        self._handing: set[str] = set()  # ids and names of the stores being handed over
        self._connected_since: float | None = (
            None  # monotonic time of the first beat of this run of good ones
        )
        self._behind: dict[str, int] = {}  # store homed here -> replicas not level after its last replication
        self.listings = RefListings(self.refs_recheck_seconds)  # the beat's last ref listings
        # replications to several replicas at once (a few threads: each keeps one database connection)
        self._workers = ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"gitmem-replicate-{self.name}")
        # the beat's own replications run beside it: a replica that takes connections and never
        # answers must not hold up the next beat's lease renewals (the home would fence itself)
        self._beat_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"gitmem-beat-{self.name}")
        self._beat_sends: dict[str, Future[list[int]]] = {}  # store id -> its beat replication running

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        from gitmem.cluster import leftovers
        from gitmem.store import all_refs, handle_path

        # what this node left in its copies when it was killed mid-replication (its bundles)
        leftovers.sweep_store_copies(
            [handle_path(r.handle, self.home) for r in all_refs(self.home, strict=False)]
        )
        self.state.check_schema()
        self._secret = self.state.secret()
        self.state.join(self.name, self.url)
        self.tick()
        self._thread = threading.Thread(target=self._loop, name=f"gitmem-cluster-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._beat_pool.shutdown(wait=False, cancel_futures=True)
        self._workers.shutdown(wait=False, cancel_futures=True)
        self.state.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            try:
                self.tick(wait=False)
            except Exception as exc:  # noqa: BLE001 - the database is down, a copy is unreadable, ...:
                # the beat must go on (a dead heartbeat thread would never renew again); the
                # fences close on their own clock meanwhile
                self.replication_errors.append(f"beat: {type(exc).__name__}: {exc}")
                continue

    def tick(self, *, wait: bool = True) -> None:
        """One heartbeat: say we are alive, place new local stores, take or renew the leases of the
        stores homed here and fence each local copy: open while the lease holds, shut otherwise;
        hand over the stores asked to move, and take over those whose home is lost. Each homed
        store's replication starts beside the beat (one at a time per store: a store whose last one
        still runs is skipped); ``wait`` (a caller's tick) lets a running one end, replicates what
        is there now and returns once that ended; the heartbeat thread's beat does not wait, so
        its next renewal is on time whatever a replica does."""
        with self._tick_lock:
            started = self._tick(wait)
        if wait:
            for pending in started:
                with contextlib.suppress(Exception):  # its errors are in replication_errors
                    pending.result()

    def _tick(self, wait: bool) -> list[Future[list[int]]]:
        started_sends: list[Future[list[int]]] = []
        try:
            self.state.heartbeat(self.name)
        except GitmemError:
            self._connected_since = None  # out of touch: others' silence says nothing for a while
            raise
        if self._connected_since is None:
            self._connected_since = time.monotonic()
        local = self.sync_placements()
        for p in self.state.placements():
            path = local.get(p.store_id)
            if p.home != self.name:
                self.epochs.pop(p.store_id, None)
                self._forget_sent(p.store_id)  # what it sent as a home says nothing of later copies
                if path is not None:  # a copy here that is not the home never takes a write
                    shut_fence(path, self.name)
                continue
            started = time.monotonic()  # before the renewal reaches the database
            held = self.epochs.get(p.store_id)
            if held is None or not self.state.renew(p.store_id, self.name, held, self.lease_seconds):
                try:
                    held = self.state.acquire(p.store_id, self.name, self.lease_seconds).epoch
                except ConflictError:  # the old home's lease has not run out yet
                    held = None
            if held is None:
                self.epochs.pop(p.store_id, None)
                if path is not None:
                    shut_fence(path, self.name)
                continue
            self.epochs[p.store_id] = held
            if path is not None:
                if p.moving_to and self.hand_off(p, path, held):
                    continue
                write_fence(
                    path, node=self.name, epoch=held, renewed_at=started, lease_seconds=self.lease_seconds
                )
                running = self._beat_sends.get(p.store_id)
                if running is not None and not running.done():
                    if not wait:  # the last beat's copy still runs: this beat leaves the store to it
                        continue
                    # a caller's tick replicates what is there now: the running copy may have
                    # listed the refs before the caller's last write, so it ends first, then a new one
                    with contextlib.suppress(Exception):  # its errors are in replication_errors
                        running.result()
                pending = self._beat_pool.submit(self._beat_replicate, p.store_id, path, p.replicas)
                self._beat_sends[p.store_id] = pending
                started_sends.append(pending)
        self.fail_over(local)
        try:  # the cluster's webhook endpoints in this node's copy (docs/cluster.md#webhooks)
            webhook_state.sync_endpoints(self)
        except Exception as exc:  # noqa: BLE001 - webhooks must not stop the beat; the next one retries
            self.replication_errors.append(f"webhooks: {type(exc).__name__}: {exc}")
        return started_sends

    def _beat_replicate(self, store_id: str, path: Path, replicas: tuple[str, ...]) -> list[int]:
        try:
            return self.replicate(store_id, path, replicas, exact=False)
        except Exception as exc:  # noqa: BLE001 - the beat's copy fails alone; the next beat retries
            self.replication_errors.append(f"{store_id}: beat replication: {type(exc).__name__}: {exc}")
            raise

    def sync_placements(self) -> dict[str, Path]:
        """Place every store of this workspace that the cluster does not know yet, homed here;
        the local stores by id (their repositories)."""
        from gitmem.store import all_refs, handle_path

        placed = {p.store_id for p in self.state.placements()}
        local: dict[str, Path] = {}
        for ref in all_refs(self.home, strict=False):
            local[ref.id] = handle_path(ref.handle, self.home)
            self._names[ref.id] = ref.settings.name
            if ref.id in placed:
                continue
            with contextlib.suppress(ConflictError):  # another node placed it meanwhile
                self.state.place(ref.id, home=self.name, replicas=self.replicas, name=ref.settings.name)
        with self._cache_lock:
            self._cache.clear()
            self._local = dict(local)
        return local

    # ------------------------------------------------------------------ replication and failover
    def replicate(
        self, store_id: str, path: Path, replicas: tuple[str, ...], *, exact: bool = True
    ) -> list[int]:
        """Bring every healthy replica level with this home's copy; for each replica level now,
        the replication number it holds. One replication of a store at a time: each sends the
        state as it is when it starts, so a later one never carries older refs than an earlier one.
        ``exact=False`` (the beat): the refs listed last are reused while the store's ref
        generation and state files are unchanged (:class:`~gitmem.cluster.listing.RefListings`)."""
        from gitmem.cluster import replication

        with self._store_lock(store_id):
            self._sync_dreams(store_id, path)  # the store's dream records into its copy, first
            urls = {n.name: n.url for n in self.state.nodes() if n.healthy}
            generation = ref_generation(path)  # read before the state and the refs (RefListings)
            state = replication.state_of(path)
            refs = self.listings.refs(store_id, path, generation, state, exact)
            digest = hashlib.sha256(replication.envelope(refs, state)).hexdigest()  # what, not when
            level: list[int] = []
            todo: list[str] = []
            for replica in replicas:  # (the count behind is kept for /metrics, below)
                sent = self._sent.get((store_id, replica))
                if sent is not None and sent[0] == digest:
                    level.append(sent[1])
                elif replica in urls:
                    todo.append(replica)
            # each replica on its own worker: one that hangs holds up no other's copy (or proof)
            sends = [
                (r, self._workers.submit(self._send, store_id, urls[r], refs, state, path)) for r in todo
            ]
            for replica, pending in sends:
                try:
                    seq = pending.result()
                except (GitmemError, OSError) as exc:
                    self.replication_errors.append(f"{store_id} -> {replica}: {exc}")
                    continue
                self._sent[(store_id, replica)] = (digest, seq)
                level.append(seq)
            self._behind[store_id] = len(replicas) - len(level)
            return level

    def _sync_dreams(self, store_id: str, path: Path) -> None:
        """The dream records of a store homed here, into its copy (adopting the copy's first):
        cluster/dream_copies.py. A failure is kept and the replication goes on without them."""
        from gitmem.cluster import dream_copies

        try:
            dream_copies.sync_home(self.home, store_id, path)
        except (OSError, GitmemError) as exc:
            self.replication_errors.append(f"{store_id}: dream records: {type(exc).__name__}: {exc}")

    def _forget_sent(self, store_id: str) -> None:
        with self._store_lock(store_id):
            for key in [k for k in self._sent if k[0] == store_id]:
                del self._sent[key]
            self.listings.forget(store_id)
            self._behind.pop(store_id, None)

    def _store_lock(self, store_id: str) -> threading.Lock:
        with self._cache_lock:
            return self._locks.setdefault(store_id, threading.Lock())

    def replicate_now(self, store: str) -> bool:
        """After a write to ``store`` here (sync mode): True once at least one replica holds it
        (its replication number recorded as the store's ack point first, so that no staler
        replica is ever promoted), or when the store is not homed here (nothing of ours)."""
        try:
            placement = self.state.resolve(store)
        except NotFoundError:
            return True
        if placement.home != self.name:
            return True
        path = self._local.get(placement.store_id)  # from the last listing: no workspace scan per write
        if path is None or not path.is_dir():
            path = self.sync_placements().get(placement.store_id)
        if path is None:
            return False
        if not placement.replicas:
            return True
        level = self.replicate(placement.store_id, path, placement.replicas)
        if not level:
            return False
        handoff.record_acked(self.state, placement.store_id, min(level))
        from gitmem import webhook_local

        try:  # a store-level webhook entry the write made is shared before it is acknowledged
            if webhook_local.configured(self.home):
                webhook_state.sync_endpoints(self)
        except Exception as exc:  # noqa: BLE001 - as at a beat: the next beat shares it
            self.replication_errors.append(f"webhooks: {type(exc).__name__}: {exc}")
        return True

    def _signed(self, client: Any, method: str, url: str, path: str, body: bytes = b"") -> Any:
        from gitmem.cluster import replication

        header = replication.sign(self._secret, self.name, method, path, hashlib.sha256(body).hexdigest())
        reply = client.request(method, url + path, content=body or None, headers={SIGNATURE: header})
        reply.raise_for_status()
        return reply

    def _send(
        self, store_id: str, url: str, refs: dict[str, str], state: dict[str, str | None], path: Path
    ) -> int:
        import httpx2 as httpx

        from gitmem.cluster import replication
        from gitmem.errors import UnavailableError

        where = f"/cluster/v1/stores/{store_id}"
        with httpx.Client(timeout=httpx.Timeout(120.0, connect=5.0)) as client:
            try:
                have = self._signed(client, "GET", url, where + "/refs").json()["refs"]
                bundle = replication.make_bundle(path, have) or b""
                seq = self.state.next_seq()
                body = replication.frame(replication.envelope(refs, state, seq), bundle)
                self._signed(client, "POST", url, where + "/replicate", body)
            except httpx.HTTPError as exc:
                raise UnavailableError(f"replica {url}: {exc}") from None
        return seq

    def begin_write(self, store: str) -> bool:
        """A write naming ``store`` starts here; False (refused) while the store is handed over."""
        with self._cache_lock:
            if store in self._handing:
                return False
            known = (
                store
                if store in self._local
                else next((i for i, n in self._names.items() if n == store), None)
            )
            if known is not None and known not in self.epochs:  # a copy here without the lease:
                return False  # handed over, or not yet taken (a client's retry finds the home)
            self._writes[store] = self._writes.get(store, 0) + 1
            return True

    def begin_write_after_beat(self, store: str) -> bool:
        """:meth:`begin_write`, after one beat here unless the store is being handed over: a store
        placed here since the last beat (``sync_placements`` places it, the beat takes its lease)
        is not refused a write for the lease a beat would take now (a git push is not retried)."""
        with self._cache_lock:
            if store in self._handing:
                return False
        try:
            self.tick()
        except Exception as exc:  # noqa: BLE001 - as in the heartbeat loop: the write is refused
            self.replication_errors.append(f"beat: {type(exc).__name__}: {exc}")
            return False
        return self.begin_write(store)

    def end_write(self, store: str) -> None:
        with self._cache_lock:
            self._writes[store] -= 1
            if not self._writes[store]:
                del self._writes[store]

    def hand_off(self, p: Placement, path: Path, epoch: int) -> bool:
        """Hand the store to ``p.moving_to``: take no new write, wait for those in flight, send the
        last state, then make the target the home with the lease at the next epoch (one
        transaction). True when the fence must stay shut (handed over, or the database was lost
        mid-way: the move may have committed); False (the move withdrawn, the error kept, the
        store writable again) when a step failed for certain."""
        target = p.moving_to
        assert target is not None
        keys = {p.store_id, self._names.get(p.store_id, p.store_id)}
        with self._cache_lock:
            self._handing |= keys
        try:
            shut_fence(path, self.name)  # nothing publishes here from now on
            deadline = time.monotonic() + self.lease_seconds / 2
            while any(self._writes.get(k) for k in keys):
                if time.monotonic() >= deadline:
                    raise ConflictError("writes in flight did not finish")
                time.sleep(0.01)
            level = self.replicate(p.store_id, path, (target,))
            if not level:
                raise ConflictError(f"{target} could not be brought level")
            new_epoch = handoff.finish_move(
                self.state, p.store_id, self.name, epoch, target, self.lease_seconds, level[0]
            )
        except UnavailableError as exc:
            # the database went away mid-handoff: the move may have committed without our hearing
            # it, so the fence stays shut until a beat learns who holds the lease
            self.replication_errors.append(f"{p.store_id}: move to {target} interrupted: {exc}")
            return True
        except GitmemError as exc:
            self.replication_errors.append(f"{p.store_id}: move to {target} withdrawn: {exc}")
            with contextlib.suppress(GitmemError):
                handoff.cancel_move(self.state, p.store_id)
            return False
        finally:
            with self._cache_lock:
                self._handing -= keys
                self._cache.clear()
        self.epochs.pop(p.store_id, None)
        self.moves.append((p.store_id, target, new_epoch))
        self._wake(target)
        return True

    def _wake(self, node: str) -> None:
        """Ask ``node`` to beat now (it takes a store's lease it was handed); best effort."""
        import httpx2 as httpx

        try:
            url = next(n.url for n in self.state.nodes() if n.name == node)
            with httpx.Client(timeout=httpx.Timeout(30.0, connect=5.0)) as client:
                self._signed(client, "POST", url, "/cluster/v1/beat")
        except (StopIteration, httpx.HTTPError, GitmemError) as exc:
            self.replication_errors.append(f"waking {node}: {exc}")

    def fail_over(self, local: dict[str, Path]) -> None:
        """Take over the stores whose home is down, where this node holds the copy to promote (the
        newest, never one without every acknowledged write: cluster/handoff.py): move the placement
        here and take the lease (possible only once the old home's ran out)."""
        since = self._connected_since
        if since is None or time.monotonic() - since < (self.healthy_seconds or 0.0):
            # A node that was itself out of touch with the database (just started, or the
            # database was down) cannot tell a dead home from one whose beats were refused like
            # its own: after an outage every node looks silent. It waits one health window of
            # its own beats first, within which a live home has beaten again.
            return
        healthy = {n.name for n in self.state.nodes() if n.healthy}
        for p in self.state.placements():
            if p.home in healthy or p.home == self.name or self.name not in p.replicas:
                continue
            if p.store_id not in local:
                continue
            live = [r for r in p.replicas if r in healthy]
            if handoff.promotable(self.state, p.store_id, live) != self.name:
                continue
            started = time.monotonic()
            try:
                lease = self.state.acquire(p.store_id, self.name, self.lease_seconds)
            except ConflictError:  # the old home's lease has not run out yet
                continue
            self.state.move(p.store_id, self.name)
            self.epochs[p.store_id] = lease.epoch
            write_fence(local[p.store_id], node=self.name, epoch=lease.epoch, renewed_at=started,
                        lease_seconds=self.lease_seconds)  # fmt: skip
            with self._store_lock(p.store_id):  # the old home's dream records, listed here now
                self._sync_dreams(p.store_id, local[p.store_id])
            self.failovers.append((p.store_id, lease.epoch))

    def figures(self) -> dict[str, Any]:
        """This node's cluster figures (/healthz, /metrics); the database's when it answers."""
        out: dict[str, Any] = {
            "node": self.name,
            "replication": "sync" if self.sync else "async",
            "leases_held": len(self.epochs),
            "replicas_behind": sum(v for k, v in self._behind.items() if k in self.epochs),
            "forwarded": self.forwarded,
            "refs_listed": self.listings.listed,
            "refs_skipped": self.listings.skipped,
            "failovers": len(self.failovers),
            "moves": len(self.moves),
            "replication_errors": len(self.replication_errors),
            "lost_writes_found_here": len(self.lost),
        }
        try:
            out.update(handoff.counts(self.state, self.name))
            out["database"] = "up"
        except GitmemError:
            out["database"] = "down"
        return out

    # ------------------------------------------------------------------ routing
    def home_of(self, store: str) -> tuple[str, str] | None:
        """(node, url) of the store's home, or None when it is not placed (served here)."""
        now = time.monotonic()
        with self._cache_lock:
            hit = self._cache.get(store)
            if hit is not None and now - hit[0] < HOME_CACHE_SECONDS:
                return hit[1]
        try:
            found: tuple[str, str] | None = self.state.home_url(store)
        except NotFoundError:
            found = None
        with self._cache_lock:
            self._cache[store] = (now, found)
        return found
