"""With the witness worker's committing listener registered (docs/transparency.md#asking-witnesses),
an append signs its checkpoint and leaves the commit to the witness round: the round stores the
checkpoint and the first cosignature in one commit, a failed round still commits the checkpoint,
two appends before a round commit both checkpoints, and a stopped worker commits what is left.
Every checkpoint still verifies and extends the ledger."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitmem.audit import transparency, witnessing
from gitmem.audit.witness import Witness
from gitmem.engine import checkpoints, ledger
from gitmem.engine.core import StoreCore
from gitmem.model.tlog import note
from gitmem.model.tlog import policy as policy_mod
from gitmem.server.witness_http import make_server
from gitmem.store import Store, open_store


def _committer(path: Path) -> None:
    return None


@pytest.fixture
def deferring() -> Iterator[None]:
    checkpoints.add_listener(_committer, commits=True)
    yield
    checkpoints.remove_listener(_committer)
    checkpoints._pending.clear()


@pytest.fixture
def witness_url(store: Store, tmp_path: Path) -> Iterator[tuple[str, str]]:
    w = Witness(tmp_path / "w", "witness.test/d1")
    w.add_log(transparency.log_vkey(store.core))
    server = make_server(w)
    t = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    t.start()
    yield w.vkey, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _policy(store: Store, vkey: str, url: str) -> policy_mod.Policy:
    log = transparency.log_vkey(store.core)
    return policy_mod.parse(f"log {log}\nwitness d1 {vkey} {url}\nquorum d1\n")


def _ref_size(store: Store) -> int:
    files = checkpoints._files(store.core, checkpoints._tip(store.core))  # the ref alone, no overlay
    return transparency.parse_body(note.parse(files["checkpoint"]).text).size


def test_the_round_commits_the_checkpoint_with_its_cosignature_in_one_commit(
    store: Store, witness_url: tuple[str, str], deferring: None
) -> None:
    core = store.core
    ledger.append(core, "flag", {"n": 0})  # signs and defers
    policy = _policy(store, *witness_url)
    assert witnessing.round_and_commit(core, policy) == {"d1": "cosigned"}
    before = len(checkpoints.history(core))
    entry = ledger.append(core, "flag", {"n": 1})
    assert checkpoints.pending_paths() == [core.path]
    assert _ref_size(store) == entry.seq  # the ref still holds the previous checkpoint
    assert transparency.newest(core).cp.size == entry.seq + 1  # this process sees the new one
    assert witnessing.round_and_commit(core, policy) == {"d1": "cosigned"}
    assert not checkpoints.pending_paths()
    assert _ref_size(store) == entry.seq + 1
    assert len(checkpoints.history(core)) == before + 1  # one commit: checkpoint and cosignature
    newest = note.parse(checkpoints.current(core)["checkpoint"])
    assert len(newest.sigs) == 2
    assert transparency.check(core) == []


def test_a_failed_round_and_a_second_append_still_commit_every_checkpoint(
    store: Store, tmp_path: Path, deferring: None
) -> None:
    core = store.core
    w = Witness(tmp_path / "dead", "witness.test/dead")
    policy = _policy(store, w.vkey, "http://127.0.0.1:9")  # nothing listens on port 9
    ledger.append(core, "flag", {"n": 0})
    first = ledger.append(core, "flag", {"n": 1})  # the first append's checkpoint is committed now
    assert _ref_size(store) == first.seq
    result = witnessing.round_and_commit(core, policy, timeout=2.0)
    assert result["d1"].startswith("unreachable")
    assert not checkpoints.pending_paths()
    assert _ref_size(store) == first.seq + 1
    sizes = [transparency.parse_body(note.parse(n).text).size for n in checkpoints.history(core)]
    assert sizes == list(range(1, first.seq + 2))  # one checkpoint per append, none skipped
    assert transparency.check(core) == []


@contextlib.contextmanager
def _open_core(path: Path) -> Iterator[StoreCore]:
    with open_store(path) as s:
        yield s.core


def test_a_stopped_worker_commits_what_no_round_did(store: Store, tmp_path: Path) -> None:
    core = store.core
    worker = witnessing.Worker(_open_core, lambda: [], lambda: None, interval=60.0)
    worker.start()
    try:
        checkpoints.remove_listener(worker.notify)  # no round runs: only stop() commits
        checkpoints.add_listener(_committer, commits=True)
        entry = ledger.append(core, "flag", {"n": 0})
        assert checkpoints.pending_paths() == [core.path]
        checkpoints.remove_listener(_committer)
    finally:
        worker.stop()
    assert not checkpoints.pending_paths()
    assert _ref_size(store) == entry.seq + 1
    assert transparency.check(core) == []


def test_without_a_committing_listener_the_append_commits(store: Store) -> None:
    entry = ledger.append(store.core, "flag", {"n": 0})
    assert not checkpoints.pending_paths()
    assert _ref_size(store) == entry.seq + 1


def test_remember_commits_a_pending_checkpoint_before_remembering_it(store: Store, deferring: None) -> None:
    core = store.core
    entry = ledger.append(core, "flag", {"n": 0})
    assert checkpoints.pending_paths() == [core.path]
    transparency.remember(core)
    assert not checkpoints.pending_paths()
    assert _ref_size(store) == entry.seq + 1
    seen = transparency._load_seen(core)["checkpoints"]
    assert transparency.parse_body(note.parse(seen[-1]).text).size == entry.seq + 1
