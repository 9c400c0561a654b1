"""Dream records travel with their store (docs/cluster.md#dreams-across-a-failover).

A dream's record is a file of its node's workspace (``<home>/dreams/<drm_id>.json``, and a store's
memory pipeline ``dreams/pipelines/<store>.json``: gitmem/server/dream_jobs.py), kept by the node
that ran it, its input store's home. So that a promoted replica (or a move's target) still has
them, the home copies the records of each store it homes into that store's repository,
``$GIT_DIR/gitmem/dreams/`` (:data:`DIR`: one file per dream, the pipeline as ``pipeline.json``),
before each replication, which carries that directory whole as it carries the proposals'
(``replication.STATE_DIRS``). A replica's copy holds them there, outside its workspace: its node
does not list them (the home does).

- :func:`sync_home` (the home, before each replication and at a failover): the records the copy
  holds that the workspace lacks are *adopted* first (a node that just became the store's home
  takes over the records of the old one: a ``running`` dream ends ``failed``, as after a restart,
  since its worker was on the old home; a ``pending`` one is started here), then the workspace's
  records of the store are written into the copy (a file the workspace no longer has removed).
- :func:`release` (a replica, after each replication into its copy): the records of the store its
  workspace still holds (an old home's) that the copy now holds, the new home's, are removed from
  the workspace (those no worker holds), so each dream is listed by one node, its store's home.
  An old home's records of dreams made after its last replication (the async tail) stay, listed
  by it.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from gitmem.errors import GitmemError

DIR = "gitmem/dreams"
PIPELINE = "pipeline.json"
_store_of: dict[str, tuple[int, int, str]] = {}  # record path -> (mtime_ns, size, input store id)


def _input_store(path: Path) -> str | None:
    """The input store of the dream record at ``path`` (cached by the file's mtime and size)."""
    try:
        st = path.stat()
        hit = _store_of.get(str(path))
        if hit is not None and hit[:2] == (st.st_mtime_ns, st.st_size):
            return hit[2]
        store = str(json.loads(path.read_bytes()).get("store_id", ""))
    except (OSError, ValueError, AttributeError):
        return None
    _store_of[str(path)] = (st.st_mtime_ns, st.st_size, store)
    return store


def _records(directory: Path) -> dict[str, Path]:
    try:
        return {
            e.name: Path(e.path)
            for e in os.scandir(directory)
            if e.name.startswith("drm_") and e.name.endswith(".json")
        }
    except OSError:
        return {}


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def sync_home(home: Path, store_id: str, copy: Path) -> list[str]:
    """On the store's home: adopt the copy's records the workspace lacks, then copy the
    workspace's records of the store into the copy (module docstring); the ids adopted."""
    from gitmem.server.dream_jobs import DIR as JOBS_DIR
    from gitmem.server.dream_jobs import DreamJobs
    from gitmem.store import write_file

    jobs = DreamJobs(home)
    kept = copy / DIR
    workspace = home / JOBS_DIR
    pipeline = workspace / "pipelines" / f"{store_id}.json"
    adopted: list[str] = []
    theirs = _records(kept)
    missing = [n for n in theirs if not (workspace / n).exists()]
    if missing or ((kept / PIPELINE).is_file() and not pipeline.exists()):
        with jobs.locked():
            for name in missing:
                data = _adopted(theirs[name], store_id)
                if data is not None and not (workspace / name).exists():
                    write_file(workspace / name, data)
                    adopted.append(name.removesuffix(".json"))
            if not pipeline.exists() and (data := _read(kept / PIPELINE)) is not None:
                write_file(pipeline, data)
        _start(home, jobs, adopted)
    mine = {n: p for n, p in _records(workspace).items() if _input_store(p) == store_id}
    for name, path in mine.items():
        data = _read(path)
        if data is not None and _read(kept / name) != data:
            write_file(kept / name, data)
    for name, path in theirs.items():
        if name not in mine:
            path.unlink(missing_ok=True)
    data = _read(pipeline)
    if data is None:
        (kept / PIPELINE).unlink(missing_ok=True)
    elif _read(kept / PIPELINE) != data:
        write_file(kept / PIPELINE, data)
    return adopted


def _adopted(path: Path, store_id: str) -> bytes | None:
    """The record at ``path`` as the new home keeps it (None: unreadable, or another store's)."""
    from gitmem.server.dream_jobs import Dream

    try:
        dream = Dream.from_dict(json.loads(path.read_bytes()))
    except (OSError, ValueError, TypeError):
        return None
    if dream.store_id != store_id:
        return None
    if dream.status == "running":  # its worker was on the old home
        dream.fail_stopped(
            "the node running this dream lost its memory store (a failover or a move) before it ended"
        )
    return json.dumps(dream.to_dict(), sort_keys=True).encode()


def _start(home: Path, jobs: object, adopted: list[str]) -> None:
    """Start the adopted pending dreams on this node's dream runner (when one runs here)."""
    from gitmem.server.dreamer import runner_for

    runner = runner_for(home)
    if runner is None:
        return
    for dream_id in adopted:
        with contextlib.suppress(GitmemError):
            if runner.jobs.get(dream_id).status == "pending":
                runner.submit(dream_id)


def release(home: Path, store_id: str, copy: Path) -> list[str]:
    """On a replica: remove the workspace's records of the store that the copy holds (the new
    home's), unless a worker holds them; the ids removed (module docstring)."""
    from gitmem.server.dream_jobs import DIR as JOBS_DIR
    from gitmem.server.dream_jobs import DreamJobs

    workspace = home / JOBS_DIR
    if not workspace.is_dir():
        return []
    theirs = _records(copy / DIR)
    mine = [n for n, p in _records(workspace).items() if n in theirs and _input_store(p) == store_id]
    pipeline = workspace / "pipelines" / f"{store_id}.json"
    if not mine and not (pipeline.exists() and (copy / DIR / PIPELINE).is_file()):
        return []
    jobs = DreamJobs(home)
    removed: list[str] = []
    with jobs.locked():
        for name in mine:
            dream_id = name.removesuffix(".json")
            if jobs.held(dream_id):
                continue  # its worker still runs (a deposed home's): a later replication retries
            for leftover in (name, f"{dream_id}.cancel", f"{dream_id}.run"):
                (workspace / leftover).unlink(missing_ok=True)
            removed.append(dream_id)
        if (copy / DIR / PIPELINE).is_file():
            pipeline.unlink(missing_ok=True)  # the store's schedule runs at its home
    return removed
