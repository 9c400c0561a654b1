"""Sessions: start (mounts, markers, modes, system prompt, limits), end, list, show."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

import gitmem
from gitmem import sessions
from gitmem.config import now_rfc3339
from gitmem.errors import ConflictError, ForbiddenError, InvalidInputError, LimitExceededError
from gitmem.sessions.state import StoreSpec, parse_spec
from gitmem.store import Store


@pytest.fixture
def two(store: Store, workspace: Path) -> tuple[Store, Store]:
    store.write("/notes/todo.md", "buy milk\n")
    store.write("/facts.md", "the sky is blue\n")
    ref = gitmem.create_store("ref", description="Reference docs", home=workspace)
    ref.write("/guide/style.md", "be brief\n")
    return store, ref


def files_under(root: Path) -> dict[str, str]:
    return {
        "/" + p.relative_to(root).as_posix(): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".gitmem" not in p.parts
    }


def test_start_mounts_each_store_with_marker(two: tuple[Store, Store], tmp_path: Path) -> None:
    s = sessions.start_session(["notes", "ref:ro"], root=tmp_path / "mnt")
    assert s.id.startswith("sesn_") and s.status == "active" and s.actor == f"session:{s.id}"
    assert files_under(tmp_path / "mnt/notes") == {
        "/facts.md": "the sky is blue\n",
        "/notes/todo.md": "buy milk\n",
    }
    assert files_under(tmp_path / "mnt/ref") == {"/guide/style.md": "be brief\n"}
    marker = json.loads((tmp_path / "mnt/ref/.gitmem/mount.json").read_text())
    ref = two[1]
    assert (marker["store"], marker["scope"], marker["access"], marker["session"]) == (
        two[1].id,
        "main",
        "ro",
        s.id,
    )
    assert marker["base"] == str(ref.core.tip("main"))
    assert marker["files"] == {
        "/guide/style.md": str(ref.core.repo[ref.core.tip("main")].tree["guide/style.md"].id)
    }


def test_read_only_mount_has_0444_files_and_0555_dirs(two: tuple[Store, Store], tmp_path: Path) -> None:
    sessions.start_session(["notes", "ref:ro"], root=tmp_path / "mnt")
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(tmp_path / "mnt/ref/guide/style.md") == 0o444
    assert mode(tmp_path / "mnt/ref/guide") == 0o555 and mode(tmp_path / "mnt/ref") == 0o555
    assert mode(tmp_path / "mnt/notes/facts.md") == 0o644


def test_system_prompt_names_each_store(two: tuple[Store, Store], tmp_path: Path) -> None:
    s = sessions.start_session(
        ["notes", "ref:ro"], root=tmp_path / "mnt", instructions={"ref": "Follow the style guide."}
    )
    text = (tmp_path / "mnt/SYSTEM_PROMPT.md").read_text()
    assert text == sessions.system_prompt(s) == sessions.prompt_for(s.id)
    assert (
        f"## notes\n- Path: {tmp_path / 'mnt/notes'}\n- Access: read-write\n- Description: Test notes\n"
        in text
    )
    assert (
        f"## ref\n- Path: {tmp_path / 'mnt/ref'}\n- Access: read-only\n- Description: Reference docs\n"
        "- Instructions: Follow the style guide.\n"
    ) in text
    assert "How changes are saved" in text


def test_ninth_store_is_refused_before_anything_is_created(workspace: Path, tmp_path: Path) -> None:
    for i in range(9):
        gitmem.create_store(f"s{i}", home=workspace).close()
    with pytest.raises(LimitExceededError, match="at most 8 stores"):
        sessions.start_session([f"s{i}" for i in range(9)], root=tmp_path / "mnt")
    assert not (tmp_path / "mnt").exists()
    assert sessions.list_sessions() == []
    assert len(sessions.start_session([f"s{i}" for i in range(8)], root=tmp_path / "mnt").mounts) == 8


def test_archived_store_is_refused(store: Store, tmp_path: Path) -> None:
    store.update_settings(archived_at=now_rfc3339())
    with pytest.raises(ForbiddenError, match="archived"):
        sessions.start_session(["notes"], root=tmp_path / "mnt")
    assert not (tmp_path / "mnt").exists()


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("notes", StoreSpec("notes", "rw", "main")),
        ("notes:ro", StoreSpec("notes", "ro", "main")),
        ("notes@team", StoreSpec("notes", "rw", "team")),
        ("notes:ro@alice@example.com", StoreSpec("notes", "ro", "alice@example.com")),
        ("notes@team:rw", StoreSpec("notes", "rw", "team")),
    ],
)
def test_parse_spec(text: str, spec: StoreSpec) -> None:
    assert parse_spec(text) == spec


@pytest.mark.parametrize("text", ["notes:rx", "", ":ro", "notes@", "notes@a..b"])
def test_parse_spec_refuses_bad_specs(text: str) -> None:
    with pytest.raises(InvalidInputError):
        parse_spec(text)


def test_bad_requests_create_nothing(store: Store, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="attached twice"):
        sessions.start_session(["notes", "notes:ro"], root=tmp_path / "mnt")
    with pytest.raises(InvalidInputError, match="not an attached store"):
        sessions.start_session(["notes"], root=tmp_path / "mnt", instructions={"other": "x"})
    (tmp_path / "mnt/notes").mkdir(parents=True)
    with pytest.raises(ConflictError, match="already exists"):
        sessions.start_session(["notes"], root=tmp_path / "mnt")
    assert sessions.list_sessions() == []


def test_two_scopes_of_one_store_get_distinct_slugs(store: Store, tmp_path: Path) -> None:
    store.write("/a.md", "main\n")
    s = sessions.start_session(["notes", "notes@team"], root=tmp_path / "mnt")
    assert [m.slug for m in s.mounts] == ["notes@main", "notes@team"]
    assert files_under(tmp_path / "mnt/notes@team") == {}
    (tmp_path / "mnt/notes@team/b.md").write_text("team\n")
    sessions.sync_session(s.id)
    assert store.read("/b.md", scope="team").content == "team\n"
    assert [m.path for m in store.list()] == ["/a.md"]


def test_end_syncs_then_removes_mounts(two: tuple[Store, Store], tmp_path: Path) -> None:
    s = sessions.start_session(["notes", "ref:ro"], root=tmp_path / "mnt")
    (tmp_path / "mnt/notes/new.md").write_text("learned\n")
    result = sessions.end_session(s.id)
    assert [v.path for v in result.sync.mounts[0].versions] == ["/new.md"]
    assert not (tmp_path / "mnt").exists()
    assert result.session.status == "ended" and sessions.show_session(s.id).session.status == "ended"
    with pytest.raises(InvalidInputError, match="has ended"):
        sessions.sync_session(s.id)


def test_end_keeps_mounts_holding_unsaved_changes_unless_forced(store: Store, tmp_path: Path) -> None:
    s = sessions.start_session(["notes"], root=tmp_path / "mnt")
    (tmp_path / "mnt/notes/bad.bin").write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(ConflictError, match="could not be saved"):
        sessions.end_session(s.id)
    assert (tmp_path / "mnt/notes/bad.bin").exists()
    assert sessions.end_session(s.id, force=True).session.status == "ended"
    assert not (tmp_path / "mnt").exists()


def test_list_and_show_report_versions_written(two: tuple[Store, Store], tmp_path: Path) -> None:
    s = sessions.start_session(["notes", "ref:ro"], root=tmp_path / "mnt")
    (tmp_path / "mnt/notes/facts.md").write_text("the sky is grey\n")
    sessions.sync_session()  # the only active session
    detail = sessions.show_session(s.id)
    assert [(v.operation, v.path, v.session) for v in detail.versions["notes"]] == [
        ("modified", "/facts.md", s.id)
    ]
    assert detail.versions["ref"] == []
    listed = sessions.list_sessions(status="active")
    assert [(d.session.id, len(d.versions["notes"])) for d in listed] == [(s.id, 1)]
    assert sessions.list_sessions(status="ended") == []


def test_session_record_lives_in_workspace(store: Store, workspace: Path, tmp_path: Path) -> None:
    s = sessions.start_session(["notes"], root=tmp_path / "mnt", session_id="agent-run-7")
    data = json.loads((workspace / "sessions/agent-run-7.json").read_text())
    assert data["id"] == s.id == "agent-run-7" and data["mounts"][0]["path"] == str(tmp_path / "mnt/notes")
    with pytest.raises(ConflictError, match="already exists"):
        sessions.start_session(["notes"], root=tmp_path / "other", session_id="agent-run-7")
