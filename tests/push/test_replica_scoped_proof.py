"""The purge proof of a replica (gitmem.push.replica.prove_replica) by scope (docs/redaction.md#by-scope):
another scope's legitimate copy of a redacted blob excuses it on the replica only while no branch of
a scope the redaction rewrote (main) reaches it there. ``gitmem verify``, a copy's purge
(gitmem.audit.copy_purge) and the replica's proof ask one function which deny-listed blobs a copy
may hold (gitmem.engine.denylist.excused), so they agree on every state of a copy."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import gitmem
from gitmem.audit import redact
from gitmem.audit.copy_purge import purge_and_prove
from gitmem.audit.verify import verify
from gitmem.git.files import blob_id
from gitmem.push.replica import prove_replica
from gitmem.store import Store

SECRET = "hunter2 is the replica password\n"


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _redact_main(store: Store) -> None:
    v = store.write("/pw.md", SECRET, actor="user:alice")
    store.write("/pw.md", "rotated\n", actor="user:alice")
    assert v is not None
    redact.redact(store.core, v.id, reason="leak", actor="user:admin")


def _replica_with_team_copy(store: Store, tmp_path: Path) -> Path:
    _redact_main(store)
    store.write("/guess.md", SECRET, scope="team", actor="user:bob")  # team's own content
    replica = tmp_path / "replica.git"
    subprocess.run(["git", "clone", "-q", "--mirror", str(store.path), str(replica)], check=True)
    return replica


def _main_reaches_team(repo: Path) -> None:
    """Main's branch there holds the bytes again (a plain ``git update-ref``, no hook)."""
    _git("update-ref", "refs/heads/main", _git("rev-parse", "refs/heads/team", cwd=repo), cwd=repo)
    assert SECRET.strip() in _git("show", "refs/heads/main:guess.md", cwd=repo)


def test_a_replica_holding_only_teams_copy_is_proved(store: Store, tmp_path: Path) -> None:
    replica = _replica_with_team_copy(store, tmp_path)
    assert prove_replica(store.path, str(replica)) == ""


def test_a_replica_whose_main_reaches_the_redacted_blob_is_not_proved(store: Store, tmp_path: Path) -> None:
    # Before: the proof subtracted every blob another scope (team) reaches on the replica, also
    # where the replica's main reached it again; verify and a copy's purge did not excuse it.
    replica = _replica_with_team_copy(store, tmp_path)
    _main_reaches_team(replica)
    reason = prove_replica(store.path, str(replica))
    assert reason.startswith("the purge of the replica is not proved")
    assert blob_id(SECRET.encode()) in reason


def _copy_in(store: Store, tmp_path: Path, state: str) -> Path:
    """A copy of the store's repository (its refs, objects and deny-list: a replica the store's
    proof, verify and a copy's purge can each look at) in ``state``."""
    _redact_main(store)
    if state != "clean":
        store.write("/guess.md", SECRET, scope="team", actor="user:bob")
    copy = tmp_path / "copy.git"
    shutil.copytree(store.path, copy, ignore=shutil.ignore_patterns("*.lock"))
    if state == "main re-reaching the blob":
        _main_reaches_team(copy)
    return copy


@pytest.mark.parametrize(
    ("state", "proved"),
    [("clean", True), ("only team holding the blob", True), ("main re-reaching the blob", False)],
)
def test_verify_the_copy_purge_and_the_replica_proof_agree(
    store: Store, tmp_path: Path, state: str, proved: bool
) -> None:
    copy = _copy_in(store, tmp_path, state)
    blob = blob_id(SECRET.encode())
    held = subprocess.run(["git", "cat-file", "-e", blob], cwd=copy, check=False).returncode == 0
    assert held == (state != "clean")
    with gitmem.open_store(str(copy)) as c:
        report = verify(c.core, raise_on_failure=False)
    [purged] = [ch for ch in report.checks if ch.name == "redactions purged"]
    assert not purged.skipped
    replica_proof = prove_replica(store.path, str(copy))
    copy_proof = purge_and_prove(copy)
    assert (purged.ok, replica_proof == "", copy_proof == "") == (proved, proved, proved), (
        purged.detail,
        replica_proof,
        copy_proof,
    )
    if not proved:  # each for the blob main reaches, not for some other reason
        assert "deny-listed (redacted or retired) objects are still in the store" in purged.detail
        assert blob in replica_proof and blob in copy_proof
    if held:  # team's content is never purged, excused or not
        assert SECRET.strip() in _git("show", "refs/heads/team:guess.md", cwd=copy)
