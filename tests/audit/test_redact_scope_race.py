"""A write of redacted bytes to a scope outside the redaction, racing that redaction's purge
(docs/redaction.md#by-scope, gitmem.audit.purge_order): the write is accepted (the writer learns
nothing of the other scope), reads back, and no ref ever points at a blob the purge removed:
``git fsck --full`` and ``gitmem verify`` stay clean, and main refuses the bytes still."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import gitmem
from gitmem.audit import purge_order
from gitmem.audit.verify import verify
from gitmem.engine import ledger
from gitmem.errors import ForbiddenError
from gitmem.git import intent
from gitmem.store import Store
from tests.helpers import CheckedThread, git, join_all, patience


def _clean(path: Path) -> None:
    fsck = git(path, "fsck", "--full", "--strict", "--no-dangling", check=False)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    with gitmem.open_store(str(path)) as store:
        report = verify(store.core, raise_on_failure=False)
        assert report.ok, [c for c in report.checks if not c.ok]


def test_the_barrier_waits_for_a_publish_that_checked_before_it(store: Store) -> None:
    # A publish holds the intent log shared from its check to its ref move: a barrier taken while
    # it is between the two returns only once the ref moved.
    seen: list[object] = []
    entered = threading.Event()

    def barrier() -> None:
        entered.set()
        intent.barrier(store.core)
        seen.append(store.core.tip("main"))

    t = CheckedThread(barrier)

    def check() -> bool:
        t.start()
        assert entered.wait(patience(30) - time.monotonic())
        t.join(0.5)  # (a barrier that does not wait returns meanwhile: seen[0] is the old tip)
        return True

    from gitmem.git import repo as gitrepo

    publish = gitrepo.Repo.publish

    def checked(self: gitrepo.Repo, *args: Any, **kwargs: Any) -> bool:
        if self is store.core and not t.is_alive() and not seen and kwargs.get("check") is not None:
            kwargs["check"] = check
        return publish(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gitrepo.Repo, "publish", checked)
        v = store.write("/a.md", "one\n")
    join_all([t])
    assert v is not None and seen == [store.core.tip("main")]


def test_a_write_that_checked_before_the_deny_list_entry_lands_before_the_purge_reads_the_refs(
    workspace: Path,
) -> None:
    # Main's redaction is past its swap; a write of the same bytes to team checks the deny-list
    # (nothing yet) where the barrier orders it; then the redaction deny-lists the bytes and, before
    # that write's ref moves, would read the refs and purge: without the barrier it found team
    # without the blob, removed the copy the write had stored, and team's new commit pointed at it
    # (fsck: missing blob). Now the purge waits for that write, finds team reaching the blob, and
    # keeps it; the redaction succeeds without a word about team. (The write's index record is
    # left to the catch-up, as when staging it fails: the index transaction would otherwise hold
    # the redaction's index step back too, by accident.)
    secret = "token sk-live-race-0001\n"
    store = gitmem.create_store("notes", home=workspace)
    leaked = store.write("/secret", secret)
    store.write("/secret", "rotated\n")
    store.write("/seed", "team seed\n", scope="team")
    assert leaked is not None
    at_deny, checked, settling, refs_read = (threading.Event() for _ in range(4))
    refs_read_at: list[object] = []
    deny, settle, held = ledger.deny, purge_order.settle, purge_order.held_elsewhere

    def deny_after_the_check(s: Any, *args: Any, **kwargs: Any) -> int:
        if s is not store.core and not at_deny.is_set():
            at_deny.set()
            assert checked.wait(patience(60) - time.monotonic())
        return deny(s, *args, **kwargs)

    def settle_seen(s: Any) -> None:
        settling.set()
        settle(s)

    def held_elsewhere(s: Any, blobs: list[str]) -> set[str]:
        refs_read_at.append(s.tip("team"))
        refs_read.set()
        return held(s, blobs)

    def redact() -> None:
        with gitmem.open_store(str(store.path)) as other:
            other.redact(leaked.id, reason="leaked")

    racer = CheckedThread(redact)

    def check_then_race(check: Any) -> Any:
        def run() -> bool:
            ok = check()  # before the deny-list entry: nothing to refuse
            checked.set()
            assert settling.wait(patience(60) - time.monotonic())
            refs_read.wait(2.0)  # (with no barrier the purge reads the refs meanwhile)
            return bool(ok)

        return run

    from gitmem.git import repo as gitrepo

    publish = gitrepo.Repo.publish

    def raced(self: gitrepo.Repo, ref: str, *args: Any, **kwargs: Any) -> bool:
        if self is store.core and ref == "refs/heads/team" and not checked.is_set() and kwargs.get("check"):
            kwargs["check"] = check_then_race(kwargs["check"])
        return publish(self, ref, *args, **kwargs)

    def no_stage(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("not staged here")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ledger, "deny", deny_after_the_check)
        mp.setattr(purge_order, "settle", settle_seen)
        mp.setattr(purge_order, "held_elsewhere", held_elsewhere)
        mp.setattr(gitrepo.Repo, "publish", raced)
        racer.start()
        assert at_deny.wait(patience(60) - time.monotonic())
        mp.setattr(store.core.index, "stage", no_stage)
        v = store.write("/guess", secret, scope="team")
        join_all([racer])
    assert v is not None and refs_read_at == [store.core.tip("team")]
    assert store.read("/guess", scope="team").content == secret
    with pytest.raises(ForbiddenError, match="redacted"):
        store.write("/again", secret)
    store.close()
    _clean(store.path)


@pytest.mark.parametrize("writers", [2])
def test_writes_of_the_redacted_bytes_to_team_racing_many_redactions_of_main(
    workspace: Path, writers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each round: main holds a fresh secret (then a newer version); one thread redacts it, and
    # once it is past its plan (its journal written) `writers` threads, each with its own handle,
    # write the same bytes to team again and again until the redaction is done (and twice more).
    # Every redaction succeeds (no complaint about team), every team write is accepted and reads
    # back, main refuses the bytes afterwards, and fsck and verify are clean after all rounds.
    from gitmem.audit import journal

    store = gitmem.create_store("notes", home=workspace)
    store.write("/seed", "team seed\n", scope="team")
    handles = [gitmem.open_store(str(store.path)) for _ in range(writers + 1)]
    planned = threading.Event()
    write_journal = journal._write_journal

    def journal_written(*args: Any) -> None:
        write_journal(*args)
        planned.set()

    monkeypatch.setattr(journal, "_write_journal", journal_written)
    rounds = 6
    for n in range(rounds):
        secret = f"token sk-live-round-{n:04d}\n"
        v = store.write("/secret", secret)
        store.write("/secret", f"rotated {n}\n")
        assert v is not None
        planned.clear()
        done = threading.Event()
        wrote: list[tuple[str, str]] = []

        def redact(version: str = v.id, done: threading.Event = done) -> None:
            try:
                handles[-1].redact(version, reason="leaked")
            finally:
                done.set()

        def write(
            k: int, text: str = secret, n: int = n, done: threading.Event = done, wrote: list[Any] = wrote
        ) -> None:
            assert planned.wait(patience(60) - time.monotonic()) or done.is_set()
            i = 0
            while not done.is_set() or i < 2:
                path = f"/r{n}/w{k}-{i}"
                assert handles[k].write(path, text, scope="team") is not None
                wrote.append((path, text))
                i += 1

        threads = [CheckedThread(redact)] + [CheckedThread(write, (k,)) for k in range(writers)]
        for t in threads:
            t.start()
        join_all(threads)
        for path, text in wrote:
            assert store.read(path, scope="team").content == text
        with pytest.raises(ForbiddenError, match="redacted"):
            store.write("/again", secret)
    for h in handles:
        h.close()
    store.close()
    _clean(store.path)


_WRITER = """
import sys, time, pathlib, gitmem
path, text, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
gitdir = pathlib.Path(path)
journal, done = gitdir / "gitmem" / "journal.json", gitdir / (prefix.strip("/") + ".done")
with gitmem.open_store(path) as store:
    print("ready", flush=True)
    while not journal.exists() and not done.exists():
        time.sleep(0.001)
    i = 0
    while not done.exists() or i < 2:
        assert store.write(f"{prefix}-{i}", text, scope="team") is not None
        print(f"{prefix}-{i}", flush=True)
        i += 1
"""


def test_writer_processes_racing_redactions_of_main(workspace: Path) -> None:
    # The same across processes: two writer processes, each once the redaction is past its plan
    # (its journal there), write the bytes to team until it is done.
    store = gitmem.create_store("notes", home=workspace)
    store.write("/seed", "team seed\n", scope="team")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for n in range(3):
        secret = f"token sk-live-proc-{n:04d}\n"
        v = store.write("/secret", secret)
        store.write("/secret", f"rotated {n}\n")
        assert v is not None
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _WRITER, str(store.path), secret, f"/p{n}w{k}"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            for k in range(2)
        ]
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "ready\n"
        try:
            store.redact(v.id, reason="leaked")
        finally:
            for k in range(2):
                (store.path / f"p{n}w{k}.done").touch()
        wrote = []
        for p in procs:
            out, err = p.communicate(timeout=patience(120) - time.monotonic())
            assert p.returncode == 0, err
            wrote += out.split()[1:]
        for path in wrote:
            assert store.read(path, scope="team").content == secret
        with pytest.raises(ForbiddenError, match="redacted"):
            store.write("/again", secret)
    store.close()
    _clean(store.path)
