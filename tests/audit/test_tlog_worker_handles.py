"""The witness worker keeps each store's handle open from round to round (docs/transparency.md,
"Asking witnesses"): opening one cost more CPU than a round and its fold together. A handle is
closed when the store leaves the scan, when an error was raised with it, and when the worker stops;
what the rounds did is the same as with a handle opened for each."""

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


@pytest.fixture
def policy(store: Store, tmp_path: Path) -> Iterator[policy_mod.Policy]:
    w = Witness(tmp_path / "w", "witness.test/h1")
    w.add_log(transparency.log_vkey(store.core))
    server = make_server(w)
    t = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    t.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    yield policy_mod.parse(f"log {transparency.log_vkey(store.core)}\nwitness h1 {w.vkey} {url}\nquorum h1\n")
    server.shutdown()
    server.server_close()


class Counting:
    """An open_core that opens real handles and counts the opens and closes."""

    def __init__(self) -> None:
        self.opened: list[Path] = []
        self.closed: list[Path] = []

    @contextlib.contextmanager
    def __call__(self, path: Path) -> Iterator[StoreCore]:
        self.opened.append(path)
        try:
            with open_store(path) as s:
                yield s.core
        finally:
            self.closed.append(path)


def _folded(store: Store, size: int) -> bool:
    files = checkpoints._files(store.core, checkpoints._tip(store.core))  # the ref alone
    signed = note.parse(files["checkpoint"])
    return transparency.parse_body(signed.text).size == size and len(signed.sigs) == 2


def test_one_handle_serves_every_round_and_is_closed_on_stop(store: Store, policy: policy_mod.Policy) -> None:
    core = store.core
    opens = Counting()
    worker = witnessing.Worker(opens, lambda: [core.path], lambda: policy, interval=0.05, fold_interval=0)
    worker.start()
    try:
        for n in range(4):
            entry = ledger.append(core, "flag", {"n": n})
            wait_until(lambda e=entry: _folded(store, e.seq + 1), f"append {n} cosigned and folded")
        assert opens.opened == [core.path]  # four rounds and folds, one open
        assert opens.closed == []
    finally:
        worker.stop()
    assert sorted(opens.closed) == sorted(opens.opened)  # nothing left open
    assert transparency.check(core) == []


def test_a_store_that_leaves_the_scan_is_closed(store: Store, policy: policy_mod.Policy) -> None:
    core = store.core
    opens = Counting()
    listed = [core.path]
    worker = witnessing.Worker(opens, lambda: list(listed), lambda: policy, interval=0.05, fold_interval=0)
    worker.start()
    try:
        wait_until(lambda: _folded(store, len(ledger.entries(core))), "the first round")
        assert opens.opened == [core.path]
        listed.clear()
        wait_until(lambda: opens.closed == [core.path], "the handle closed once the store left the scan")
    finally:
        worker.stop()
    assert opens.opened == [core.path]


def test_an_error_drops_the_handle_and_the_next_round_opens_a_new_one(
    store: Store, policy: policy_mod.Policy, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = store.core
    opens = Counting()
    real = witnessing.cosign_round
    failures = [RuntimeError("the round broke")]

    def round_once_broken(c: StoreCore, p: policy_mod.Policy, timeout: float = 10.0) -> dict[str, str]:
        if failures:
            raise failures.pop()
        return real(c, p, timeout)

    monkeypatch.setattr(witnessing, "cosign_round", round_once_broken)
    worker = witnessing.Worker(
        opens, lambda: [core.path], lambda: policy, interval=0.05, fold_interval=0, max_backoff=0.05
    )
    worker.start()
    try:
        entry = ledger.append(core, "flag", {"n": 0})
        wait_until(lambda: _folded(store, entry.seq + 1), "cosigned after the broken round")
        assert worker.last[core.path] == {"h1": "cosigned"}
        assert opens.opened == [core.path, core.path]  # the broken round's handle was not reused
        assert opens.closed == [core.path]
    finally:
        worker.stop()
    assert sorted(opens.closed) == sorted(opens.opened)
