"""Session sync with real directories: edits, renames, merges, conflicts, read-only mounts, crashes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import gitmem
from gitmem import sessions
from gitmem.config import now_rfc3339
from gitmem.sessions import Session
from gitmem.store import Store
from tests.helpers import commit_count, git


@pytest.fixture
def two(store: Store, workspace: Path) -> tuple[Store, Store]:
    store.write("/a.md", "alpha\n")
    store.write("/dir/b.md", "beta\n")
    store.write("/c.md", "gamma\n")
    ref = gitmem.create_store("ref", description="Reference docs", home=workspace)
    ref.write("/guide.md", "be brief\n")
    return store, ref


@pytest.fixture
def sess(two: tuple[Store, Store], tmp_path: Path) -> Session:
    return sessions.start_session(["notes", "ref:ro"], root=tmp_path / "mnt")


def mnt(tmp_path: Path, rel: str) -> Path:
    return tmp_path / "mnt" / rel


def contents(store: Store) -> dict[str, str | None]:
    return {m.path: m.content for m in store.list(with_content=True)}  # type: ignore[union-attr]


def test_sync_turns_each_change_into_one_tagged_version(
    two: tuple[Store, Store], sess: Session, tmp_path: Path
) -> None:
    notes = two[0]
    b_id = notes.read("/dir/b.md").memory_id
    before = commit_count(notes)
    mnt(tmp_path, "notes/a.md").write_text("alpha 2\n")
    mnt(tmp_path, "notes/new/n.md").parent.mkdir()
    mnt(tmp_path, "notes/new/n.md").write_text("fresh\n")
    os.remove(mnt(tmp_path, "notes/c.md"))
    os.rename(mnt(tmp_path, "notes/dir/b.md"), mnt(tmp_path, "notes/b-moved.md"))
    report = sessions.sync_session(sess.id)
    got = sorted((v.operation, v.path, v.previous_path) for v in report.mounts[0].versions)
    assert got == [
        ("created", "/new/n.md", None),
        ("deleted", "/c.md", None),
        ("modified", "/a.md", None),
        ("modified", "/b-moved.md", "/dir/b.md"),
    ]
    assert all(v.session == sess.id and v.actor == f"session:{sess.id}" for v in report.mounts[0].versions)
    assert notes.read("/b-moved.md").memory_id == b_id
    assert contents(notes) == {"/a.md": "alpha 2\n", "/b-moved.md": "beta\n", "/new/n.md": "fresh\n"}
    assert commit_count(notes) == before + 4
    # plain git sees the same: one commit per version, each with the session trailer
    out = git(
        notes.path, "log", "-4", "--format=%s|%(trailers:key=Gitmem-Session,valueonly,separator=)"
    ).stdout
    renamed = git(
        notes.path, "log", "-1", "--format=%(trailers:key=Gitmem-Memory,valueonly)", "--", "b-moved.md"
    )
    assert renamed.stdout.strip() == b_id
    assert sorted(out.split("\n")[:4]) == sorted(
        [
            f"{s}|{sess.id}"
            for s in (
                "created /new/n.md",
                "deleted /c.md",
                "modified /a.md",
                "renamed /dir/b.md to /b-moved.md",
            )
        ]
    )


def test_second_sync_without_changes_writes_nothing(
    two: tuple[Store, Store], sess: Session, tmp_path: Path
) -> None:
    mnt(tmp_path, "notes/a.md").write_text("alpha 2\n")
    sessions.sync_session(sess.id)
    tip = two[0].core.tip("main")
    report = sessions.sync_session(sess.id)
    assert report.versions == 0 and two[0].core.tip("main") == tip


def test_concurrent_write_elsewhere_merges_and_refreshes_mount(
    two: tuple[Store, Store], sess: Session, tmp_path: Path
) -> None:
    notes = two[0]
    notes.write("/c.md", "gamma by bob\n", actor="user:bob")
    notes.write("/bob.md", "bob's note\n", actor="user:bob")
    mnt(tmp_path, "notes/a.md").write_text("alpha 2\n")
    report = sessions.sync_session(sess.id).mounts[0]
    assert [v.path for v in report.versions] == ["/a.md"] and report.conflicts == []
    assert sorted(report.refreshed) == ["/bob.md", "/c.md"]
    assert mnt(tmp_path, "notes/c.md").read_text() == "gamma by bob\n"
    assert mnt(tmp_path, "notes/bob.md").read_text() == "bob's note\n"
    assert contents(notes)["/a.md"] == "alpha 2\n"


def test_conflicting_edit_is_kept_private_to_the_session(
    two: tuple[Store, Store], sess: Session, tmp_path: Path
) -> None:
    notes = two[0]
    notes.write("/a.md", "alpha by bob\n", actor="user:bob")
    mnt(tmp_path, "notes/a.md").write_text("alpha by agent\n")
    report = sessions.sync_session(sess.id).mounts[0]
    kept = f"/a.md.conflict-{sess.id}"
    assert [(c.path, c.kept_as) for c in report.conflicts] == [("/a.md", kept)]
    assert contents(notes)["/a.md"] == "alpha by bob\n"
    assert kept not in contents(notes)  # never in the shared scope's listings or search
    assert notes.search("agent") == []
    assert mnt(tmp_path, "notes/a.md").read_text() == "alpha by bob\n"
    assert mnt(tmp_path, f"notes/{kept[1:]}").read_text() == "alpha by agent\n"
    again = sessions.sync_session(sess.id)
    assert again.versions == 0
    assert [i.path for i in again.mounts[0].refused] == [kept]  # reported until resolved
    assert kept not in contents(notes)


def test_local_delete_of_a_file_changed_in_store_keeps_the_store_version(
    two: tuple[Store, Store], sess: Session, tmp_path: Path
) -> None:
    two[0].write("/c.md", "gamma by bob\n", actor="user:bob")
    os.remove(mnt(tmp_path, "notes/c.md"))
    report = sessions.sync_session(sess.id).mounts[0]
    assert [(c.path, c.kept_as) for c in report.conflicts] == [("/c.md", None)]
    assert mnt(tmp_path, "notes/c.md").read_text() == "gamma by bob\n"
    assert contents(two[0])["/c.md"] == "gamma by bob\n"


def test_rename_of_a_file_edited_in_store_keeps_both(
    two: tuple[Store, Store], sess: Session, tmp_path: Path
) -> None:
    two[0].write("/a.md", "alpha by bob\n", actor="user:bob")
    os.rename(mnt(tmp_path, "notes/a.md"), mnt(tmp_path, "notes/z.md"))
    sessions.sync_session(sess.id)
    assert contents(two[0])["/a.md"] == "alpha by bob\n" and contents(two[0])["/z.md"] == "alpha\n"
    assert mnt(tmp_path, "notes/a.md").read_text() == "alpha by bob\n"


def test_read_only_mount_refuses_changes_whatever_the_file_modes(
    two: tuple[Store, Store], sess: Session, tmp_path: Path
) -> None:
    ref = two[1]
    tip = ref.core.tip("main")
    guide = mnt(tmp_path, "ref/guide.md")
    os.chmod(guide.parent, 0o755)
    os.chmod(guide, 0o644)  # as root would not even need to
    guide.write_text("tampered\n")
    mnt(tmp_path, "ref/extra.md").write_text("sneaky\n")
    os.chmod(guide, 0o444)  # modes back as they were: the check is by content
    report = sessions.sync_session(sess.id).mounts[1]
    assert sorted(i.path for i in report.refused) == ["/extra.md", "/guide.md"]
    assert "read-only" in report.refused[0].reason
    assert ref.core.tip("main") == tip and contents(ref) == {"/guide.md": "be brief\n"}
    # the refused edits are put back to the store's content (the new file removed), modes locked
    assert guide.read_text() == "be brief\n" and not mnt(tmp_path, "ref/extra.md").exists()
    assert oct(guide.stat().st_mode & 0o777) == "0o444"
    assert report.refreshed == ["/extra.md", "/guide.md"]
    # others' changes still reach the read-only mount; nothing is left to refuse
    ref.write("/news.md", "new rule\n", actor="user:bob")
    report = sessions.sync_session(sess.id).mounts[1]
    assert report.refreshed == ["/news.md"] and report.refused == []
    assert mnt(tmp_path, "ref/news.md").read_text() == "new rule\n"
    assert oct(mnt(tmp_path, "ref/news.md").stat().st_mode & 0o777) == "0o444"


def test_unusable_files_are_refused_and_the_rest_syncs(
    two: tuple[Store, Store], sess: Session, tmp_path: Path
) -> None:
    mnt(tmp_path, "notes/bin.dat").write_bytes(b"\x00\x01binary")
    os.symlink(mnt(tmp_path, "notes/a.md"), mnt(tmp_path, "notes/link.md"))
    mnt(tmp_path, "notes/ok.md").write_text("fine\n")
    report = sessions.sync_session(sess.id).mounts[0]
    assert [v.path for v in report.versions] == ["/ok.md"]
    assert sorted(i.path for i in report.refused) == ["/bin.dat", "/link.md"]
    assert "symbolic link" in {i.path: i.reason for i in report.refused}["/link.md"]


def test_limits_apply_per_file(two: tuple[Store, Store], sess: Session, tmp_path: Path) -> None:
    notes = two[0]
    notes.update_settings(limits=gitmem.config.Limits(max_memory_bytes=10))
    mnt(tmp_path, "notes/big.md").write_text("x" * 11)
    mnt(tmp_path, "notes/small.md").write_text("x\n")
    report = sessions.sync_session(sess.id).mounts[0]
    assert [v.path for v in report.versions] == ["/small.md"]
    assert [i.path for i in report.refused] == ["/big.md"]
    assert mnt(tmp_path, "notes/big.md").exists()


@pytest.mark.parametrize("point", ["sync-after-batch", "sync-after-refresh"])
def test_killed_sync_is_finished_by_the_next_without_duplicates(
    two: tuple[Store, Store], sess: Session, tmp_path: Path, point: str
) -> None:
    notes = two[0]
    notes.write("/c.md", "gamma by bob\n", actor="user:bob")  # forces a refresh and a conflict
    mnt(tmp_path, "notes/a.md").write_text("alpha 2\n")
    mnt(tmp_path, "notes/c.md").write_text("gamma by agent\n")
    os.rename(mnt(tmp_path, "notes/dir/b.md"), mnt(tmp_path, "notes/b2.md"))
    env = {**os.environ, "GITMEM_FAULT": point}
    proc = subprocess.run(
        [sys.executable, "-m", "gitmem", "session", "sync", sess.id], env=env, capture_output=True, text=True
    )
    assert proc.returncode == -9, proc.stderr
    written = notes.versions(session=sess.id)
    assert len(written) == 2  # the batch landed before the kill (the conflict copy stays local)
    report = sessions.sync_session(sess.id)
    assert report.versions == 0
    assert notes.versions(session=sess.id) == written
    kept = f"/c.md.conflict-{sess.id}"
    assert contents(notes) == {
        "/a.md": "alpha 2\n",
        "/b2.md": "beta\n",
        "/c.md": "gamma by bob\n",
    }
    assert mnt(tmp_path, "notes/c.md").read_text() == "gamma by bob\n"
    assert mnt(tmp_path, "notes/" + kept[1:]).read_text() == "gamma by agent\n"
    assert sessions.sync_session(sess.id).versions == 0


def test_watch_syncs_changes_made_while_watching(
    two: tuple[Store, Store], sess: Session, tmp_path: Path
) -> None:
    reports: list[sessions.SyncReport] = []
    wrote = threading.Event()

    def agent() -> None:
        mnt(tmp_path, "notes/watched.md").write_text("seen\n")
        wrote.set()

    def on_sync(report: sessions.SyncReport) -> None:
        reports.append(report)
        if len(reports) == 1:
            threading.Thread(target=agent).start()

    syncs = sessions.watch_session(
        sess.id,
        debounce=0.05,
        poll=0.01,
        max_seconds=30,
        on_sync=on_sync,
        should_stop=lambda: any(r.versions for r in reports),
    )
    assert wrote.is_set() and syncs >= 2
    assert contents(two[0])["/watched.md"] == "seen\n"


def test_a_local_directory_in_the_way_is_never_removed(
    two: tuple[Store, Store], sess: Session, tmp_path: Path
) -> None:
    notes = two[0]
    notes.write("/a.md", "alpha by bob\n", actor="user:bob")
    os.remove(mnt(tmp_path, "notes/a.md"))
    mnt(tmp_path, "notes/a.md").mkdir()
    mnt(tmp_path, "notes/a.md/inner.md").write_text("mine\n")
    report = sessions.sync_session(sess.id).mounts[0]
    assert [i.path for i in report.refused] == ["/a.md/inner.md"]
    assert mnt(tmp_path, "notes/a.md/inner.md").read_text() == "mine\n"
    assert sessions.sync_session(sess.id).versions == 0
    assert contents(notes)["/a.md"] == "alpha by bob\n"


def test_a_symlinked_directory_neither_deletes_nor_receives_files(
    two: tuple[Store, Store], sess: Session, tmp_path: Path
) -> None:
    notes = two[0]
    outside = tmp_path / "outside"
    outside.mkdir()
    os.rename(mnt(tmp_path, "notes/dir"), tmp_path / "moved-away")
    os.symlink(outside, mnt(tmp_path, "notes/dir"))
    notes.write("/dir/new.md", "from bob\n", actor="user:bob")
    report = sessions.sync_session(sess.id).mounts[0]
    assert report.versions == [] and [i.path for i in report.refused] == ["/dir"]
    assert contents(notes)["/dir/b.md"] == "beta\n"
    assert list(outside.iterdir()) == []
    assert sessions.sync_session(sess.id).versions == 0


def test_a_mount_that_cannot_sync_does_not_stop_the_others(
    two: tuple[Store, Store], sess: Session, tmp_path: Path
) -> None:
    os.remove(mnt(tmp_path, "ref/.gitmem/mount.json"))
    mnt(tmp_path, "notes/x.md").write_text("x\n")
    report = sessions.sync_session(sess.id)
    assert [v.path for v in report.mounts[0].versions] == ["/x.md"]
    assert report.mounts[1].error is not None and "mount.json is missing" in report.mounts[1].error


def test_store_archived_after_start_refuses_every_change_and_keeps_files(
    two: tuple[Store, Store], sess: Session, tmp_path: Path
) -> None:
    notes = two[0]
    notes.update_settings(archived_at=now_rfc3339())
    tip = notes.core.tip("main")
    mnt(tmp_path, "notes/a.md").write_text("alpha 2\n")
    report = sessions.sync_session(sess.id).mounts[0]
    assert [i.path for i in report.refused] == ["/a.md"] and "archived" in report.refused[0].reason
    assert notes.core.tip("main") == tip and mnt(tmp_path, "notes/a.md").read_text() == "alpha 2\n"


def test_watch_brings_others_changes_into_the_mount(
    two: tuple[Store, Store], sess: Session, tmp_path: Path
) -> None:
    reports: list[sessions.SyncReport] = []

    def on_sync(report: sessions.SyncReport) -> None:
        reports.append(report)
        if len(reports) == 1:
            two[0].write("/from-bob.md", "hello\n", actor="user:bob")

    sessions.watch_session(
        sess.id,
        debounce=0.0,
        poll=0.01,
        max_seconds=30,
        on_sync=on_sync,
        should_stop=lambda: any(m.refreshed for r in reports for m in r.mounts),
    )
    assert reports[-1].mounts[0].refreshed == ["/from-bob.md"]
    assert mnt(tmp_path, "notes/from-bob.md").read_text() == "hello\n"
