"""The node as its HTTP pieces see it (:mod:`gitmem.cluster.endpoints`): what the endpoints and the
middleware read and call on :class:`gitmem.cluster.node.ClusterNode`, as a protocol, so that the
endpoints need not import the node that mounts them."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gitmem.cluster.handoff import LostWrite
    from gitmem.cluster.state import ClusterState


class NodeView(Protocol):
    home: Path  # the node's workspace
    name: str
    sync: bool  # ``replication: sync``: a write is acknowledged once a replica holds it
    state: ClusterState
    lost: list[LostWrite]  # the async tails found on this node's old copies
    _secret: bytes  # the cluster's signing secret
    _local: dict[str, Path]  # store id -> this node's repository of it (last listing)
    replication_errors: Any  # the last errors (a bounded deque of strings)

    def tick(self) -> None:
        """One heartbeat (leases, fences, placements, handoffs, failovers)."""

    def _store_lock(self, store_id: str) -> threading.Lock:
        """The lock serializing this node's work on its copy of ``store_id``."""

    def replicate(
        self, store_id: str, path: Path, replicas: tuple[str, ...], *, exact: bool = True
    ) -> list[int]:
        """Bring every healthy replica level with this home's copy."""

    def replicate_now(self, store: str) -> bool:
        """True once at least one replica holds the write just made to ``store`` here."""

    def begin_write(self, store: str) -> bool:
        """A write naming ``store`` starts here; False while the store is handed over."""

    def begin_write_after_beat(self, store: str) -> bool:
        """:meth:`begin_write`, after one beat here unless the store is being handed over."""

    def end_write(self, store: str) -> None:
        """A write begun by :meth:`begin_write` is answered."""

    def home_of(self, store: str) -> tuple[str, str] | None:
        """(node, url) of the store's home, or None when it is not placed."""

    def figures(self) -> dict[str, Any]:
        """This node's cluster figures (/healthz, /metrics)."""
