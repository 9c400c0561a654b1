"""A proposal's erasure scrubs the dream records that quote the erased proposal as its last step
(record_scrub.scrub_erasure), after the purge and after the proposal was saved as erased. An erase
killed in between (SIGKILL, a power cut) used to be finished only by another ``review erase`` of
that proposal, which nothing asks for: the proposal read as erased, ``gitmem verify`` passed and the
dream record kept quoting what was erased. Its pending-erase record (erasing.json) now drives the
scrub to completion: the next open of the store runs it (and so does ``verify``); an erase killed
before the proposal's save is reported by ``verify`` until ``review erase`` runs again."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import gitmem
from gitmem.audit import erase_recovery
from gitmem.audit.verify import verify
from gitmem.engine import dream_records
from gitmem.engine.opening import open_core
from gitmem.model.caller import Caller

SECRET = "erase-crash-secret-6620"
DREAM = "drm_01J00000000000000000000000"

ERASE = """
import os, signal, sys, gitmem
from gitmem.audit import record_scrub
from gitmem.engine import proposals
def killed(*a, **k):
    os.kill(os.getpid(), signal.SIGKILL)
s = gitmem.open_store(sys.argv[1])
if sys.argv[3] == "kill":
    record_scrub.scrub_erasure = killed  # a crash right before the records' scrub
if sys.argv[3] == "kill-before-save":
    proposals.save = killed  # a crash after the purge, before the proposal is saved as erased
s.erase_proposal(sys.argv[2], reviewer="user:lead", reason="leaked")
"""


def _setup(workspace: Path) -> tuple[Path, str, Path]:
    with gitmem.create_store("erasecrash", home=workspace) as store:
        store.write("/keep.md", "kept\n", actor="user:alice")
        dreamer = Caller(
            actor="service:dreamer", session="sesn_dream1", review=True, rights=frozenset({"write"})
        )
        v = store.write("/d.md", f"{SECRET}\n", caller=dreamer)
        (p,) = [p for p in store.proposals() if p.status == "open"]
        assert v is not None
        record = store.path / dream_records.COPY_DIR / f"{DREAM}.json"
        dream_records.write_record(
            record,
            {
                "id": DREAM,
                "store_id": store.settings.id,
                "proposal_id": p.id,
                "changes": [{"version_id": v.id, "path": "/d.md", "reasoning": f"wrote {SECRET}"}],
            },
        )
        return store.path, p.id, record


def _erase(path: Path, pid: str, how: str) -> int:
    res = subprocess.run([sys.executable, "-c", ERASE, str(path), pid, how], capture_output=True, check=False)
    return res.returncode


def _settled(path: Path, record: Path) -> tuple[bool, bool]:
    """(verify reports nothing, the dream record no longer quotes the erased text)."""
    with gitmem.open_store(str(path)) as store:
        ok = verify(store.core, raise_on_failure=False).ok
    return ok, SECRET not in record.read_text()


def test_control_an_erase_that_ran_through_scrubs_the_dream_record(workspace: Path) -> None:
    path, pid, record = _setup(workspace)
    assert _erase(path, pid, "run") == 0
    assert _settled(path, record) == (True, True)
    assert json.loads(record.read_text())["changes"][0]["path"] is None


def test_an_erase_killed_before_its_scrub_is_finished_or_reported(workspace: Path) -> None:
    path, pid, record = _setup(workspace)
    assert _erase(path, pid, "kill") == -signal.SIGKILL
    with gitmem.open_store(str(path)) as store:
        assert store.proposal(pid).erased  # it reads as erased
    ok, scrubbed = _settled(path, record)
    assert scrubbed or not ok  # finished on open, or at least reported by verify
    assert os.path.exists(record)


def test_the_next_open_finishes_the_scrub_and_removes_the_pending_record(workspace: Path) -> None:
    path, pid, record = _setup(workspace)
    assert _erase(path, pid, "kill") == -signal.SIGKILL
    pending = path / "gitmem" / erase_recovery.ERASE_FILE
    assert stat.S_IMODE(pending.stat().st_mode) == 0o600
    carried = json.loads(pending.read_text())
    assert carried["proposal"] == pid and carried["versions"] and SECRET in record.read_text()
    with gitmem.open_store(str(path)):
        pass
    assert not pending.exists() and SECRET not in record.read_text()
    change = json.loads(record.read_text())["changes"][0]
    assert change["path"] is None and change["reasoning"] == f"[redacted: {carried['id']}]"
    assert _settled(path, record) == (True, True)


def test_verify_finishes_the_scrub_of_a_store_opened_without_recovery(workspace: Path) -> None:
    path, pid, record = _setup(workspace)
    assert _erase(path, pid, "kill") == -signal.SIGKILL
    core = open_core(str(path))  # no journal or erase recovery on this open
    try:
        assert SECRET in record.read_text()
        report = verify(core, raise_on_failure=False)
    finally:
        core.close()
    assert report.ok and SECRET not in record.read_text()
    assert not (path / "gitmem" / erase_recovery.ERASE_FILE).exists()


def test_an_erase_killed_before_the_proposals_save_is_reported_until_erased_again(
    workspace: Path,
) -> None:
    path, pid, record = _setup(workspace)
    assert _erase(path, pid, "kill-before-save") == -signal.SIGKILL
    with gitmem.open_store(str(path)) as store:
        assert not store.proposal(pid).erased
        report = verify(store.core, raise_on_failure=False)
    [erasures] = [c for c in report.checks if c.name == "erasures"]
    assert not erasures.ok and pid in erasures.detail
    assert (path / "gitmem" / erase_recovery.ERASE_FILE).exists()
    assert _erase(path, pid, "run") == 0  # the next erase of it finishes it, scrub included
    assert _settled(path, record) == (True, True)
    assert not (path / "gitmem" / erase_recovery.ERASE_FILE).exists()
