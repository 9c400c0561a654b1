"""With the witness worker's committing listener registered (docs/transparency.md#checkpoints), an
append signs its checkpoint and pays no commit; the witness round's cosignatures join it in memory,
also without a commit; one fold (:func:`checkpoints.flush`) commits the newest checkpoint with every
cosignature gathered, a failed round leaves the checkpoint to the fold, a newer append supersedes
an unfolded one, a stopped worker commits what is left, and after a crash (memory lost) the
checkpoint is signed again to the same note and the witness cosigns it again. Every checkpoint
still verifies and extends the ledger, and a receipt completed from memory verifies offline."""

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
from tests.helpers import wait_until


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


def _ref_note(store: Store) -> note.Note:
    return note.parse(checkpoints._files(store.core, checkpoints._tip(store.core))["checkpoint"])


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


def test_a_failed_round_and_a_second_append_leave_one_fold(
    store: Store, tmp_path: Path, deferring: None
) -> None:
    core = store.core
    w = Witness(tmp_path / "dead", "witness.test/dead")
    policy = _policy(store, w.vkey, "http://127.0.0.1:9")  # nothing listens on port 9
    before = _ref_size(store)
    ledger.append(core, "flag", {"n": 0})
    first = ledger.append(core, "flag", {"n": 1})  # supersedes the first one's, no commit
    assert _ref_size(store) == before
    assert transparency.newest(core).cp.size == first.seq + 1
    result = witnessing.cosign_round(core, policy, timeout=2.0)
    assert result["d1"].startswith("unreachable")
    assert checkpoints.pending_paths() == [core.path]
    commits = len(checkpoints.history(core))
    assert checkpoints.flush(core)
    assert not checkpoints.pending_paths()
    assert _ref_size(store) == first.seq + 1
    assert len(checkpoints.history(core)) == commits  # one commit, for the newest checkpoint
    assert transparency.check(core) == []


def test_cosignatures_wait_in_memory_and_one_fold_commits_them(
    store: Store, witness_url: tuple[str, str], deferring: None
) -> None:
    from gitmem.audit import redaction_receipts

    core = store.core
    policy = _policy(store, *witness_url)
    old = store.write("/a.md", "the password is hunter2", actor="user:alice")
    store.write("/a.md", "rotated", actor="user:alice")
    before = _ref_size(store)
    tip = checkpoints._tip(core)
    red = store.redact(old.id, reason="leaked", actor="user:admin")
    assert witnessing.cosign_round(core, policy) == {"d1": "cosigned"}
    assert checkpoints._tip(core) == tip  # neither the checkpoint nor its cosignature was committed
    rc = redaction_receipts.receipt(core, red.id, policy)
    assert rc.status == "complete"  # from the cosignature the receipt carries, checked offline
    assert redaction_receipts.verify_receipt(rc.text, policy).witnesses == ["d1"]
    assert checkpoints.flush(core)
    files = checkpoints._files(core, checkpoints._tip(core))
    assert _ref_size(store) > before
    assert len(note.parse(files["checkpoint"]).sigs) == 2  # log and witness, one commit
    assert redaction_receipts.receipt(core, red.id, policy).status == "complete"
    assert transparency.check(core) == []


def test_after_a_crash_the_checkpoint_is_signed_again_and_cosigned_again(
    store: Store, witness_url: tuple[str, str], deferring: None
) -> None:
    core = store.core
    policy = _policy(store, *witness_url)
    assert witnessing.round_and_commit(core, policy) == {"d1": "cosigned"}
    entry = ledger.append(core, "flag", {"n": 0})
    assert witnessing.cosign_round(core, policy) == {"d1": "cosigned"}
    signed = note.parse(checkpoints.current(core)["checkpoint"])
    for memo in (checkpoints._pending, checkpoints._ranges, checkpoints._signed_here):
        memo.clear()  # the process died before the fold: its memory is gone, the ledger is not
    assert _ref_size(store) == entry.seq
    assert witnessing.resign(core)
    assert not witnessing.resign(core)  # nothing lags any more
    again = note.parse(checkpoints.current(core)["checkpoint"])
    assert again.text == signed.text and again.sigs[0] == signed.sigs[0]  # the same note
    assert witnessing.pending(core, policy) == ["d1"]
    assert witnessing.round_and_commit(core, policy) == {"d1": "cosigned"}  # 409, then again
    assert _ref_size(store) == entry.seq + 1
    assert len(note.parse(checkpoints.current(core)["checkpoint"]).sigs) == 2
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


def test_the_worker_folds_at_most_once_an_interval_and_on_stop(
    store: Store, witness_url: tuple[str, str]
) -> None:
    core = store.core
    policy = _policy(store, *witness_url)
    worker = witnessing.Worker(
        _open_core, lambda: [core.path], lambda: policy, interval=0.05, fold_interval=3600
    )
    worker.start()
    try:
        wait_until(
            lambda: len(_ref_note(store).sigs) == 2, "the first round, folded at once (no fold before)"
        )
        tip = checkpoints._tip(core)
        entry = ledger.append(core, "flag", {"n": 0})
        wait_until(
            lambda: len(note.parse(checkpoints.current(core)["checkpoint"]).sigs) == 2, "a cosignature"
        )
        assert checkpoints._tip(core) == tip  # the interval has not passed: nothing committed
        assert core.path in worker._due
    finally:
        worker.stop()
    assert not checkpoints.pending_paths()
    assert _ref_size(store) == entry.seq + 1
    assert len(note.parse(checkpoints.current(core)["checkpoint"]).sigs) == 2
    assert transparency.check(core) == []


def test_a_starting_worker_signs_again_what_a_crash_left_unsigned(
    store: Store, witness_url: tuple[str, str], deferring: None
) -> None:
    core = store.core
    entry = ledger.append(core, "flag", {"n": 0})
    checkpoints._pending.clear()  # the process died before the fold
    assert _ref_size(store) == entry.seq
    checkpoints.remove_listener(_committer)
    policy = _policy(store, *witness_url)
    worker = witnessing.Worker(
        _open_core, lambda: [core.path], lambda: policy, interval=0.05, fold_interval=0
    )
    worker.start()
    try:
        wait_until(lambda: _ref_size(store) == entry.seq + 1, "the re-signed checkpoint")
        wait_until(lambda: len(_ref_note(store).sigs) == 2, "its cosignature, folded")
    finally:
        worker.stop()
    assert transparency.check(core) == []
