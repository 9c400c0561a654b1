"""Dream jobs as files: what a dream asked for, where it is, what it changed (docs/dreams.md).

Every dream is one JSON record, ``<workspace>/dreams/<drm_id>.json``, written whole and atomically
(temporary file, fsync, rename), so a server restart finds every job as it last was. Changes of a
record are read-modify-write under ``dreams/dreams.lock`` (one writer at a time, across processes:
the server and ``gitmem dream``). The files are the library's (``gitmem.store``'s
``read_dream_record``, ``write_dream_record``, ``dream_records_lock``), so that a redaction
scrubs them (docs/redaction.md). Three more files per dream:

- ``<id>.run``: the lock its worker holds while it runs. A ``running`` dream whose lock nobody
  holds has lost its worker (a crash, a SIGKILL): :meth:`DreamJobs.recover` ends it ``failed``;
- ``<id>.cancel``: a cancel request, which the worker looks for between two steps;
- pipelines (memory pipelines, a store's schedule): ``dreams/pipelines/<store>.json``.

This module knows nothing of models or stores; :mod:`gitmem.server.dreamer` runs the jobs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitmem import config
from gitmem.errors import ConflictError, IntegrityError, InvalidInputError, NotFoundError
from gitmem.ids import is_id, new_id
from gitmem.store import dream_records_lock, file_lock, read_dream_record, write_dream_record, write_file

STATUSES = ("pending", "running", "completed", "failed", "canceled")
FINAL = ("completed", "failed", "canceled")
DIR = "dreams"
ACTOR = "service:dreamer"  # the actor of every version a dream writes
Json = dict[str, Any]


def _usage() -> dict[str, int]:
    return {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


@dataclass
class Dream:
    """One dream. ``store``/``store_id``: the input store; ``output`` the store written (the input
    for ``update_existing``, the copy for ``create_new``, None until the copy exists)."""

    id: str
    store: str
    store_id: str
    sessions: list[str]
    model: str
    speed: str | None
    instructions: str | None
    behavior: str  # create_new | update_existing
    scope: str = "main"
    review: bool = True  # update_existing: the changes land as a proposal (gitmem's extension)
    status: str = "pending"
    created_at: str = ""
    created_ts: float = 0.0
    ended_at: str | None = None
    archived_at: str | None = None
    error: dict[str, str] | None = None
    output: str | None = None
    output_id: str | None = None
    session_id: str | None = None
    actor: str = ""  # the dream's own actor: every version it writes carries it
    requested_by: str = ""  # the actor of the token (or the CLI) that asked for it
    trigger: str = "api"  # api | cli | schedule
    usage: dict[str, int] = field(default_factory=_usage)
    changes: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    proposal_id: str | None = None
    turns: int = 0
    worker_stopped: bool = False  # its worker has let go (or never started): fully stopped

    def fail_stopped(self, cause: str) -> None:
        """End this running dream ``failed`` because its worker is gone (``cause``), saying where
        what it wrote before is kept: a server restart, or a failover that moved its store."""
        self.status = "failed"
        self.ended_at = config.now_rfc3339()
        self.worker_stopped = True
        where = (
            f"proposal {self.proposal_id}, not applied"
            if self.proposal_id
            else (f"memory store {self.output}" if self.output else "nowhere")
        )
        if self.behavior == "create_new" and not self.output:
            where += f" (a copy it had begun, if any, is the store described as 'dream {self.id} of {self.store_id}')"
        self.error = {
            "type": "internal_error",
            "message": f"{cause}; what it wrote before is kept in {where}",
        }

    def to_dict(self) -> Json:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Json) -> Dream:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @property
    def final(self) -> bool:
        return self.status in FINAL


@dataclass
class Pipeline:
    """A store's memory pipeline: dreams over the sessions since the last run, on demand or every
    ``every_seconds`` (0: manual only)."""

    store: str
    model: str
    instructions: str | None = None
    behavior: str = "update_existing"
    review: bool = True
    scope: str = "main"
    every_seconds: int = 0
    last_run_at: str | None = None  # the created_at of the versions the last run covered up to
    last_dream: str | None = None
    edge: list[str] = field(default_factory=list)  # versions at last_run_at it covered (times are seconds)
    set_by: str | None = None  # who set it: its scheduled runs are asked in that actor's name

    def to_dict(self) -> Json:
        return dataclasses.asdict(self)


def _write_json(path: Path, data: Json) -> None:
    write_file(path, json.dumps(data, sort_keys=True).encode())


class DreamJobs:
    """The dream records of one workspace."""

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self.dir = Path(home) / DIR  # made by the first write: serving a workspace adds nothing to it

    # ------------------------------------------------------------------ records
    def _path(self, dream_id: str) -> Path:
        if not is_id(dream_id, "drm"):
            raise InvalidInputError(f"invalid dream id {dream_id!r}: expected drm_...")
        return self.dir / f"{dream_id}.json"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with dream_records_lock(self.dir):
            yield

    def get(self, dream_id: str) -> Dream:
        try:
            return Dream.from_dict(read_dream_record(self._path(dream_id)))
        except FileNotFoundError:
            raise NotFoundError(f"dream {dream_id} does not exist") from None
        except (ValueError, TypeError):
            raise IntegrityError(
                f"the record of dream {dream_id} is corrupt (dreams/{dream_id}.json)"
            ) from None

    def all(self) -> list[Dream]:
        """Every dream, newest first."""
        out = []
        for f in self.dir.glob("drm_*.json") if self.dir.is_dir() else []:
            try:
                out.append(Dream.from_dict(read_dream_record(f)))
            except (OSError, ValueError, TypeError):
                continue
        return sorted(out, key=lambda d: (d.created_ts, d.id), reverse=True)

    def create(self, dream: Dream) -> Dream:
        """Record a new pending dream; 409 while another ``update_existing`` dream on the same
        store has not fully stopped (checked and recorded under the lock: two at once, one wins)."""
        with self.locked():
            if dream.behavior == "update_existing":
                for other in self.all():
                    if (
                        other.behavior == "update_existing"
                        and other.store_id == dream.store_id
                        and not self.stopped(other)
                    ):
                        raise ConflictError(
                            f"dream {other.id} ({other.status}) is still writing memory store "
                            f"{dream.store_id}: one update_existing dream per store at a time"
                        )
            dream.id = dream.id or new_id("drm")
            now = dt.datetime.now(dt.UTC)
            dream.created_at = now.isoformat(timespec="microseconds").replace("+00:00", "Z")
            dream.created_ts = now.timestamp()
            write_dream_record(self._path(dream.id), dream.to_dict())
        return dream

    def update(self, dream_id: str, change: Callable[[Dream], None]) -> Dream:
        """Read, change and save one record under the lock."""
        with self.locked():
            dream = self.get(dream_id)
            change(dream)
            write_dream_record(self._path(dream_id), dream.to_dict())
            return dream

    def stopped(self, dream: Dream) -> bool:
        """Whether ``dream`` has fully stopped: final, and no worker holds it any more."""
        if dream.status == "pending":
            return False
        if dream.status == "running":
            return False
        return dream.worker_stopped or not self.held(dream.id)

    # ------------------------------------------------------------------ cancel and archive
    def cancel(self, dream_id: str) -> Dream:
        """Cancel: a pending dream never starts, a running one stops at its next step (its writes
        so far are kept); a canceled one comes back unchanged; a completed or failed one: 400."""

        def change(d: Dream) -> None:
            if d.status in ("completed", "failed"):
                raise InvalidInputError(
                    f"dream {d.id} is {d.status}: only a pending or running dream can be canceled"
                )
            if d.status == "canceled":
                return
            if d.status == "pending":
                d.worker_stopped = True
            d.status = "canceled"
            d.ended_at = config.now_rfc3339()
            (self.dir / f"{d.id}.cancel").touch()

        return self.update(dream_id, change)

    def cancel_requested(self, dream_id: str) -> bool:
        return (self.dir / f"{dream_id}.cancel").exists()

    def archive(self, dream_id: str) -> Dream:
        def change(d: Dream) -> None:
            if not d.final:
                raise InvalidInputError(f"dream {d.id} is {d.status}: cancel it before archiving it")
            if d.archived_at is None:
                d.archived_at = config.now_rfc3339()

        return self.update(dream_id, change)

    # ------------------------------------------------------------------ the worker's lock
    @contextlib.contextmanager
    def running(self, dream_id: str) -> Iterator[bool]:
        """Hold the dream's run lock for the block; yields False when another worker has it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / f"{dream_id}.run", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def held(self, dream_id: str) -> bool:
        """Whether a worker (in any process) holds the dream's run lock now."""
        path = self.dir / f"{dream_id}.run"
        if not path.exists():
            return False
        fd = os.open(path, os.O_RDWR)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            return False
        finally:
            os.close(fd)

    def recover(self) -> tuple[list[str], list[str]]:
        """After a restart: ``running`` dreams whose worker is gone end ``failed`` (what they wrote
        stays where it was: in the proposal, or the output store), and ``pending`` ones are
        returned to be started again. Returns (failed ids, pending ids)."""
        failed, pending = [], []
        for d in self.all():
            if d.status == "running" and not self.held(d.id):

                def change(x: Dream) -> None:
                    if x.status == "running":
                        x.fail_stopped("the worker running this dream stopped (a server restart)")

                self.update(d.id, change)
                failed.append(d.id)
            elif d.status == "pending":
                pending.append(d.id)
        return failed, list(reversed(pending))  # oldest first

    # ------------------------------------------------------------------ pipelines
    def _pipeline_path(self, store: str) -> Path:
        from gitmem.model.paths import is_store_handle

        if not is_store_handle(store):  # a handle (the store's id), never a path
            raise InvalidInputError(f"invalid store handle {store!r}: a memory store id")
        return self.dir / "pipelines" / f"{store}.json"

    def pipeline(self, store: str) -> Pipeline | None:
        try:
            data = json.loads(self._pipeline_path(store).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        return Pipeline(
            **{k: v for k, v in data.items() if k in {f.name for f in dataclasses.fields(Pipeline)}}
        )

    def save_pipeline(self, p: Pipeline) -> None:
        with self.locked():
            _write_json(self._pipeline_path(p.store), p.to_dict())

    def pipelines(self) -> list[Pipeline]:
        out = []
        where = self.dir / "pipelines"
        for f in sorted(where.glob("*.json")) if where.is_dir() else []:
            p = self.pipeline(f.stem)
            if p is not None:
                out.append(p)
        return out

    @contextlib.contextmanager
    def pipeline_run(self) -> Iterator[None]:
        """Held while a pipeline run picks its sessions and records itself: two servers (or a
        server and ``gitmem dream run``) never start the same run twice."""
        with file_lock(self.dir / "pipelines.lock"):
            yield

    def delete_pipeline(self, store: str) -> None:
        with self.locked():
            self._pipeline_path(store).unlink(missing_ok=True)
