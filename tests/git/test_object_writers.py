"""The per-thread object writers (gitmem.git.packwriter: a single write's loose writer, a group's or
a batch's staging pack) against what a store handle's life and git maintenance do to them."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pygit2
import pytest

import gitmem
from gitmem.engine.batch import BatchOp, apply_batch
from gitmem.errors import ForbiddenError, GitmemError
from gitmem.git import refmove
from gitmem.store import Store
from tests.helpers import git


def test_a_store_handle_closed_then_used_again_still_writes(workspace: Path) -> None:
    # Before: close() freed the thread's loose writer and staging repositories, which have no path
    # to reopen their object database from; the next write on the same thread failed with a raw
    # pygit2 NotFoundError 'path cannot exist in repository' (a plain repository reopens lazily).
    store = gitmem.create_store("notes", home=workspace)
    store.write("/memories/a.md", "one\n")
    apply_batch(store.core, [BatchOp("write", f"/memories/b{k}.md", f"batch {k}\n") for k in range(3)])
    store.close()
    assert store.write("/memories/a.md", "two\n") is not None
    done = apply_batch(store.core, [BatchOp("write", f"/memories/b{k}.md", f"again {k}\n") for k in range(3)])
    assert len(done.versions) == 3
    assert store.read("/memories/a.md").content == "two\n"
    assert store.read("/memories/b2.md").content == "again 2\n"
    store.close()
    assert git(store.path, "fsck", "--full", "--strict").returncode == 0


# A writer process: single writes (some putting back content the store already has, which the loose
# writer writes again) and small batches (a staged pack, again with old content), acknowledging each
# version id as soon as its call returned.
WRITER = r"""
import sys
import gitmem
from gitmem.engine.batch import BatchOp, apply_batch
path, me, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = gitmem.open_store(path)
def ack(v):
    sys.stdout.write(v.id + "\n")
    sys.stdout.flush()
for k in range(rounds):
    ack(store.write(f"/{me}/m{k % 5}", f"{me} round {k}\n"))
    ack(store.write(f"/{me}/old", "the same old content\n" if k % 2 else "seed\n"))
    ops = [BatchOp("write", f"/{me}/b{j}", f"{me} batch {k % 3} {j}\n") for j in range(3)]
    ops.append(BatchOp("write", f"/{me}/back", "seed\n" if k % 2 else f"{me} back {k}\n"))
    for v in apply_batch(store.core, ops).versions:
        ack(v)
"""

# git maintenance as cron or another tool would run it beside the writers: loose objects packed and
# their copies and directories pruned, packs merged, a lone prune-packed.
MAINTAIN = r"""
import subprocess, sys
path = sys.argv[1]
n = 0
while True:
    n += 1
    args = [["repack", "-d", "-q"], ["prune-packed"], ["repack", "-A", "-d", "-q"], ["repack", "-d", "-q", "--geometric=2"]]
    subprocess.run(["git", f"--git-dir={path}", *args[n % 4]], capture_output=True)
"""


def _wait_for_group_gone(pgid: int, timeout: float = 10.0) -> None:
    """Until no process of group ``pgid`` runs any more (zombies waiting to be reaped do not)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = False
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                live = True
                break
        if not live:
            return
        time.sleep(0.01)
    raise AssertionError(f"process group {pgid} still running")


