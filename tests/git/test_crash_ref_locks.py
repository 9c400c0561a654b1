"""Ref lock files a killed process leaves behind (docs/durability.md, "Stale ref locks").

Each lock here is left by a real ``git`` SIGKILLed while it holds it (its reference-transaction hook
kills it once the transaction is prepared: every lock taken, nothing renamed), then dated as old as
time would make it. Afterwards the store still accepts the operation that moves or deletes that
ref, and ``gitmem verify`` is clean. Also: a history rewrite's branch lock, held across its flushes,
is never broken by a writer; breakers take turns; a lock dated ahead of the clock is stale too."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pygit2
import pytest

from gitmem.audit import journal, redact
from gitmem.audit.verify import verify
from gitmem.engine import checkpoints, ledger
from gitmem.errors import ConflictError
from gitmem.git import reflocks
from gitmem.store import Store
from tests.helpers import git

HOOK = '#!/bin/sh\n[ "$1" = prepared ] && kill -9 $PPID\nexit 0\n'


def _kill_git_holding(path: Path, tmp: Path, *update: str) -> None:
    """Run ``git update-ref`` ``update`` in the store and SIGKILL it with every lock taken."""
    hooks = tmp / "killing-hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "reference-transaction").write_text(HOOK)
    (hooks / "reference-transaction").chmod(0o755)
    res = git(path, "-c", f"core.hooksPath={hooks}", "update-ref", *update, check=False)
    assert res.returncode == -signal.SIGKILL, (res.returncode, res.stderr)


def _age(lock: Path, seconds: float = 120.0) -> None:
    old = time.time() - seconds
    os.utime(lock, (old, old))


def _verified(store: Store) -> None:
    fsck = git(store.path, "fsck", "--full", "--no-dangling", check=False)
    assert fsck.returncode == 0, fsck.stderr
    report = verify(store.core)
    assert report.ok, report
    cli = subprocess.run(
        [str(Path(sys.executable).with_name("gitmem")), "verify", str(store.path)],
        capture_output=True,
        check=False,
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr


def test_a_branch_lock_of_a_killed_git_is_removed(store: Store, tmp_path: Path) -> None:
    first = store.write("/a.md", "a\n")
    second = store.write("/b.md", "b\n")
    assert first is not None and second is not None
    tip = store.core.tip("main")
    assert tip is not None
    _kill_git_holding(
        Path(store.path), tmp_path, "refs/heads/main", str(store.core.commit(tip).parents[0].id)
    )
    lock = Path(store.path) / "refs" / "heads" / "main.lock"
    assert lock.exists()
    _age(lock)
    assert store.write("/c.md", "c\n") is not None  # in another process it wedged: 64 attempts
    assert not lock.exists()
    assert [m.path for m in store.list("/")] == ["/a.md", "/b.md", "/c.md"]
    _verified(store)


def test_the_ledger_lock_of_a_killed_git_is_removed(store: Store, tmp_path: Path) -> None:
    """Before: every ledger append (settings, pushes, redactions, flags) failed for good with
    'refs/gitmem/ledger kept moving'."""
    before = ledger.entries(store.core)
    assert before
    tip = store.core.ref_target(ledger.LEDGER_REF)
    other = store.write("/a.md", "a\n")
    assert other is not None and tip is not None
    _kill_git_holding(Path(store.path), tmp_path, ledger.LEDGER_REF, str(store.core.tip("main")), str(tip))
    lock = Path(store.path) / (ledger.LEDGER_REF + ".lock")
    assert lock.exists()
    _age(lock)
    entry = ledger.append(store.core, "flag", {"reason": "after a crash"})
    assert not lock.exists()
    assert [e.seq for e in ledger.entries(store.core)] == [*(e.seq for e in before), entry.seq]
    assert not (store.core.gitmem_dir / checkpoints.TLOG_DIR / "lagging").exists()
    _verified(store)


def test_the_checkpoints_lock_of_a_killed_git_is_removed(store: Store, tmp_path: Path) -> None:
    """Before: every ledger append after it left its checkpoint unsigned (``tlog/lagging``, a
    raw libgit2 error), for good."""
    tip = store.core.ref_target(checkpoints.CHECKPOINTS_REF)
    assert tip is not None
    _kill_git_holding(Path(store.path), tmp_path, checkpoints.CHECKPOINTS_REF, str(tip))
    lock = Path(store.path) / (checkpoints.CHECKPOINTS_REF + ".lock")
    assert lock.exists()
    _age(lock)
    ledger.append(store.core, "flag", {"reason": "after a crash"})
    assert not lock.exists()
    assert not (store.core.gitmem_dir / checkpoints.TLOG_DIR / "lagging").exists()
    assert store.core.ref_target(checkpoints.CHECKPOINTS_REF) != tip
    _verified(store)


def test_a_packed_refs_lock_of_a_killed_git_is_removed_once_stale(store: Store, tmp_path: Path) -> None:
    """A deletion of a packed ref rewrites packed-refs under packed-refs.lock (libgit2 and git): a
    killed one left it, and every later deletion of a packed ref (a proposal's, on erasure or
    retention) and every ``git pack-refs`` / ``git gc`` failed for good; git's packed-refs.new, left
    with it, failed every git rewrite of packed-refs (pack-refs, gc, a deletion) for good even
    without the lock. Young, the lock is left alone. And a libgit2 handle whose deletion met the lock
    dropped the ref from its cached list: it listed the store's refs without it, and deleting it
    again through it 'succeeded' and left it (so every attempt uses a fresh handle)."""
    assert store.write("/a.md", "a\n") is not None
    tip = str(store.core.tip("main"))
    for name in ("refs/gitmem/proposals/one", "refs/gitmem/proposals/two"):
        git(store.path, "update-ref", name, tip)
    git(store.path, "pack-refs", "--all")
    _kill_git_holding(Path(store.path), tmp_path, "-d", "refs/gitmem/proposals/two")
    packed_lock = Path(store.path) / "packed-refs.lock"
    assert packed_lock.exists()
    with pytest.raises(ConflictError, match="packed-refs.lock"):
        reflocks.delete_ref(store.core.repo, "refs/gitmem/proposals/one")  # young: a live git's
    assert packed_lock.exists()
    new = Path(store.path) / "packed-refs.new"  # git writes it (O_EXCL) under the lock: left too
    assert new.exists()
    _age(packed_lock)
    _age(new)
    reflocks.delete_ref(store.core.repo, "refs/gitmem/proposals/one")
    assert store.core.repo.references.get("refs/gitmem/proposals/one") is None
    assert not packed_lock.exists() and not new.exists()
    _age(Path(store.path) / "refs/gitmem/proposals/two.lock")
    reflocks.delete_ref(store.core.repo, "refs/gitmem/proposals/two")
    assert store.core.repo.references.get("refs/gitmem/proposals/two") is None
    packing = git(store.path, "pack-refs", "--all", check=False)
    assert packing.returncode == 0, packing.stderr
    _verified(store)


def test_a_rewrites_branch_lock_is_never_broken(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A redaction holds ``refs/heads/<scope>.lock`` across its flushes (sync_all, the journal, the
    receipts): on a loaded disk for seconds. Before: a writer waiting on it took it as a crashed
    writer's after two seconds and removed it, and the redaction failed (FileNotFoundError) or,
    with a second writer's lock in its place, renamed that writer's lock over the branch."""
    secret = store.write("/a.md", "secret\n")
    assert secret is not None and store.write("/a.md", "clean\n") is not None
    held = threading.Event()
    real = journal.receipts.carry

    def slow_carry(core: object, commit_map: object) -> int:  # the flushes of a loaded disk
        held.set()
        time.sleep(3 * reflocks.STALE_REF_LOCK_SECONDS)
        return real(core, commit_map)  # type: ignore[arg-type]

    monkeypatch.setattr(journal.receipts, "carry", slow_carry)
    errors: list[BaseException] = []

    def redaction() -> None:
        try:
            redact.redact(store.core, secret.id, reason="leaked")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=redaction)
    t.start()
    assert held.wait(60)
    assert store.write("/b.md", "b\n") is not None  # waits for the redaction, then lands on top
    t.join()
    assert errors == []
    assert store.read("/a.md").content == "clean\n"
    assert [m.path for m in store.list("/")] == ["/a.md", "/b.md"]
    _verified(store)


