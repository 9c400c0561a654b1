"""The engine's lock order (docs/durability.md#lock-order) on the review paths: an erase
(gitmem.audit.purge_order.erasing) holds the store lock, the purge lock, then ``proposals.lock``; an
accept takes the purge lock shared before ``proposals.lock`` (one decision at a time), so the
commit of a proposal whose content another scope's redaction deny-listed (gitmem.engine.pipeline,
``needs_purge_lock``) waits for nothing an erase holds. It took them the other way round: run at
once in two processes, each waited for the other's lock forever. The guard (gitmem.git.locks)
raises when a thread asks for a lock out of that order, before it waits."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gitmem.audit import redact, review
from gitmem.engine import proposals
from gitmem.engine.writer import store_bytes_lock
from gitmem.git.locks import LockOrderError, held_locks, proposals_lock, purge_lock
from gitmem.store import Store
from tests.helpers import patience

SECRET = "hunter2 is the proposal password\n"

# Pauses in the decision (under proposals.lock) until the erase asked for the purge lock and the
# purge lock is held: by the erase (which can take it while the accept does not hold it), or by
# this accept (which took it first): a probe of the lock on a fresh file (flock conflicts across
# open files, also of one process) says when.
ACCEPT = """
import fcntl, os, sys, time, pathlib, gitmem
from gitmem.audit import review
flags = pathlib.Path(sys.argv[2])
store = gitmem.open_store(sys.argv[1])
lock = store.core.path / "gitmem" / "purge.lock"
diff = review.diff
def paused(*a, **k):
    (flags / "accept_holds_proposals_lock").touch()
    while not (flags / "erase_wants_purge_lock").exists():
        time.sleep(0.01)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                break
            fcntl.flock(fd, fcntl.LOCK_UN)
            time.sleep(0.01)
    finally:
        os.close(fd)
    return diff(*a, **k)
review.diff = paused
review.accept(store.core, sys.argv[3], reviewer="user:rev")
print("accepted")
"""

ERASE = """
import sys, time, pathlib, contextlib, gitmem
from gitmem.audit import purge_order, review
flags = pathlib.Path(sys.argv[2])
while not (flags / "accept_holds_proposals_lock").exists():
    time.sleep(0.01)
purging = purge_order.purging
@contextlib.contextmanager
def seen(store):
    (flags / "erase_wants_purge_lock").touch()
    with purging(store):
        (flags / "erase_holds_purge_lock").touch()
        yield
purge_order.purging = seen
store = gitmem.open_store(sys.argv[1])
review.erase(store.core, sys.argv[3], reviewer="user:rev", reason="erase it")
print("erased")
"""


def test_an_accept_of_content_redacted_elsewhere_and_an_erase_at_once_both_finish(
    store: Store, tmp_path: Path
) -> None:
    _race(store, tmp_path, SECRET)


def test_control_an_accept_of_other_content_and_an_erase_at_once_both_finish(
    store: Store, tmp_path: Path
) -> None:
    _race(store, tmp_path, "nothing redacted anywhere\n")


def test_an_accept_of_content_redacted_elsewhere_keeps_the_lock_order(store: Store) -> None:
    pa, _pb = _proposals(store, SECRET)
    done = review.accept(store.core, pa.id, reviewer="user:rev")  # the guard raised before the fix
    assert [v.path for v in done.versions] == ["/guess.md"]
    assert store.read("/guess.md", scope="team").content == SECRET
    assert held_locks() == ()


def test_a_lock_asked_for_out_of_order_raises_before_it_waits(store: Store) -> None:
    git_dir = store.core.path
    with proposals_lock(git_dir):
        assert held_locks() == ("proposals",)
        with (
            pytest.raises(
                LockOrderError, match="purge lock was asked for while this thread holds the proposals"
            ),
            purge_lock(git_dir, shared=True),
        ):
            pass
        assert held_locks() == ("proposals",)  # the refused lock is not counted
    with (
        store_bytes_lock(store.core),
        pytest.raises(LockOrderError, match="holds the store-bytes lock"),
        purge_lock(git_dir, shared=True),
    ):
        pass
    assert held_locks() == ()
    with purge_lock(git_dir), proposals_lock(git_dir), store_bytes_lock(store.core):  # in order
        assert held_locks() == ("purge", "proposals", "store-bytes")
    assert held_locks() == ()


def test_the_order_is_kept_per_thread(store: Store) -> None:
    git_dir = store.core.path
    holding, done = threading.Event(), threading.Event()

    def other() -> None:
        with proposals_lock(git_dir):
            holding.set()
            done.wait()

    t = threading.Thread(target=other)
    t.start()
    try:
        assert holding.wait(timeout=max(1.0, patience(30) - time.monotonic()))
        with purge_lock(git_dir, shared=True):  # another thread's proposals.lock: not this one's
            assert held_locks() == ("purge",)
    finally:
        done.set()
        t.join()


def _proposals(store: Store, proposed: str) -> tuple[proposals.Proposal, proposals.Proposal]:
    v = store.write("/pw.md", SECRET, actor="user:alice")
    store.write("/pw.md", "rotated\n", actor="user:alice")
    assert v is not None
    redact.redact(store.core, v.id, reason="leak", actor="user:admin")
    store.write("/seed.md", "team seed\n", scope="team", actor="user:alice")
    store.update_settings(acl={"review": {"team": ["session:*"]}})
    store.write("/guess.md", proposed, scope="team", session="sesn_a")  # team's own content, proposed
    store.write("/other.md", "b's note\n", scope="team", session="sesn_b")
    pa, pb = sorted(proposals.proposals(store.core, scope="team"), key=lambda p: p.session or "")
    assert (pa.session, pb.session) == ("sesn_a", "sesn_b")
    return pa, pb


def _race(store: Store, tmp_path: Path, proposed: str) -> None:
    pa, pb = _proposals(store, proposed)
    flags = tmp_path / "flags"
    flags.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(store.path), str(flags), pid],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for script, pid in ((ACCEPT, pa.id), (ERASE, pb.id))
    ]
    deadline = patience(30)  # a deadlock never ends; a slow run ends in seconds
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.05)
    hung = [p for p in procs if p.poll() is None]
    for p in hung:
        p.kill()
    outs = [p.communicate() for p in procs]
    assert (flags / "erase_wants_purge_lock").exists()  # the erase asked while the accept decided
    assert not hung, f"{len(hung)} of the two processes never finished: {outs}"
    assert [out.strip() for out, _err in outs] == ["accepted", "erased"], outs
    assert (flags / "erase_holds_purge_lock").exists()
    assert store.read("/guess.md", scope="team").content == proposed
