"""``gitmem dream run|schedule|list|show|cancel`` with the scripted model (tests/dreamkit.py): a run
dreams over the sessions since the last one and lands as a proposal; a schedule starts runs when
due (docs/dreams.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from dreamkit import SESSION_NOTE, STORE, Script
from typer.testing import CliRunner, Result

import gitmem
from gitmem.cli.app import app
from gitmem.engine import proposals
from gitmem.server.dream_jobs import DreamJobs
from gitmem.server.dreamer import DreamRunner
from tests.helpers import patience


def gm(home: Path, *args: str) -> Result:
    return CliRunner().invoke(app, [args[0], args[1], *args[2:], "--home", str(home)])


@pytest.fixture
def home(workspace: Path) -> Path:
    with gitmem.create_store("notes", home=workspace) as s:
        for path, content in STORE.items():
            s.write(path, content, actor="user:alice")
        s.write(SESSION_NOTE[0], SESSION_NOTE[1], session="sesn_one")
    return workspace


def test_run_dreams_over_the_sessions_since_the_last_run(home: Path, model: Script) -> None:
    r = gm(home, "dream", "run", "notes", "--model", "m", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["status"] == "completed" and d["inputs"][1]["session_ids"] == ["sesn_one"]
    assert d["gitmem"]["trigger"] == "cli" and len(d["gitmem"]["changes"]) == 2
    with gitmem.open_store("notes", home) as s:
        assert [v.path for v in proposals.versions(s.core, d["gitmem"]["proposal_id"])] == [
            "/prefs/coffee-again.md",
            "/facts/office.md",
        ]
        assert s.read("/facts/office.md").content == STORE["/facts/office.md"]  # review first
    again = gm(home, "dream", "run", "notes")
    assert again.exit_code == 0 and "nothing to dream over" in again.output
    with gitmem.open_store("notes", home) as s:
        s.write("/notes/later.md", "later\n", session="sesn_two")
    third = json.loads(gm(home, "dream", "run", "notes", "--json").output)
    assert third["inputs"][1]["session_ids"] == ["sesn_two"]  # not the dreamer's own session either
    listed = json.loads(gm(home, "dream", "list", "--json").output)
    assert [x["id"] for x in listed] == [third["id"], d["id"]]
    shown = gm(home, "dream", "show", d["id"])
    assert "proposed deleted /prefs/coffee-again.md: The two coffee notes" in shown.output
    refused = gm(home, "dream", "cancel", d["id"])
    assert refused.exit_code != 0 and "only a pending or running dream" in refused.output


def test_a_schedule_starts_a_run_when_due_and_not_before(home: Path, model: Script) -> None:
    r = gm(home, "dream", "schedule", "notes", "--model", "m", "--every", "3600")
    assert r.exit_code == 0 and "every 3600 s" in r.output
    runner = DreamRunner(home, workers=1)
    try:
        started = runner.run_due()
        assert len(started) == 1
        jobs = DreamJobs(home)
        deadline = patience(60)
        while not jobs.get(started[0]).final and time.monotonic() < deadline:
            time.sleep(0.05)
        d = jobs.get(started[0])
        assert d.status == "completed" and d.trigger == "schedule"
        runner.close()
        runner = DreamRunner(home, workers=1)
        assert runner.run_due() == []  # the last run is recent
    finally:
        runner.close()


def test_run_refuses_bad_input_and_writes_nothing(home: Path, model: Script) -> None:
    bad = gm(
        home, "dream", "run", "notes", "--session", "sesn_one", "--model", "m", "--instructions", "x" * 4097
    )
    assert bad.exit_code != 0 and "4096" in bad.output
    missing = gm(home, "dream", "run", "nope", "--session", "sesn_one", "--model", "m")
    assert missing.exit_code != 0
    assert DreamJobs(home).all() == []


def test_a_session_writing_in_the_same_second_as_the_last_run_is_not_missed(
    home: Path, model: Script
) -> None:
    from gitmem.server import dream_runs

    with gitmem.open_store("notes", home) as s:
        s.write("/a.md", "a\n", session="sesn_a")
        s.write("/b.md", "b\n", session="sesn_b")
        stamp = max(v.created_at for v in s.versions())
        a_id = s.versions(session="sesn_a")[0].id
    found, newest, edge = dream_runs.sessions_since(home, "notes", "main", None)
    assert found == ["sesn_one", "sesn_a", "sesn_b"] and edge
    when = stamp.isoformat().replace("+00:00", "Z")
    # a run that covered only sesn_a's version at that second: sesn_b's, at the same second, still counts
    again, _, _ = dream_runs.sessions_since(home, "notes", "main", when, [a_id])
    assert "sesn_b" in again and "sesn_a" not in again
    assert dream_runs.sessions_since(home, "notes", "main", newest, edge)[0] == []