def test_writers_beside_git_maintenance_and_a_kill_lose_nothing(workspace: Path) -> None:
    import subprocess
    import sys

    from gitmem.audit.verify import verify

    with gitmem.create_store("busy", home=workspace) as store:
        store.write("/seed", "seed\n")
        store.write("/same", "the same old content\n")
        path = str(store.path)
    # Its own process group: killed, it must take the git it is running along (an orphaned repack
    # would go on renaming packs under the checks below).
    maintainer = subprocess.Popen([sys.executable, "-c", MAINTAIN, path], start_new_session=True)
    acked: list[str] = []
    try:
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, path, f"w{i}", "25"], stdout=subprocess.PIPE, text=True
            )
            for i in range(2)
        ]
        victim = subprocess.Popen(
            [sys.executable, "-c", WRITER, path, "victim", "1000"], stdout=subprocess.PIPE, text=True
        )
        assert victim.stdout is not None
        for _ in range(40):  # killed mid-way, in a single write or a batch
            line = victim.stdout.readline().strip()
            assert line, "the victim stopped before it was killed"
            acked.append(line)
        victim.send_signal(signal.SIGKILL)
        acked += [line for line in victim.communicate()[0].splitlines() if line]
        for w in writers:
            out, _ = w.communicate()
            assert w.returncode == 0
            acked += out.split()
    finally:
        os.killpg(maintainer.pid, signal.SIGKILL)
        maintainer.wait()
        _wait_for_group_gone(maintainer.pid)
    fsck = git(Path(path), "fsck", "--full", "--strict", "--no-dangling", check=False)
    if fsck.returncode != 0:  # the whole story, to find which write lost what
        refs = git(Path(path), "for-each-ref", "--format=%(refname) %(objectname)", check=False).stdout
        packs = sorted(os.listdir(Path(path) / "objects" / "pack"))
        raise AssertionError(f"fsck:\n{fsck.stdout}{fsck.stderr}\nrefs:\n{refs}\npacks: {packs}")
    with gitmem.open_store(path) as store:
        report = verify(store.core, raise_on_failure=False)
        assert report.ok, [c for c in report.checks if not c.ok]
        for vid in acked:
            v = store.version(vid)
            assert store.read(v.path, version=vid).content
        assert store.read("/w1/old").content in ("seed\n", "the same old content\n")
        assert store.write("/after", "a write after it all\n") is not None


SECRET = "token sk-live-0123456789\n"


def _redact_while_building(monkeypatch: pytest.MonkeyPatch, store: gitmem.Store, version: str) -> list[str]:
    """Run a redaction of ``version`` (another handle, another thread) once, while this thread's
    next write is between its plan (the deny-list checked) and its pack: at its first commit."""
    from gitmem.git import repo as gitrepo

    done: list[str] = []
    create = gitrepo.Repo.create_commit

    def create_commit(self: gitrepo.Repo, *args: Any, **kwargs: Any) -> pygit2.Oid:
        out = create(self, *args, **kwargs)
        if not done and self is store.core:
            done.append("redacting")

            def redact() -> None:
                with gitmem.open_store(str(store.path)) as other:
                    done.append(other.redact(version, reason="leaked").id)

            t = threading.Thread(target=redact)
            t.start()
            t.join()
        return out

    monkeypatch.setattr(gitrepo.Repo, "create_commit", create_commit)
    return done


def _check_clean(path: Path, *, team_holds_it: bool = False) -> None:
    """git fsck and gitmem verify clean; the redacted bytes gone from disk, unless scope team
    (outside the redaction of main) holds them: then they read back there."""
    from gitmem.audit.verify import verify

    fsck = git(path, "fsck", "--full", "--strict", "--no-dangling", check=False)
    assert fsck.returncode == 0, fsck.stderr
    with gitmem.open_store(str(path)) as store:
        report = verify(store.core, raise_on_failure=False)
        assert report.ok, report
        assert (str(pygit2.hash(SECRET.encode())) in store.core.repo) is team_holds_it
        if team_holds_it:
            assert store.read("/restored", scope="team").content == SECRET
        with pytest.raises(ForbiddenError, match="redacted"):
            store.write("/again", SECRET)  # main refuses it still


@pytest.mark.parametrize("scope", ["main", "team"])
def test_a_batch_that_staged_content_a_redaction_then_purged_does_not_write_it_back(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, scope: str
) -> None:
    # Before: the batch planned (the deny-list did not name the content yet), staged the old
    # content again (the staging repository writes objects the store has), a redaction of that
    # content ran to its end, then the batch wrote its pack: the redacted blob was back on disk
    # (verify: "deny-listed objects are still in the store"), and in another scope the batch's
    # commit made it live again. (Before the staging wrote copies, that blob was not staged at
    # all and the batch's commit pointed at a purged object: fsck failed.) Now the batch checks the
    # deny-list again before it writes its pack and re-plans: in main (the scope redacted) that
    # write is refused; in team (outside the redaction) it is written again, after the purge,
    # under the purge lock, and reads back (docs/redaction.md#by-scope).
    store = gitmem.create_store("notes", home=workspace)
    leaked = store.write("/secret", SECRET)
    assert leaked is not None
    store.write("/secret", "rotated\n")
    store.write("/other", "team seed\n", scope="team")
    assert git(store.path, "repack", "-a", "-d", "-q").returncode == 0  # the content lives in a pack
    done = _redact_while_building(monkeypatch, store, leaked.id)
    ops = [BatchOp("write", "/restored", SECRET), BatchOp("write", "/fine", "fine\n")]
    if scope == "main":
        with pytest.raises(ForbiddenError, match="redacted"):
            apply_batch(store.core, ops, scope=scope)
        assert len(done) == 2  # the redaction ran, in the middle of the batch
        result = apply_batch(store.core, ops, scope=scope, skip_refused=True)
        assert [v.path for v in result.versions] == ["/fine"] and len(result.refused) == 1
    else:
        result = apply_batch(store.core, ops, scope=scope)
        assert len(done) == 2
        assert sorted(v.path for v in result.versions) == ["/fine", "/restored"] and not result.refused
    store.close()
    _check_clean(store.path, team_holds_it=scope == "team")


