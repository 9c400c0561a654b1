"""The beat's ref listings, reused while a store's ref generation says nothing moved
(docs/cluster.md#replication-and-failover).

Each heartbeat checks every store homed here against its replicas, which takes the store's refs.
Listing them is a ``git for-each-ref`` per store; :class:`RefListings` keeps the last listing keyed
by the store's ref generation (:mod:`gitmem.git.refgen`, read *before* the state files and the
listing) and by its state files, and a beat reuses it while both are unchanged and it is younger
than ``recheck_seconds``. Safe: every counted ref move (the library's CAS, a push's post-receive)
bumps the generation after the ref moved, so a move the last listing may lack has changed the key.
Moves the library does not count (a proposal opened, a checkpoint, an operator's own git) are
listed within ``recheck_seconds``; a ledger append rewrites ``ledger_head``, a state file of the
key, after its ref moved. Acknowledgements (sync, a handoff, a redaction's purge) always list
(``exact``).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path


class RefListings:
    def __init__(self, recheck_seconds: float = 30.0) -> None:
        self.recheck_seconds = recheck_seconds
        self.listed = 0  # checks that ran git for-each-ref
        self.skipped = 0  # beats that reused a listing
        self._lock = threading.Lock()
        # store -> (ref generation, state digest, refs, when listed)
        self._last: dict[str, tuple[str, str, dict[str, str], float]] = {}

    def refs(
        self, store_id: str, path: Path, generation: str | None, state: dict[str, str | None], exact: bool
    ) -> dict[str, str]:
        """The store's refs: listed by git, or for a beat (not ``exact``) the last listing when
        its key still holds (module docstring). ``generation`` (None: unknown) and ``state`` were
        read before this call."""
        from gitmem.cluster import replication

        digest = hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()
        now = time.monotonic()
        with self._lock:
            last = self._last.get(store_id)
            if (
                not exact and generation is not None and last is not None
                and last[:2] == (generation, digest) and now - last[3] < self.recheck_seconds
            ):  # fmt: skip
                self.skipped += 1
                return dict(last[2])
        refs = replication.refs_of(path)
        with self._lock:
            self.listed += 1
            if generation is not None:
                self._last[store_id] = (generation, digest, dict(refs), now)
            else:
                self._last.pop(store_id, None)
        return refs

    def forget(self, store_id: str) -> None:
        with self._lock:
            self._last.pop(store_id, None)
