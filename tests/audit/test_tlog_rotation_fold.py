"""A key rotation by another process (docs/transparency.md#the-log-key-and-its-rotation) while
``gitmem serve``'s witness worker holds an uncommitted checkpoint: the rotation cross-signs the
ref's newest checkpoint, which does not hold the entry the uncommitted one covered, and the fold
drops the uncommitted one (the ref moved). The entry must not be left without a checkpoint: the
worker signs the ledger's newest again (with the new key), so the ref covers the whole ledger."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitmem.audit import transparency, witnessing
from gitmem.audit.journal import open_checked
from gitmem.audit.witness import Witness
from gitmem.engine import checkpoints, ledger
from gitmem.engine.core import StoreCore
from gitmem.model.tlog import note
from gitmem.model.tlog import policy as policy_mod
from gitmem.server.witness_http import make_server
from gitmem.store import Store
from tests.helpers import wait_until

ROTATE = """
import sys, gitmem
from gitmem.engine import checkpoints
with gitmem.open_store(sys.argv[1]) as s:
    checkpoints.rotate_key(s.core)
"""


@pytest.fixture
def policy(store: Store, tmp_path: Path) -> Iterator[policy_mod.Policy]:
    w = Witness(tmp_path / "w", "witness.test/r1")
    w.add_log(transparency.log_vkey(store.core))
    server = make_server(w)
    t = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    t.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    yield policy_mod.parse(f"log {transparency.log_vkey(store.core)}\nwitness r1 {w.vkey} {url}\nquorum r1\n")
    server.shutdown()
    server.server_close()


def _ref_size(store: Store) -> int:
    files = checkpoints._files(store.core, checkpoints._tip(store.core))  # the ref alone
    return transparency.parse_body(note.parse(files["checkpoint"]).text).size


def _open(path: Path) -> contextlib.closing[StoreCore]:
    return contextlib.closing(open_checked(path))  # as gitmem serve's worker opens one


def test_a_rotation_elsewhere_does_not_leave_the_newest_entry_without_a_checkpoint(
    store: Store, policy: policy_mod.Policy
) -> None:
    core = store.core
    worker = witnessing.Worker(_open, lambda: [core.path], lambda: policy, interval=0.05, fold_interval=3600)
    worker.start()
    stopped = False
    try:
        first = ledger.append(core, "flag", {"n": 0})
        wait_until(lambda: _ref_size(store) == first.seq + 1, "the first fold (due at once)")
        entry = ledger.append(core, "flag", {"n": 1})  # its fold is due in an hour: it waits in memory
        assert checkpoints.pending_paths() == [core.path]
        res = subprocess.run([sys.executable, "-c", ROTATE, str(core.path)], capture_output=True, check=False)
        assert res.returncode == 0, res.stderr
        assert _ref_size(store) == entry.seq  # the rotation cross-signed the ref's newest, without the entry
        worker.stop()
        stopped = True
    finally:
        if not stopped:
            worker.stop()
    assert _ref_size(store) == entry.seq + 1, "the entry's checkpoint was dropped and nothing signed it again"
    assert transparency.check(core) == []
