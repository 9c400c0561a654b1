"""The witness worker's kept store handles (docs/transparency.md, "Asking witnesses") must not keep
what a handle opened for each round used to let go: the pack files a redaction's purge deleted
(the redacted bytes stay on disk while a descriptor holds them), and the work an open does (finishing a history rewrite killed half-way, recording a
hand edit of gitmem.yaml). Real stores, a real witness over HTTP on 127.0.0.1, the worker as
``gitmem serve`` starts it (in a process of its own where its descriptors are looked at)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import gitmem
from gitmem.audit import transparency
from gitmem.audit.witness import Witness
from gitmem.engine import checkpoints, ledger
from gitmem.engine.opening import open_core
from gitmem.model.tlog import note
from gitmem.server.witness_http import make_server
from tests.helpers import git, wait_until

SECRET = "worker-stale-secret-5531"

WORKER = """
import sys, time
from gitmem.store import start_witness_worker
worker = start_witness_worker(sys.argv[1], interval=0.05)
print("started", flush=True)
sys.stdin.read()  # until the test closes it
worker.stop()
"""

KILLED_REDACTION = """
import sys, gitmem
from gitmem.audit.redact import redact
store = gitmem.open_store(sys.argv[1])
redact(store.core, sys.argv[2], reason="crash test", actor="user:admin")
"""


@pytest.fixture
def witnessed(workspace: Path, tmp_path: Path) -> Iterator[tuple[gitmem.Store, str]]:
    """A store with a secret version, its log witnessed by a real witness the workspace's policy names."""
    store = gitmem.create_store("stale", home=workspace)
    store.write("/a.md", "one\n")
    v = store.write("/a.md", f"{SECRET}\n")
    assert v is not None
    store.write("/a.md", "three\n")
    ledger.append(store.core, "flag", {"n": 0})  # a checkpoint for the witness
    w = Witness(tmp_path / "w", "witness.test/s1")
    w.add_log(transparency.log_vkey(store.core))
    server = make_server(w)
    t = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    t.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    log = transparency.log_vkey(store.core)
    (workspace / "witnesses.policy").write_text(f"log {log}\nwitness s1 {w.vkey} {url}\nquorum s1\n")
    yield store, v.id
    store.close()
    server.shutdown()
    server.server_close()


def _cosigned_at(path: Path, size: int) -> bool:
    with gitmem.open_store(str(path)) as s:  # another handle: reads the ref as any process would
        files = checkpoints._files(s.core, checkpoints._tip(s.core))
    signed = note.parse(files["checkpoint"])
    return transparency.parse_body(signed.text).size >= size and len(signed.sigs) == 2


def _ledger_size(path: Path) -> int:
    with gitmem.open_store(str(path)) as s:
        return len(ledger.entries(s.core))


def _deleted_packs(pid: int, store: Path) -> list[str]:
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith(str(store)) and target.endswith(".pack (deleted)"):
            out.append(target)
    return out


@pytest.fixture
def worker_process(witnessed: tuple[gitmem.Store, str], workspace: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(workspace)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
    yield proc
    assert proc.stdin is not None
    proc.stdin.close()
    try:
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()


def _packed(path: Path) -> None:
    git(path, "repack", "-a", "-d", "-q")  # every object, the secret too, in one pack


def test_a_redaction_leaves_no_deleted_pack_open_in_the_worker(
    witnessed: tuple[gitmem.Store, str], worker_process: subprocess.Popen[str]
) -> None:
    """Broken by the kept handles: the worker read the checkpoint commits from the store's one
    pack, the redaction's purge replaced that pack with one without the secret and deleted it, and
    the worker's handle kept the deleted pack open for as long as the store stayed in the scan:
    the redacted bytes stayed on disk (readable through /proc/<pid>/fd) until gitmem serve stopped."""
    store, vid = witnessed
    path = store.path
    _packed(path)
    wait_until(lambda: _cosigned_at(path, _ledger_size(path)), "the worker cosigned from the packed store")
    store.redact(vid, reason="stale handle test", actor="user:admin")
    assert SECRET not in git(path, "log", "-p", "--all").stdout
    wait_until(lambda: _cosigned_at(path, _ledger_size(path)), "the redaction's checkpoint cosigned")
    wait_until(
        lambda: _deleted_packs(worker_process.pid, path) == [],
        "the worker still holds a pack the redaction deleted (the redacted bytes stay on disk)",
    )


def _rounds(worker: gitmem.store.WitnessWorker, path: Path, n: int) -> None:
    """Wait for ``n`` more rounds of the worker over the store (each leaves a new result dict)."""
    seen = [worker.last.get(path)]

    def more() -> bool:
        now = worker.last.get(path)
        if now is not seen[-1]:
            seen.append(now)
        return len(seen) > n

    wait_until(more, f"{n} rounds of the worker over {path}")


def test_a_redaction_killed_half_way_is_finished_by_the_worker_scan(
    witnessed: tuple[gitmem.Store, str], workspace: Path
) -> None:
    """Broken by the kept handles: a handle opened for each round ran the open's recovery, so a
    redaction killed after its branch swap was finished (ledger entry, purge) by the next scan of
    gitmem serve; with the handle kept, the journal stayed, the secret stayed readable by plain git
    and the redaction had no ledger entry (and so no receipt) until something else opened the store."""
    store, vid = witnessed
    path = store.path
    worker = gitmem.store.start_witness_worker(workspace, interval=0.05)
    assert worker is not None
    try:
        wait_until(lambda: _cosigned_at(path, _ledger_size(path)), "the first round")
        env = dict(os.environ, GITMEM_FAULT="ref")  # killed right after the branch swap
        res = subprocess.run(
            [sys.executable, "-c", KILLED_REDACTION, str(path), vid],
            env=env,
            capture_output=True,
            check=False,
        )
        assert res.returncode == -signal.SIGKILL, (
            res.stderr
        )  # its journal left (the worker may be at it already)
        _rounds(worker, path, 3)
        assert not (path / "gitmem" / "journal.json").exists(), "the interrupted redaction was left as it was"
        with open_core(str(path)) as core:  # an open that recovers nothing itself
            assert len(ledger.entries(core, kind="redaction")) == 1
        assert SECRET not in git(path, "log", "-p", "--all").stdout
    finally:
        worker.stop()


def test_a_hand_edit_of_the_settings_is_recorded_by_the_worker_scan(
    witnessed: tuple[gitmem.Store, str], workspace: Path
) -> None:
    """Broken by the kept handles: the open records a hand edit of gitmem.yaml in the ledger
    (docs/identity.md), and a handle opened for each round did so at the next scan."""
    store, _vid = witnessed
    path = store.path
    worker = gitmem.store.start_witness_worker(workspace, interval=0.05)
    assert worker is not None
    try:
        wait_until(lambda: _cosigned_at(path, _ledger_size(path)), "the first round")
        yaml = store.core.settings_path
        text = yaml.read_text(encoding="utf-8")
        assert "description: ''" in text
        yaml.write_text(text.replace("description: ''", "description: hand edited", 1), encoding="utf-8")
        _rounds(worker, path, 3)
        with open_core(str(path)) as core:  # an open that records nothing itself
            changes = ledger.entries(core, kind="settings_changed")
        assert [c.data.get("source") for c in changes] == ["hand edit of gitmem.yaml"]
    finally:
        worker.stop()
