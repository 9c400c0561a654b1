"""The ref move gitmem makes itself (gitmem.git.refmove.move: git's lock protocol, no libgit2): a
compare-and-swap against git's own lock file, the same bytes git writes, and libgit2's path for
every case it does not take (a reflog to append to, a packed ref, a symbolic ref)."""

from __future__ import annotations

import os
from pathlib import Path

import pygit2
import pytest

import gitmem
from gitmem.git import refmove
from gitmem.store import Store
from tests.helpers import git


def _tips(store: Store) -> tuple[pygit2.Oid, pygit2.Oid]:
    """The scope's tip after two writes, and the one before it."""
    store.write("/a.md", "one\n")
    first = store.core.tip("main")
    store.write("/a.md", "two\n")
    second = store.core.tip("main")
    assert first is not None and second is not None
    return first, second


def test_a_plain_ref_moves_as_git_writes_it(store: Store) -> None:
    first, second = _tips(store)
    core, ref = store.core, Path(store.path) / "refs" / "heads" / "main"
    ref.write_text(f"{first}\n")  # back one commit (a plain loose ref)
    assert refmove.move(core.git_dir, "refs/heads/main", str(first), str(second)) is True
    assert ref.read_bytes() == f"{second}\n".encode()  # what git and libgit2 write
    assert not (ref.parent / "main.lock").exists()
    assert git(store.path, "rev-parse", "refs/heads/main").stdout.strip() == str(second)
    assert git(store.path, "fsck", "--no-dangling").returncode == 0


def test_a_moved_ref_is_not_swapped(store: Store) -> None:
    first, second = _tips(store)
    core, ref = store.core, Path(store.path) / "refs" / "heads" / "main"
    assert refmove.move(core.git_dir, "refs/heads/main", str(first), str(first)) is False
    assert ref.read_text().strip() == str(second)
    assert not (ref.parent / "main.lock").exists()
    assert core.cas("refs/heads/main", first, first) is False


def test_a_held_lock_is_never_taken_over(store: Store) -> None:
    """A lock file another writer (git push, git update-ref, another process) holds: no move, the
    lock stays as it was, and the ref keeps its value; git itself is refused likewise."""
    first, second = _tips(store)
    core, ref = store.core, Path(store.path) / "refs" / "heads" / "main"
    lock = ref.parent / "main.lock"
    lock.write_text("held by another writer\n")
    try:
        try:
            refmove.move(core.git_dir, "refs/heads/main", str(second), str(first))
        except refmove.LockHeld:
            pass
        else:
            raise AssertionError("moved a ref whose lock another writer holds")
        assert lock.read_text() == "held by another writer\n"
        assert ref.read_text().strip() == str(second)
        pushed = git(store.path, "update-ref", "refs/heads/main", str(first), str(second), check=False)
        assert pushed.returncode != 0  # git sees the same lock
    finally:
        lock.unlink()
    assert core.cas("refs/heads/main", second, first) is True
    assert git(store.path, "rev-parse", "refs/heads/main").stdout.strip() == str(first)


def test_a_reflog_is_appended_through_libgit2(store: Store) -> None:
    """With ``core.logAllRefUpdates`` on, libgit2 moves the ref and appends the reflog line."""
    first, second = _tips(store)
    assert refmove.plain_config(store.core.git_dir, store.core.repo) is True
    for value in ("true", "always"):
        git(store.path, "config", "core.logAllRefUpdates", value)
        os.utime(Path(store.path) / "config", ns=(1, 1))  # a config changed within one mtime tick
        again = gitmem.open_store(store.path)  # (libgit2 reads the config of a repository once)
        try:
            core = again.core
            assert refmove.plain_config(core.git_dir, core.repo) is False
            assert core.cas("refs/heads/main", second, first, "gitmem test") is True
            assert str(first) in (Path(store.path) / "logs" / "refs" / "heads" / "main").read_text()
            assert core.tip("main") == first
            assert core.cas("refs/heads/main", first, second, "gitmem test") is True
        finally:
            again.close()


