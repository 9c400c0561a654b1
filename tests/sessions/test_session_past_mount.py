"""A read-only session mount of a past state (docs/point-in-time.md#a-session-mount-of-a-past-state):
``start_session(..., at=)`` and ``gitmem session start --at`` mount each store as it was then, say which
moment they show (record, marker, system prompt), refuse changes and stay at that state when synced,
refuse write access, and show a later redaction as redacted."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gitmem import sessions
from gitmem.cli.app import app
from gitmem.errors import InvalidInputError, NotFoundError
from gitmem.store import Store


def files_under(root: Path) -> dict[str, str]:
    return {
        "/" + p.relative_to(root).as_posix(): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".gitmem" not in p.parts
    }


@pytest.fixture
def history(store: Store) -> str:
    """Two states: the first (whose version id is returned) and a later one."""
    store.write("/facts.md", "the sky is blue\n")
    first = store.versions()[0].id
    store.write("/facts.md", "the sky is grey\n")
    store.write("/later.md", "written afterwards\n")
    return first


def test_a_past_mount_shows_that_state_read_only_and_stays_there(
    store: Store, history: str, tmp_path: Path
) -> None:
    s = sessions.start_session(["notes"], root=tmp_path / "mnt", at=history)
    root = tmp_path / "mnt/notes"
    assert files_under(root) == {"/facts.md": "the sky is blue\n"}
    (m,) = s.mounts
    commit, when = store.state_at(history)
    assert (m.access, m.at, m.shows) == ("ro", history, when) and when and commit
    marker = json.loads((root / ".gitmem/mount.json").read_text())
    assert (marker["at"], marker["shows"], marker["base"]) == (history, when, commit)
    assert stat.S_IMODE((root / "facts.md").stat().st_mode) == 0o444
    prompt = (tmp_path / "mnt/SYSTEM_PROMPT.md").read_text()
    assert f"as it was at {history} (the state of {when})" in prompt

    (root / "facts.md").chmod(0o644)
    (root / "facts.md").write_text("changed by the agent\n")
    store.write("/newest.md", "after the session started\n")
    report = sessions.sync_session(s.id)
    (ms,) = report.mounts
    assert ms.error is None and [r.path for r in ms.refused] == ["/facts.md"]
    assert files_under(root) == {"/facts.md": "the sky is blue\n"}  # put back to the past, not the head
    assert store.read("/facts.md").content == "the sky is grey\n"  # nothing was written
    assert ms.tip == commit
    sessions.end_session(s.id)
    assert not root.exists()


def test_a_past_mount_refuses_write_access_and_bad_moments(
    store: Store, history: str, tmp_path: Path
) -> None:
    for spec in ("notes:rw", "notes:review", "notes:rw@main", "notes@main:rw", "notes@main:review"):
        with pytest.raises(InvalidInputError, match="read-only"):
            sessions.start_session([spec], root=tmp_path / "a", at=history)
    with pytest.raises(InvalidInputError):
        sessions.start_session(["notes"], root=tmp_path / "b", at="not a time")
    with pytest.raises(NotFoundError):
        sessions.start_session(["notes"], root=tmp_path / "c", at="0" * 40)
    assert not any((tmp_path / d).exists() and any((tmp_path / d).iterdir()) for d in "abc")
    assert sessions.list_sessions() == []
    for i, spec in enumerate(("notes:ro", "notes@main:ro", "notes:ro@main")):
        s = sessions.start_session([spec], root=tmp_path / f"ok{i}", at=history)
        assert s.mounts[0].access == "ro" and s.mounts[0].at == history
        assert files_under(tmp_path / f"ok{i}/notes") == {"/facts.md": "the sky is blue\n"}


def test_a_redaction_after_the_mount_reads_as_redacted(store: Store, tmp_path: Path) -> None:
    store.write("/s.md", "the door code is 4417\n")
    secret = store.versions()[0]
    store.write("/s.md", "the door code changed\n")
    s = sessions.start_session(["notes"], root=tmp_path / "mnt", at=secret.id)
    assert "4417" in (tmp_path / "mnt/notes/s.md").read_text()
    store.redact(secret.id, reason="a secret", actor="user:admin")
    (ms,) = sessions.sync_session(s.id).mounts
    assert ms.error is None
    text = (tmp_path / "mnt/notes/s.md").read_text()
    assert "4417" not in text


def test_the_cli_starts_a_past_mount(store: Store, history: str, workspace: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(
        app,
        ["session", "start", "--store", "notes", "--at", history, "--root", str(tmp_path / "m"), "--json"],
        env={"GITMEM_HOME": str(workspace)},
    )
    assert r.exit_code == 0, r.output
    record = json.loads(r.stdout)
    (m,) = record["mounts"]
    assert (m["access"], m["at"]) == ("ro", history) and m["shows"]
    assert files_under(tmp_path / "m/notes") == {"/facts.md": "the sky is blue\n"}
