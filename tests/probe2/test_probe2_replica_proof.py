"""The purge proof of a replica (gitmem.push.replica.prove_replica) against a replica whose branch
of the redacted scope reaches the redacted blob again, while another scope there legitimately holds
the same bytes (docs/redaction.md#by-scope: no other scope's copy excuses the redacted scope)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gitmem.audit import redact
from gitmem.push.replica import prove_replica
from gitmem.store import Store

SECRET = "hunter2 is the replica password\n"


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _replica_with_team_copy(store: Store, tmp_path: Path) -> Path:
    v = store.write("/pw.md", SECRET, actor="user:alice")
    store.write("/pw.md", "rotated\n", actor="user:alice")
    assert v is not None
    redact.redact(store.core, v.id, reason="leak", actor="user:admin")
    store.write("/guess.md", SECRET, scope="team", actor="user:bob")  # team's own content
    replica = tmp_path / "replica.git"
    subprocess.run(["git", "clone", "-q", "--mirror", str(store.path), str(replica)], check=True)
    return replica


def test_a_replica_holding_only_teams_copy_is_proved(store: Store, tmp_path: Path) -> None:
    replica = _replica_with_team_copy(store, tmp_path)
    assert prove_replica(store.path, str(replica)) == ""


@pytest.mark.xfail(
    strict=True,
    reason="prove_replica subtracts readmitted() but not leaked(): team's copy excuses the blob even "
    "where the replica's main reaches it (copy_purge and verify subtract leaked)",
)
def test_a_replica_whose_main_reaches_the_redacted_blob_is_not_proved(store: Store, tmp_path: Path) -> None:
    replica = _replica_with_team_copy(store, tmp_path)
    team = _git("rev-parse", "refs/heads/team", cwd=replica)
    _git("update-ref", "refs/heads/main", team, cwd=replica)  # main's branch there holds the bytes again
    assert SECRET.strip() in _git("show", "refs/heads/main:guess.md", cwd=replica)
    assert prove_replica(store.path, str(replica)) != ""