def test_a_packed_ref_moves_through_libgit2(store: Store) -> None:
    first, second = _tips(store)
    core = store.core
    git(store.path, "pack-refs", "--all", "--prune")
    ref = Path(store.path) / "refs" / "heads" / "main"
    assert not ref.exists()
    assert refmove.move(core.git_dir, "refs/heads/main", str(second), str(first)) is refmove.UNHANDLED
    assert not (ref.parent / "main.lock").exists()
    assert core.cas("refs/heads/main", first, second) is False  # compared against packed-refs
    assert core.cas("refs/heads/main", second, first) is True
    assert git(store.path, "rev-parse", "refs/heads/main").stdout.strip() == str(first)
    # the next move finds the loose ref libgit2 wrote, and takes it itself
    assert refmove.move(core.git_dir, "refs/heads/main", str(first), str(second)) is True
    assert store.read("/a.md").content == "two\n"


def test_a_symbolic_ref_is_left_to_libgit2(store: Store) -> None:
    first, _second = _tips(store)
    core = store.core
    ref = Path(store.path) / "refs" / "heads" / "alias"
    ref.write_text("ref: refs/heads/main\n")
    assert refmove.move(core.git_dir, "refs/heads/alias", str(first), str(first)) is refmove.UNHANDLED
    assert ref.read_text() == "ref: refs/heads/main\n"
    assert not (ref.parent / "alias.lock").exists()


def test_a_lock_taken_from_a_stalled_writer_is_never_renamed_by_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The red team's interleaving: writer A stalls past the stale age holding the lock, a breaker
    removes it and writer C takes the lock; A wakes. A must not rename C's lock over the ref (an
    acknowledged write of C's lost, A's reported): it loses its race and leaves C's lock alone."""
    refs = tmp_path / "refs" / "heads"
    refs.mkdir(parents=True)
    ref = refs / "main"
    ref.write_text("a" * 40 + "\n")
    real = refmove._loose_value

    def stalled(path: str) -> str | None:
        lock = Path(path + ".lock")
        lock.unlink()  # broken as a dead writer's ...
        lock.write_text("c" * 40 + "\n")  # ... and taken by writer C
        return real(path)

    monkeypatch.setattr(refmove, "_loose_value", stalled)
    assert refmove.move(str(tmp_path), "refs/heads/main", "a" * 40, "b" * 40) is False
    assert ref.read_text() == "a" * 40 + "\n"
    assert (refs / "main.lock").read_text() == "c" * 40 + "\n"  # C's lock, untouched


def test_a_writer_that_finds_a_breaker_on_its_new_lock_gives_it_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between creating ``<ref>.lock`` and flocking it, a breaker opened and flocked the file (it
    judges it young and lets go): the writer cannot hold it flocked, so it gives its lock up (its
    own file removed, nothing else touched) and its caller moves the ref again."""
    import fcntl

    refs = tmp_path / "refs" / "heads"
    refs.mkdir(parents=True)
    ref = refs / "main"
    ref.write_text("a" * 40 + "\n")
    real = refmove.open_lock_fd
    breaker: list[int] = []

    def created_then_looked_at(path: str, flags: int, mode: int) -> int:
        fd = real(path, flags, mode)
        if not breaker:
            breaker.append(os.open(path, os.O_RDONLY))
            fcntl.flock(breaker[0], fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd

    monkeypatch.setattr(refmove, "open_lock_fd", created_then_looked_at)
    try:
        with pytest.raises(refmove.LockHeld):
            refmove.move(str(tmp_path), "refs/heads/main", "a" * 40, "b" * 40)
        assert not (refs / "main.lock").exists()
        assert ref.read_text() == "a" * 40 + "\n"
    finally:
        os.close(breaker[0])
    assert refmove.move(str(tmp_path), "refs/heads/main", "a" * 40, "b" * 40) is True
    assert ref.read_text() == "b" * 40 + "\n"