def test_breakers_take_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Breaker A removed the stale lock and a live writer made a new one while breaker B was
    between its look and its rename: B must not touch the live one (before, B renamed it aside
    and linked it back, and a third writer's lock made in that window was then renamed over the
    ref by the live writer)."""
    refs = tmp_path / "refs" / "heads"
    refs.mkdir(parents=True)
    lock = refs / "g.lock"
    lock.write_text("stale\n")
    _age(lock)
    (tmp_path / "gitmem").mkdir()
    turn = os.open(tmp_path / "gitmem" / reflocks.BREAK_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(turn, fcntl.LOCK_EX)  # breaker A's turn
    renamed: list[str] = []
    real_rename = os.rename

    def rename(src: str, dst: str) -> None:
        renamed.append(src)
        real_rename(src, dst)

    monkeypatch.setattr(reflocks.os, "rename", rename)
    out: list[bool] = []
    b = threading.Thread(target=lambda: out.append(reflocks.break_if_stale(tmp_path, "refs/heads/g")))
    b.start()
    time.sleep(0.2)  # B has looked (stale) and waits for its turn
    lock.unlink()  # A removed the stale one ...
    lock.write_text("live\n")  # ... and a live writer made its own
    ino = lock.stat().st_ino
    fcntl.flock(turn, fcntl.LOCK_UN)
    os.close(turn)
    b.join()
    assert out == [False]
    assert renamed == []
    assert lock.read_text() == "live\n" and lock.stat().st_ino == ino


def test_a_lock_dated_ahead_of_the_clock_is_stale(store: Store) -> None:
    """A lock whose time is far ahead (the clock was set back after the crash) was never old
    enough: the scope stayed wedged until the clock caught up."""
    assert store.write("/a.md", "a\n") is not None
    lock = Path(store.path) / "refs" / "heads" / "main.lock"
    lock.write_text("")
    ahead = time.time() + 3600
    os.utime(lock, (ahead, ahead))
    assert store.write("/b.md", "b\n") is not None
    assert not lock.exists()


def test_no_lock_is_broken_while_another_process_rewrites(store: Store) -> None:
    """The store lock held exclusively by another process (a redaction's swap): a stale-looking
    branch lock is left to it."""
    assert store.write("/a.md", "a\n") is not None
    lock = Path(store.path) / "refs" / "heads" / "main.lock"
    lock.write_text("")
    _age(lock)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\nsys.stdin.read()\n",
            str(Path(store.path) / "gitmem" / "lock"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert reflocks.break_if_stale(store.path, "refs/heads/main") is False
        assert lock.exists()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait()
    assert reflocks.break_if_stale(store.path, "refs/heads/main") is True
    assert not lock.exists()
    assert isinstance(store.core.tip("main"), pygit2.Oid)


def test_a_redaction_gets_past_a_killed_gits_branch_lock(store: Store, tmp_path: Path) -> None:
    """Before: the redaction waited 20 s for the branch lock, then failed ('stays locked; ... remove
    it'), every time, until some writer of the scope removed it."""
    secret = store.write("/a.md", "secret\n")
    assert secret is not None and store.write("/a.md", "clean\n") is not None
    tip = store.core.tip("main")
    assert tip is not None
    _kill_git_holding(
        Path(store.path), tmp_path, "refs/heads/main", str(store.core.commit(tip).parents[0].id)
    )
    lock = Path(store.path) / "refs" / "heads" / "main.lock"
    _age(lock)
    redact.redact(store.core, secret.id, reason="leaked")
    assert not lock.exists()
    assert store.read("/a.md").content == "clean\n"
    assert store.write("/b.md", "b\n") is not None
    _verified(store)


def _killed_config_write(store: Store) -> Path:
    """``config.lock`` as a git or libgit2 config write killed before its rename leaves it: the
    new config, part written, under the lock (created O_EXCL), dated as time would make it."""
    lock = Path(store.path) / "config.lock"
    fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, (Path(store.path) / "config").read_bytes()[:20])
    os.close(fd)
    _age(lock)
    return lock


def test_a_killed_config_writes_lock_is_removed(store: Store, tmp_path: Path) -> None:
    """Before: every later config write failed for good, libgit2's (``gitmem hooks install``, a
    replica's setup: a raw GitError 'failed to lock file') and git's (``git remote add`` of
    ``gitmem replica add``: 'could not lock config file')."""
    from gitmem.push import hookinstall, replica

    git(store.path, "config", "--unset", "receive.fsckObjects")  # (an unchanged value is not written)
    lock = _killed_config_write(store)
    hookinstall.install_hooks(Path(store.path))
    assert not lock.exists()
    assert git(store.path, "config", "--bool", "receive.fsckObjects").stdout.strip() == "true"
    lock = _killed_config_write(store)
    mirror = tmp_path / "mirror.git"
    git(tmp_path, "init", "-q", "--bare", str(mirror))
    replica.add_replica(store.core, str(mirror), "copy")
    assert not lock.exists()
    assert git(store.path, "config", "remote.copy.url").stdout.strip() == str(mirror)
    _verified(store)


def test_a_live_config_lock_is_waited_for_not_removed(store: Store) -> None:
    from gitmem.git.configwrite import set_config

    lock = Path(store.path) / "config.lock"
    lock.write_text("held\n")
    released: list[bool] = []

    def holder() -> None:
        time.sleep(0.3)
        lock.unlink()  # raises if the config write took the lock away from its holder
        released.append(True)

    t = threading.Thread(target=holder)
    t.start()
    try:
        set_config(store.core.repo, {"gitmem.test": "after the holder"})
    finally:
        t.join()
    assert released == [True]
    assert git(store.path, "config", "gitmem.test").stdout.strip() == "after the holder"


def test_a_breaker_stopped_in_its_turn_does_not_hang_the_others(store: Store) -> None:
    """A breaker SIGSTOPped while it holds its turn (``gitmem/ref-break.lock``, held for a few
    syscalls): before, every other breaker waited on it for as long as it stayed stopped, so every
    writer that met a held ref lock hung. Now a turn is waited for up to the stale age; meanwhile
    nothing is broken, and once the stopped one is gone the stale lock goes."""
    assert store.write("/a.md", "a\n") is not None
    lock = Path(store.path) / "refs" / "heads" / "main.lock"
    lock.write_text("")
    _age(lock)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, signal, sys\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\n"
            "os.kill(os.getpid(), signal.SIGSTOP)\n",
            str(Path(store.path) / "gitmem" / reflocks.BREAK_LOCK_FILE),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    out: list[bool] = []
    breaker = threading.Thread(
        target=lambda: out.append(reflocks.break_if_stale(store.path, "refs/heads/main"))
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        breaker.start()
        breaker.join(30 * reflocks.STALE_REF_LOCK_SECONDS)  # a bounded wait, scaled to the stale age
        assert not breaker.is_alive(), "the breaker waits for a stopped breaker's turn for good"
        assert out == [False] and lock.exists()
    finally:
        holder.kill()
        holder.wait()
        breaker.join()
    assert reflocks.break_if_stale(store.path, "refs/heads/main") is True
    assert store.write("/b.md", "b\n") is not None
