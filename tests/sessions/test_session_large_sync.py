"""A session sync big enough to go through git fast-import behaves like a small one."""

from __future__ import annotations

from pathlib import Path

import pytest

import gitmem
from gitmem import sessions
from gitmem.engine import batch, pipeline


def test_large_sync_with_renames_edits_deletes_and_a_concurrent_write(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipeline, "FAST_IMPORT_MIN", 32)  # this sync's 45 versions go through fast-import
    with gitmem.create_store("big", home=workspace) as store:
        batch.apply_batch(
            store.core, [batch.BatchOp("write", f"/d/m{i}.md", f"memory {i}\n") for i in range(60)]
        )
        ids = {f"/d/m{i}.md": store.read(f"/d/m{i}.md").memory_id for i in range(60)}
    s = sessions.start_session(["big"], root=workspace / "mnt", home=workspace, session_id="sesn_big")
    mount = Path(s.root) / "big" / "d"
    for i in range(0, 20):
        (mount / f"m{i}.md").write_text(f"memory {i}, edited\n")
    for i in range(20, 30):
        (mount / f"m{i}.md").rename(mount / f"moved{i}.md")
    for i in range(30, 35):
        (mount / f"m{i}.md").unlink()
    for i in range(10):
        (mount / f"new{i}.md").write_text(f"new {i}\n")
    with gitmem.open_store("big", home=workspace) as other:  # another writer, meanwhile
        other.write("/d/m50.md", "changed by someone else\n", actor="user:bob")

    report = sessions.sync_session("sesn_big", home=workspace)

    versions = report.mounts[0].versions
    assert len(versions) == 20 + 10 + 5 + 10 > pipeline.FAST_IMPORT_MIN
    assert {v.session for v in versions} == {"sesn_big"}
    with gitmem.open_store("big", home=workspace) as store:
        assert store.read("/d/m3.md").content == "memory 3, edited\n"
        assert store.read("/d/moved25.md").memory_id == ids["/d/m25.md"]
        assert store.read("/d/m50.md").content == "changed by someone else\n"
        assert (mount / "m50.md").read_text() == "changed by someone else\n"  # refreshed
        live = {m.path for m in store.list() if isinstance(m, gitmem.Memory)}
        assert len(live) == 60 - 5 + 10 and "/d/m31.md" not in live
        again = sessions.sync_session("sesn_big", home=workspace)
        assert again.mounts[0].versions == []
        store.core.index.rebuild()
        assert {v.id for v in store.versions(session="sesn_big")} == {v.id for v in versions}


def test_a_rename_with_an_edit_keeps_the_memory_id(workspace: Path) -> None:
    text = "".join(f"line {i}: something the agent learned\n" for i in range(20))
    with gitmem.create_store("notes", home=workspace) as store:
        first = store.write("/drafts/plan.md", text)
        store.write("/other.md", "The deploy window is Tuesday 10:00-12:00 UTC, never on Fridays.\n")
    assert first is not None
    s = sessions.start_session(["notes"], root=workspace / "mnt", home=workspace, session_id="sesn_mv")
    root = Path(s.root) / "notes"
    (root / "drafts" / "plan.md").rename(root / "plan-final.md")
    (root / "plan-final.md").write_text(text.replace("line 3", "line three"))
    (root / "other.md").unlink()
    (root / "brand-new.md").write_text("Alice prefers short answers, and metric units in every reply.\n")

    report = sessions.sync_session("sesn_mv", home=workspace)

    by_path = {v.path: v for v in report.mounts[0].versions}
    moved = by_path["/plan-final.md"]
    assert (moved.operation, moved.previous_path, moved.memory_id) == (
        "modified",
        "/drafts/plan.md",
        first.memory_id,
    )
    assert by_path["/other.md"].operation == "deleted"
    assert by_path["/brand-new.md"].operation == "created"
    with gitmem.open_store("notes", home=workspace) as store:
        assert store.read("/plan-final.md").content == text.replace("line 3", "line three")
        assert [v.operation for v in store.versions("/plan-final.md")] == ["modified", "created"]
