"""Issue 26, sessions: ``session end`` keeps both sides of a conflict (it refuses while a conflict
copy is in a mount, unless --force), and a mount root replaced by a symlink is never followed by
sync or end (nothing outside the session is written, chmodded or removed)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from gitmem import sessions
from gitmem.errors import ConflictError
from gitmem.store import Store


def test_end_without_force_keeps_the_agents_conflicting_edit(store: Store, tmp_path: Path) -> None:
    store.write("/a.md", "base\n", actor="user:alice")
    s = sessions.start_session(["notes"], root=tmp_path / "mnt")
    mnt = tmp_path / "mnt" / "notes"
    (mnt / "a.md").write_text("the agent's edit\n")
    store.write("/a.md", "the store's edit\n", actor="user:bob")
    with pytest.raises(ConflictError, match="conflict"):
        sessions.end_session(s.id)
    assert store.read("/a.md").content == "the store's edit\n"
    copies = [p for p in mnt.iterdir() if ".conflict-" in p.name]
    assert [p.read_text() for p in copies] == ["the agent's edit\n"]  # both sides kept
    assert sessions.show_session(s.id).session.status == "active"
    assert sessions.end_session(s.id, force=True).session.status == "ended"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "keep.md").write_text("not the session's\n")
    (out / "a.md").write_text("outside a\n")
    os.chmod(out / "sub", 0o700)
    return out


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(os.lstat(p).st_mode) for p in [root, *root.rglob("*")]}


def test_a_mount_root_replaced_by_a_symlink_is_not_followed(
    store: Store, tmp_path: Path, outside: Path
) -> None:
    store.write("/a.md", "in the store\n", actor="user:alice")
    s = sessions.start_session(["notes"], root=tmp_path / "mnt")
    mnt = tmp_path / "mnt" / "notes"
    shutil.copytree(mnt / ".gitmem", outside / ".gitmem")  # the marker too: the attacker copied it
    before = (_modes(outside), {str(p): p.read_bytes() for p in outside.rglob("*") if p.is_file()})
    shutil.rmtree(mnt, onerror=lambda f, p, e: (os.chmod(os.path.dirname(p), 0o700), f(p)))
    mnt.symlink_to(outside, target_is_directory=True)
    report = sessions.sync_session(s.id)
    assert report.mounts[0].error is not None and "symlink" in report.mounts[0].error
    with pytest.raises(ConflictError):
        sessions.end_session(s.id)
    sessions.end_session(s.id, force=True)
    after = (_modes(outside), {str(p): p.read_bytes() for p in outside.rglob("*") if p.is_file()})
    assert after == before
    assert store.read("/a.md").content == "in the store\n"
    assert not mnt.is_symlink() or os.readlink(mnt) == str(outside)