@pytest.mark.parametrize("scope", ["main", "team"])
@pytest.mark.parametrize("pack_min", [1, 2])
def test_a_write_that_stored_content_a_redaction_then_purged_does_not_publish_it(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, pack_min: int, scope: str
) -> None:
    # The same through a group commit: its staged pack (PACK_MIN 1: a lone write is staged too),
    # or a lone write's loose objects (the copy it wrote was purged: before, the branch then
    # pointed at a missing blob). In team the write is made again after the purge and succeeds.
    from gitmem.engine import pipeline

    monkeypatch.setattr(pipeline, "PACK_MIN", pack_min)
    store = gitmem.create_store("notes", home=workspace)
    leaked = store.write("/secret", SECRET)
    assert leaked is not None
    store.write("/secret", "rotated\n")
    store.write("/other", "team seed\n", scope="team")
    assert git(store.path, "repack", "-a", "-d", "-q").returncode == 0
    done = _redact_while_building(monkeypatch, store, leaked.id)
    if scope == "main":
        with pytest.raises(ForbiddenError, match="redacted"):
            store.write("/restored", SECRET)
    else:
        assert store.write("/restored", SECRET, scope="team") is not None
    assert len(done) == 2
    store.close()
    _check_clean(store.path, team_holds_it=scope == "team")


def test_the_writers_find_a_stored_object_by_a_short_id(tmp_path: Path) -> None:
    # Before: the read-through backend answered a short id with the short id itself as the
    # object's id, and libgit2 failed the read ("object hash mismatch - expected 119cc6df72000...").
    from gitmem.git.packwriter import Staging, loose_writer

    path = tmp_path / "r.git"
    raw = pygit2.init_repository(str(path), bare=True)
    blob = raw.create_blob(b"packed blob\n")
    tree = raw.TreeBuilder()
    tree.insert("m.md", blob, pygit2.enums.FileMode.BLOB)
    tree_id = tree.write()
    assert git(path, "update-ref", "refs/tags/t", str(tree_id)).returncode == 0
    assert git(path, "repack", "-a", "-d", "-q").returncode == 0  # only in a pack now
    stage = Staging(raw.path)
    for repo in (loose_writer(str(path / "objects")), stage.repo):
        assert repo[str(blob)[:10]].id == blob
        assert repo.revparse_single(str(tree_id)[:12]).id == tree_id
        with pytest.raises(KeyError):
            repo["deadbeef00"]


def test_a_ref_move_looks_again_for_a_target_a_pack_swap_hid(store: Store) -> None:
    """libgit2 checks that a ref's new target exists and lists the pack directory once more on a
    miss; a repack or merge in another process swapping packs during that listing can hide an
    object that is on disk. cas looks again (a few times) instead of failing the write; a target
    that really is missing still fails, naming the ref."""
    store.write("/a.md", "one\n")
    core = store.core
    tip = core.tip("main")
    assert tip is not None
    calls = []

    def hidden_once(repo: pygit2.Repository) -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise pygit2.GitError("target OID for the reference doesn't exist on the repository")
        return True

    assert refmove.seen_target(core, tip, hidden_once) is True
    assert len(calls) == 2
    missing = pygit2.Oid(hex="1" * 40)
    with pytest.raises(GitmemError, match="cannot update refs/heads/main"):
        core.cas("refs/heads/main", tip, missing)
    assert core.tip("main") == tip
