"""What the server's house-keeping faces need of the library: the review routing a dream reads
(:class:`HouseOps`, mixed into :class:`gitmem.Store`), what of a dream record a caller may see,
the background witness loop of ``gitmem serve``, the tlog-witness's wire values, and the file lock
and durable replace faces keep their own records with (module functions, exported from
:mod:`gitmem.store`).

Each delegates to one verb of the engine or the audit layer; nothing here decides anything.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitmem.errors import GitmemError
from gitmem.model.caller import Caller

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from gitmem.audit.witnessing import Worker as WitnessWorker
    from gitmem.engine.core import StoreCore
    from gitmem.engine.proposals import Proposal
    from gitmem.model.tlog.policy import Policy


class HouseOps:
    """Review routing (mixed into :class:`gitmem.Store`; docs/review.md)."""

    _core: StoreCore

    def review_owner(
        self, scope: str, actor: str | None, session: str | None, *, review: bool = False
    ) -> str | None:
        """Whose proposal a write by ``actor`` (in ``session``) to ``scope`` goes to, or None when
        it is published as usual: ``review`` is the caller's mode (gitmem.model.caller), else the
        store's ``acl.review`` decides. Reads the store's settings only, no memory."""
        from gitmem.engine import proposals

        return proposals.route(self._core, scope, actor, session, review)

    def open_proposal(self, scope: str, owner: str, *, caller: Caller | None = None) -> Proposal | None:
        """The open proposal of ``owner`` in ``scope`` (None: there is none, or ``caller`` may not
        read it, gitmem.engine.access.may_see_proposal: the same answer, no existence oracle)."""
        from gitmem.engine import access, proposals

        if caller is not None and not caller.may_read(self._core.settings.id, scope):
            return None
        p = proposals.open_proposal(self._core, scope, owner)
        return p if p is not None and access.may_see_proposal(self._core, caller, p) else None


def start_witness_worker(home: str | Path, interval: float = 2.0) -> WitnessWorker | None:
    """The background witness loop of ``gitmem serve``, started, when ``<home>/witnesses.policy``
    exists (None: it does not). It is woken by each append of this process and scans every store
    of ``home`` each ``interval`` seconds (appends by pushes and other processes; retries)."""
    from gitmem.audit.journal import open_checked
    from gitmem.audit.redaction_receipts import POLICY_FILE, load_policy
    from gitmem.audit.witnessing import Worker

    home = Path(home)
    path = home / POLICY_FILE
    if not path.is_file():
        return None

    def open_core(store_path: Path) -> contextlib.closing[StoreCore]:
        return contextlib.closing(open_checked(store_path))  # as gitmem.store.open_store opens one

    def stores() -> list[Path]:
        return sorted(p for p in (home / "stores").glob("*.git") if p.is_dir())

    def policy() -> Policy | None:
        try:
            return load_policy(path)
        except GitmemError:
            return None

    worker = Worker(open_core, stores, policy, interval=interval)
    worker.start()
    return worker


def file_lock(path: str | Path) -> AbstractContextManager[None]:
    """An exclusive lock on the file ``path`` (created 0600, its directory too) for a ``with``
    block: what a face keeps beside the stores (dream records) is locked as the stores' own files
    are (gitmem.git.locks)."""
    from gitmem.git.locks import file_lock as lock

    return lock(Path(path))


def write_file(path: str | Path, data: bytes) -> None:
    """Replace the file ``path`` with ``data`` (0600) durably, its directory made when missing: what a
    face keeps beside the stores (dream records) is replaced as the stores' own small files are
    (temp file, fsync, rename, fsync the directory: gitmem.git.repoinit.write_atomic)."""
    from gitmem.git.repoinit import write_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)


def dream_records_lock(directory: str | Path) -> AbstractContextManager[None]:
    """The lock of the dream records in ``directory`` (gitmem.engine.dream_records)."""
    from gitmem.engine import dream_records

    return dream_records.lock(Path(directory))


def read_dream_record(path: str | Path) -> dict[str, Any]:
    """The dream record at ``path``: FileNotFoundError, or ValueError when it is no record."""
    from gitmem.engine import dream_records

    return dream_records.read_record(Path(path))


def dream_seen_by(
    record: dict[str, Any], caller: Caller | None, store: HouseOps | None = None
) -> dict[str, Any]:
    """The dream record as ``caller`` may see it: its changes waiting for review only to who may
    read its proposal (gitmem.engine.dream_records.seen_by, the one rule of every face).
    ``store``: the store the dream wrote (a :class:`gitmem.Store`), where its proposal is (None:
    not at hand)."""
    from gitmem.engine import dream_records

    return dream_records.seen_by(store._core if store is not None else None, caller, record)


def write_dream_record(path: str | Path, data: dict[str, Any]) -> None:
    """Replace the dream record at ``path`` durably (gitmem.engine.dream_records, where a
    redaction finds it)."""
    from gitmem.engine import dream_records

    dream_records.write_record(Path(path), data)
