"""Administration verbs of :class:`gitmem.Store`: the audit timeline, verify, compaction, export and
import, reindex and repack, the transparency log and its witnesses, read replicas.

Each spells its parameters out and calls one function of ``gitmem.audit``, ``gitmem.engine`` or
``gitmem.push``; a ``caller`` (docs/access.md) is checked there where the operation has a right.
"""

from __future__ import annotations

import builtins
import datetime as dt
import os
from collections.abc import Callable, Iterable
from typing import IO, TYPE_CHECKING, Any

from gitmem.model.tlog.policy import Policy

if TYPE_CHECKING:
    from gitmem.audit.redaction_receipts import Verified as VerifiedReceipt
    from gitmem.audit.retention import PruneResult
    from gitmem.audit.timeline import AuditEvent
    from gitmem.audit.transparency import Signed as TlogCheckpoint
    from gitmem.audit.verify import VerifyReport
    from gitmem.engine.core import StoreCore
    from gitmem.engine.transfer import ExportResult, ImportResult
    from gitmem.push.replica import Replica, ReplicaPush

Progress = Callable[[int, int], None]


class Admin:
    """Administration verbs (mixed into :class:`gitmem.Store`)."""

    _core: StoreCore

    # ------------------------------------------------------------------ audit, verify, compaction
    def audit(
        self,
        *,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        actor: str | None = None,
        session: str | None = None,
        type: str | None = None,
        scope: str | None = None,
        flagged: bool = False,
    ) -> builtins.list[AuditEvent]:
        """Versions and ledger events on one timeline, oldest first, filtered (``gitmem audit``)."""
        from gitmem.audit.timeline import audit

        return audit(
            self._core,
            since=since,
            until=until,
            actor=actor,
            session=session,
            type=type,
            scope=scope,
            flagged=flagged,
        )

    def verify(self, *, raise_on_failure: bool = True) -> VerifyReport:
        """Every integrity check (fsck, ledger, purges, trailers, index); IntegrityError naming the
        failures unless ``raise_on_failure`` is off. A rewrite killed half-way is finished first."""
        from gitmem.audit.verify import verify

        return verify(self._core, raise_on_failure=raise_on_failure)

    def last_verify(self) -> tuple[str, VerifyReport] | None:
        """When :meth:`verify` last ran and what it found (None: never, or unreadable)."""
        from gitmem.audit.verify import last_report

        return last_report(self._core)

    def prune(self, *, actor: str | None = None, dry_run: bool = False) -> PruneResult:
        """Compact versions past ``retention.max_days`` with the redaction guarantees."""
        from gitmem.audit.retention import prune

        return prune(self._core, actor=actor, dry_run=dry_run)

    # ------------------------------------------------------------------ export, import, maintenance
    def export_bundle(self, dest: str | os.PathLike[str]) -> ExportResult:
        """A git bundle of every ref (scopes and ``refs/gitmem/*``), clonable with ``git clone``."""
        from gitmem.engine.transfer import export_bundle

        return export_bundle(self._core, dest)

    def export_jsonl(
        self,
        out: IO[bytes] | IO[str],
        scopes: Iterable[str] | None = None,
        *,
        progress: Progress | None = None,
        at: str | None = None,
    ) -> ExportResult:
        """One JSON object per memory (every scope by default) to ``out``; ``at``: as then."""
        from gitmem.engine.transfer import export_jsonl

        return export_jsonl(self._core, out, scopes, progress, at=at)

    def import_jsonl(
        self,
        src: IO[bytes] | IO[str],
        scope: str | None = None,
        *,
        prefix: str = "/",
        actor: str | None = None,
        session: str | None = None,
        progress: Progress | None = None,
    ) -> ImportResult:
        """Memories from JSONL (as :meth:`export_jsonl` writes it), one batch per scope."""
        from gitmem.engine.transfer import import_jsonl

        return import_jsonl(
            self._core, src, scope, prefix=prefix, actor=actor, session=session, progress=progress
        )

    def import_tree(
        self,
        directory: str | os.PathLike[str],
        scope: str = "main",
        *,
        prefix: str = "/",
        actor: str | None = None,
        session: str | None = None,
        progress: Progress | None = None,
        exclude: Iterable[str] = (),
        include_hidden: bool = False,
    ) -> ImportResult:
        """Seed a scope from a directory of UTF-8 text files (gitignore-style ``exclude``)."""
        from gitmem.engine.transfer import import_tree

        return import_tree(
            self._core,
            directory,
            scope,
            prefix,
            actor=actor,
            session=session,
            progress=progress,
            exclude=exclude,
            include_hidden=include_hidden,
        )

    def reindex(self) -> int:
        """Rebuild the derived index (versions, heads, search) from git; the versions indexed."""
        return self._core.index.rebuild()

    def repack(self) -> bool:
        """Pack loose objects and keep packs geometric now; whether anything was repacked."""
        return self._core.maintain(force=True)

    # ------------------------------------------------------------------ transparency log
    def tlog_policy(self) -> Policy | None:
        """The workspace's witnesses policy (``<home>/witnesses.policy``; None: none)."""
        from gitmem.audit.redaction_receipts import workspace_policy

        return workspace_policy(self._core)

    def receipt(self, redaction_id: str, policy: Policy | None = None) -> dict[str, Any]:
        """A redaction's tlog-proof receipt against ``policy`` (default: the workspace's)."""
        from gitmem.audit import redaction_receipts as rr

        chosen = policy if policy is not None else rr.workspace_policy(self._core)
        return rr.receipt(self._core, redaction_id, chosen).to_dict()

    def tlog_newest(self) -> TlogCheckpoint:
        """The log's newest signed checkpoint, with the cosignatures it has."""
        from gitmem.audit.transparency import newest

        return newest(self._core)

    def tlog_vkey(self) -> str:
        """The log's verifier key."""
        from gitmem.audit.transparency import log_vkey

        return log_vkey(self._core)

    def rotate_log_key(self) -> str:
        """A new log key (checkpoints signed from now on with it); its verifier key."""
        from gitmem.audit.transparency import rotate_key

        return rotate_key(self._core)

    def cosign(self, policy: Policy, *, timeout: float = 10.0) -> dict[str, str]:
        """Ask ``policy``'s witnesses now to cosign the newest checkpoint: name -> outcome."""
        from gitmem.audit.witnessing import cosign_round

        return cosign_round(self._core, policy, timeout)

    # ------------------------------------------------------------------ read replicas
    def replicas(self) -> builtins.list[Replica]:
        """The store's read replicas (docs/git-servers.md)."""
        from gitmem.push.replica import replicas

        return replicas(self._core.path)

    def add_replica(self, url: str, name: str = "replica") -> Replica:
        """Add a read replica, kept current by ``git push --mirror`` after every change."""
        from gitmem.push.replica import add_replica

        return add_replica(self._core, url, name)

    def push_replicas(self, names: builtins.list[str] | None = None) -> builtins.list[ReplicaPush]:
        """Push to the replicas (``names``, default all) now."""
        from gitmem.push.replica import push_replicas

        return push_replicas(self._core.path, names)

    def last_replica_pushes(self) -> dict[str, ReplicaPush]:
        """The last push to each replica, by name."""
        from gitmem.push.replica import last_pushes

        return last_pushes(self._core.path)


def load_tlog_policy(path: str | os.PathLike[str]) -> Policy:
    """A tlog-policy file (the log's key, the witnesses and their quorum; docs/transparency.md)."""
    from pathlib import Path

    from gitmem.audit.redaction_receipts import load_policy

    return load_policy(Path(path))


def verify_receipt(text: str | bytes, policy: Policy) -> VerifiedReceipt:
    """Verify a redaction receipt offline against ``policy``: the log's signature, the witness
    quorum and the inclusion proof (IntegrityError when one fails)."""
    from gitmem.audit.redaction_receipts import verify_receipt as verify

    return verify(text, policy)
