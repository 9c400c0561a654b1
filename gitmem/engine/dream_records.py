"""Where dream records are kept, and their reading and writing (docs/dreams.md).

A dream's record is one JSON file, ``<home>/dreams/<drm_id>.json``, replaced whole and atomically
(temporary file, fsync, rename), changed under ``<home>/dreams/dreams.lock``. Its store's home
copies the records of each store it homes into that store's repository,
``$GIT_DIR/gitmem/dreams/`` (:data:`COPY_DIR`, gitmem/cluster/dream_copies.py), which replication
carries to the replicas.

The faces (the dreamer, the Dreams API, the console, the cluster) keep what a record means
(gitmem/server/dream_jobs.py); this library module owns the files, so that the audit layer can
reach every copy of a record: a redaction, or the erasure of a proposal, scrubs what they quote
(gitmem.audit.record_scrub), and the purge proof reads them (gitmem.audit.purge_proof). What of a
record a caller may see is decided here too, once for every face (:func:`seen_by`): a dream's
changes that wait for review are its proposal's, and read only as the proposal is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitmem.git.locks import file_lock
from gitmem.git.repoinit import write_atomic
from gitmem.model.caller import Caller

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore

DIR = "dreams"  # in the workspace: <home>/dreams/
COPY_DIR = "gitmem/dreams"  # in a store's repository: $GIT_DIR/gitmem/dreams/
LOCK_FILE = "dreams.lock"
Record = dict[str, Any]


@contextmanager
def lock(directory: Path) -> Iterator[None]:
    """The records' lock (one writer at a time, across processes)."""
    with file_lock(Path(directory) / LOCK_FILE):
        yield


def read_record(path: Path) -> Record:
    """The record at ``path``; FileNotFoundError, or ValueError when it is not a JSON object."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds no record")
    return data


def write_record(path: Path, data: Record) -> None:
    """Replace the record at ``path`` (0600, durably; its directory made when missing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, sort_keys=True).encode())


def record_files(directory: Path) -> dict[str, Path]:
    """The dream records in ``directory`` (``drm_*.json``): file name -> path."""
    try:
        return {
            e.name: Path(e.path)
            for e in os.scandir(directory)
            if e.name.startswith("drm_") and e.name.endswith(".json")
        }
    except OSError:
        return {}


def home_of(git_dir: Path) -> Path | None:
    """The workspace of a store at ``<home>/stores/<handle>.git`` (None: a store outside one)."""
    git_dir = Path(git_dir)
    return git_dir.parent.parent if git_dir.parent.name == "stores" else None


def of_store(data: Record, store_id: str) -> bool:
    """Whether the record is of a dream that read or wrote the store ``store_id``."""
    return store_id in (data.get("store_id"), data.get("output_id"))


def store_record_files(git_dir: Path, store_id: str | None) -> list[Path]:
    """Every record file that may quote the store at ``git_dir``: its repository's copies, and
    its workspace's records of dreams that read or wrote it (every one when ``store_id`` is None)."""
    out = list(record_files(Path(git_dir) / COPY_DIR).values())
    home = home_of(git_dir)
    if home is not None:
        for path in record_files(home / DIR).values():
            try:
                mine = store_id is None or of_store(read_record(path), store_id)
            except (OSError, ValueError):
                mine = True  # unreadable: looked at as it is
            if mine:
                out.append(path)
    return sorted(out)


def rewrite_records(git_dir: Path, store_id: str, change: Callable[[Record], bool]) -> int:
    """Apply ``change`` (True: it changed the record) to every record of the store ``store_id``:
    the workspace's and the copies in its repository, under the workspace's records lock (the one
    the dreamer and the cluster's copying take). Returns how many records were rewritten."""
    home = home_of(git_dir)
    dirs = [d for d in ([home / DIR] if home is not None else []) + [Path(git_dir) / COPY_DIR] if d.is_dir()]
    if not dirs:
        return 0
    changed = 0
    with lock(dirs[0]):  # the workspace's when it has records (made by the first write: never here)
        for directory in dirs:
            for path in record_files(directory).values():
                try:
                    data = read_record(path)
                except (OSError, ValueError):
                    continue
                if of_store(data, store_id) and change(data):
                    write_record(path, data)
                    changed += 1
    return changed


def seen_by(store: StoreCore | None, caller: Caller | None, data: Record) -> Record:
    """The record ``data`` as ``caller`` may see it (docs/dreams.md, "Who sees a dream's changes"):
    a copy without the changes and refused writes it may not see. ``store`` is the store the dream
    wrote (the input for ``update_existing``, its copy for ``create_new``), where its proposal is;
    None when it is not at hand. A change that was published is seen by a reader of that store
    (:func:`gitmem.engine.access.may_see_dream_output`). A change in the dream's proposal is seen
    by whoever may read the proposal (:func:`gitmem.engine.access.may_see_dream_review`: its
    proposer and the store's reviewers) and, once a reviewer accepted every path it touched, by a
    reader of the scope too: it is an ordinary version then. Accepted is said of the change itself
    (its version, named by the acceptance), never of its path: a change the dream made to an
    accepted path afterwards, or an earlier proposal's change to a path a later one accepted, stays
    the proposal's. Rejected, erased, or of a proposal whose record is gone, it stays the
    proposal's readers'. The refused writes of a dream whose writes went to review are the
    proposal's readers' too. The local caller (None) sees it all."""
    from gitmem.engine import access, proposals
    from gitmem.errors import GitmemError

    if caller is None:
        return data
    wrote = data.get("output_id") or data.get("store_id")
    if store is not None and store.settings.id != wrote:
        store = None  # not the store the dream wrote: its proposal is not there
    found: dict[str, proposals.Proposal | None] = {}

    def proposal(pid: Any) -> proposals.Proposal | None:
        if store is None or not isinstance(pid, str) or not pid:
            return None
        if pid not in found:
            try:
                found[pid] = proposals.get(store, pid)
            except GitmemError:  # dropped after retention.min_days, or never saved
                found[pid] = None
        return found[pid]

    pid = data.get("proposal_id")
    p = proposal(pid)
    sees_review = access.may_see_dream_review(store, caller, data, p)
    sees_output = access.may_see_dream_output(caller, data)

    def accepted(change: dict[str, Any], touched: set[Any]) -> bool:
        """Whether a reviewer accepted this very change (its version, by id, in the proposal it was
        written into; a record from before changes named theirs: the record's) and every path it
        touched. A later change to an accepted path, or one of an earlier proposal whose path a
        later one accepted, was not: an acceptance names the versions it covered. A decision
        recorded before decisions named their versions covers none (the proposal's readers')."""
        q = proposal(change.get("proposal_id") or pid)
        vid = change.get("version_id")
        if q is None or not isinstance(vid, str) or not vid or not touched:
            return False
        mine = [d for d in q.decisions if d.action == "accepted" and vid in d.versions]
        return touched <= {path for d in mine for path in d.paths}  # a path scrubbed: not shown

    def sees(change: Any) -> bool:
        if not isinstance(change, dict):
            return False
        if change.get("landed"):
            return sees_output
        if sees_review:
            return True
        return sees_output and accepted(change, {change.get("path"), change.get("previous_path")} - {None})

    changes = [c for c in data.get("changes") or [] if isinstance(c, dict)]
    reviewed = (
        bool(pid)
        or any(not c.get("landed") for c in changes)
        or (data.get("behavior") == "update_existing" and bool(data.get("review")))
    )
    refused = data.get("refused") or []
    return {
        **data,
        "changes": [c for c in changes if sees(c)],
        "refused": list(refused) if (sees_review if reviewed else sees_output) else [],
    }
