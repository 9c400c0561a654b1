"""Probe: a proposal's erasure scrubs the dream records that quote the erased proposal as its last
step (record_scrub.scrub_erasure), after the purge and after the proposal was saved as erased. An
erase killed in between (SIGKILL, a power cut) is finished only by another ``review erase`` of that
proposal, which nothing asks for: the proposal reads as erased, the objects are gone so ``gitmem
verify`` passes (docs/review.md says it reports an unfinished erase), and the dream record keeps
quoting what was erased. A redaction's scrub was made a step its recovery runs (the journal); an
erasure's was not."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import gitmem
from gitmem.audit.verify import verify
from gitmem.engine import dream_records
from gitmem.model.caller import Caller

SECRET = "erase-crash-secret-6620"
DREAM = "drm_01J00000000000000000000000"

ERASE = """
import os, signal, sys, gitmem
from gitmem.audit import record_scrub
if sys.argv[3] == "kill":
    def killed(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)  # a crash right before the records' scrub
    record_scrub.scrub_erasure = killed
s = gitmem.open_store(sys.argv[1])
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


@pytest.mark.xfail(
    strict=True,
    reason="an erase killed after its purge and save, before its records' scrub, is not finished by "
    "the next open nor reported by verify: the dream record keeps quoting the erased proposal",
)
def test_an_erase_killed_before_its_scrub_is_finished_or_reported(workspace: Path) -> None:
    path, pid, record = _setup(workspace)
    assert _erase(path, pid, "kill") == -signal.SIGKILL
    with gitmem.open_store(str(path)) as store:
        assert store.proposal(pid).erased  # it reads as erased
    ok, scrubbed = _settled(path, record)
    assert scrubbed or not ok  # finished on open, or at least reported by verify
    assert os.path.exists(record)
