"""A redaction killed (SIGKILL) after its branch swap is finished by the next open
(gitmem.audit.journal.recover); the records kept beside history (docs/redaction.md "What erasure
reaches": proposal and dream records) are scrubbed by then as by a redaction that ran through: the
scrub is a step of the rewrite's finish (step 6), from what the journal carries (a pattern
redaction's regex: the journal is 0600 and removed at the end)."""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import gitmem
from gitmem.engine import dream_records, ledger
from gitmem.model.caller import Caller

SECRET = "crash-scrub-secret-77"
EMAIL = "alice.client@example.com"
PATTERN = r"alice\.client@example\.com"
DREAM = "drm_01J00000000000000000000000"
AFTER_SWAP = ["denylist", "ledger", "index", "purged", "scrubbed"]

SCRIPT = """
import sys, gitmem
from gitmem.audit.redact import redact, redact_pattern
store = gitmem.open_store(sys.argv[1])
if sys.argv[2] == "version":
    redact(store.core, sys.argv[3], reason="crash test", actor="user:admin")
else:
    redact_pattern(store.core, sys.argv[3], reason="crash test", actor="user:admin")
"""


def _dream_record(store: gitmem.Store, vid: str, text: str) -> Path:
    record = store.path / dream_records.COPY_DIR / f"{DREAM}.json"
    dream_records.write_record(
        record,
        {
            "id": DREAM,
            "store_id": store.settings.id,
            "changes": [{"version_id": vid, "path": "/a.md", "reasoning": f"wrote {text} to /a.md"}],
        },
    )
    return record


def _store_with_dream_record(workspace: Path) -> tuple[Path, str, Path]:
    with gitmem.create_store("crashscrub", home=workspace) as store:
        store.write("/a.md", "one\n")
        v = store.write("/a.md", f"{SECRET}\n")
        store.write("/a.md", "three\n")
        assert v is not None
        return store.path, v.id, _dream_record(store, v.id, SECRET)


def _store_with_proposal_record(workspace: Path) -> tuple[Path, str, Path]:
    """A rejected proposal whose decision's reason quotes the address, a version holding it, and
    a dream record quoting it: what a pattern redaction of the address scrubs."""
    with gitmem.create_store("crashscrub", home=workspace) as store:
        store.write("/keep.md", "kept\n", actor="user:alice")
        agent = Caller(actor="user:agent", session="sesn_agent1", review=True, rights=frozenset({"write"}))
        store.write("/people/client.md", "Prefers e-mail contact.\n", caller=agent)
        (p,) = [p for p in store.proposals() if p.status == "open"]
        store.reject(p.id, reviewer="user:lead", reason=f"we may not keep {EMAIL}")
        v = store.write("/a.md", f"{EMAIL}\n", actor="user:alice")
        store.write("/a.md", "gone\n", actor="user:alice")
        assert v is not None
        return store.path, p.id, _dream_record(store, v.id, EMAIL)


def _redact(path: Path, how: str, target: str, fault: str | None) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ)
    if fault is not None:
        env["GITMEM_FAULT"] = fault
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path), how, target], env=env, capture_output=True, check=False
    )


def _killed(path: Path, how: str, target: str, step: str) -> None:
    res = _redact(path, how, target, step)
    assert res.returncode == -signal.SIGKILL, res.stderr


def _recover(path: Path) -> str:
    """Open the store (which finishes the redaction); the id of its one redaction."""
    with gitmem.open_store(str(path)) as store:
        assert not (store.core.gitmem_dir / "journal.json").exists()
        (entry,) = ledger.entries(store.core, kind="redaction")  # completed, not rolled back
        return str(entry.data["id"])


def test_a_redaction_that_ran_through_scrubs_the_dream_record(workspace: Path) -> None:
    path, vid, record = _store_with_dream_record(workspace)
    res = _redact(path, "version", vid, None)
    assert res.returncode == 0, res.stderr
    change = json.loads(record.read_text())["changes"][0]
    assert SECRET not in record.read_text() and change["path"] is None


@pytest.mark.parametrize("step", AFTER_SWAP)
def test_a_redaction_killed_past_its_swap_scrubs_the_dream_record_on_recovery(
    workspace: Path, step: str
) -> None:
    path, vid, record = _store_with_dream_record(workspace)
    _killed(path, "version", vid, step)
    rid = _recover(path)
    change = json.loads(record.read_text())["changes"][0]
    assert SECRET not in record.read_text() and change["path"] is None
    # killed after its scrub ("scrubbed"), the recovery scrubs again: the same record
    assert change["reasoning"] == f"[redacted: {rid}]"


@pytest.mark.parametrize("step", ["ledger", "purged", "scrubbed"])
def test_a_pattern_redaction_killed_past_its_swap_scrubs_the_proposal_record_on_recovery(
    workspace: Path, step: str
) -> None:
    path, pid, record = _store_with_proposal_record(workspace)
    _killed(path, "pattern", PATTERN, step)
    rid = _recover(path)
    with gitmem.open_store(str(path)) as store:
        assert store.proposal(pid).decisions[0].reason == f"we may not keep [redacted: {rid}]"
    proposal_file = path / "gitmem" / "proposals" / f"{pid}.json"
    assert EMAIL not in proposal_file.read_text()
    change = json.loads(record.read_text())["changes"][0]
    assert EMAIL not in record.read_text() and change["path"] is None
    assert change["reasoning"] == f"wrote [redacted: {rid}] to /a.md"


def test_the_journal_holding_the_pattern_is_0600_and_removed(workspace: Path) -> None:
    path, _pid, _record = _store_with_proposal_record(workspace)
    _killed(path, "pattern", PATTERN, "ledger")
    journal = path / "gitmem" / "journal.json"
    assert stat.S_IMODE(journal.stat().st_mode) == 0o600
    data = json.loads(journal.read_text())
    assert (data["pattern"], data["scrub"]) == (PATTERN, True)
    _recover(path)
    assert not journal.exists()


def _as_older_journal(path: Path) -> None:
    """Rewrite the journal as a gitmem without the scrub step wrote it (no pattern, no scrub)."""
    journal = path / "gitmem" / "journal.json"
    data = json.loads(journal.read_text())
    del data["pattern"], data["scrub"]
    journal.write_text(json.dumps(data))


def test_an_older_journal_of_a_version_redaction_is_finished_and_scrubbed(workspace: Path) -> None:
    path, vid, record = _store_with_dream_record(workspace)
    _killed(path, "version", vid, "ledger")
    _as_older_journal(path)
    rid = _recover(path)
    change = json.loads(record.read_text())["changes"][0]
    assert SECRET not in record.read_text() and change["path"] is None
    assert change["reasoning"] == f"[redacted: {rid}]"


def test_an_older_journal_of_a_pattern_redaction_is_finished_by_version_only(
    workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its pattern is unknown: the dream changes naming its versions lose path and reasoning, and
    a warning names the gap (docs/redaction.md, "What erasure reaches")."""
    path, _pid, record = _store_with_proposal_record(workspace)
    _killed(path, "pattern", PATTERN, "index")
    _as_older_journal(path)
    with caplog.at_level(logging.WARNING, logger="gitmem.redact"):
        rid = _recover(path)
    assert any(rid in r.getMessage() and "without its pattern" in r.getMessage() for r in caplog.records)
    change = json.loads(record.read_text())["changes"][0]
    assert EMAIL not in record.read_text() and change["path"] is None
    assert change["reasoning"] == f"[redacted: {rid}]"
