"""Erasing a proposal: a secret (or poisoned text) in a rejected proposal leaves the store now,
provably, with a ledger entry; the scope and other proposals are untouched."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pygit2
import pytest
from typer.testing import CliRunner

from gitmem.audit import review
from gitmem.audit.verify import verify
from gitmem.cli.app import app
from gitmem.engine import ledger, proposals
from gitmem.errors import ConflictError, ForbiddenError, InvalidInputError
from gitmem.store import Store
from tests.secret_scan import scan_store

A, B = "sesn_agent_a", "sesn_agent_b"
SECRET = b"vault combination 31-41-59-26"


@pytest.fixture
def gated(store: Store) -> Store:
    store.write("/base.md", "one\n", actor="user:alice")
    store.update_settings(acl={"review": {"main": ["session:*"]}})
    return store


def fsck(store: Store) -> None:
    res = subprocess.run(
        ["git", f"--git-dir={store.path}", "fsck", "--full"], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_erase_purges_what_only_the_proposal_holds(gated: Store) -> None:
    gated.write("/leak.md", SECRET.decode() + "\n", session=A)
    gated.write("/dup.md", "one\n", session=A)  # the blob of the scope's /base.md: shared, must stay
    gated.write("/other.md", "b's note\n", session=B)
    pa, pb = proposals.proposals(gated.core)
    assert scan_store(gated.path, SECRET) != []
    with pytest.raises(ForbiddenError):
        review.erase(gated.core, pa.id, reviewer="session:" + A, reason="mine")
    with pytest.raises(InvalidInputError):
        review.erase(gated.core, pa.id, reviewer="user:rev", reason=" ")
    e = review.erase(gated.core, pa.id, reviewer="user:rev", reason="a secret")
    assert e.purged > 0 and len(e.versions) == 2
    assert scan_store(gated.path, SECRET) == []
    p = proposals.get(gated.core, pa.id)
    assert (p.status, p.erased) == ("rejected", e.id)
    assert pa.ref not in pygit2.Repository(str(gated.path)).references
    entry = ledger.find(gated.core, "proposal_erased", "id", e.id)
    assert entry is not None and entry.actor == "user:rev" and entry.data["proposal"] == pa.id
    assert SECRET.decode() not in str(entry.data)
    assert gated.read("/base.md").content == "one\n"  # the scope keeps its blob
    assert gated.read("/other.md", session=B).content == "b's note\n"  # another proposal untouched
    with pytest.raises(ConflictError, match="already erased"):
        review.erase(gated.core, pa.id, reviewer="user:rev", reason="again")
    fsck(gated)
    verify(gated.core)


def test_the_erased_content_cannot_come_back(gated: Store, tmp_path: Path) -> None:
    gated.write("/leak.md", SECRET.decode() + "\n", session=A)
    (p,) = proposals.proposals(gated.core)
    review.erase(gated.core, p.id, reviewer="user:rev", reason="a secret")
    with pytest.raises(ForbiddenError, match="redacted from the store"):
        gated.write("/leak.md", SECRET.decode() + "\n", actor="user:alice")
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", str(gated.path), str(work)], check=True)
    (work / "leak.md").write_bytes(SECRET + b"\n")
    subprocess.run(["git", "-C", str(work), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(work), "commit", "-qm", "back"], check=True)
    push = subprocess.run(["git", "-C", str(work), "push", "origin", "main"], capture_output=True, text=True)
    assert push.returncode != 0 and "remote: gitmem:" in push.stderr and "redacted" in push.stderr, (
        push.stderr
    )
    assert scan_store(gated.path, SECRET) == []


def test_cli_erase(gated: Store, workspace: Path) -> None:
    gated.write("/leak.md", SECRET.decode() + "\n", session=A)
    (p,) = proposals.proposals(gated.core)
    res = CliRunner().invoke(
        app,
        [
            "review",
            "erase",
            "notes",
            p.id,
            "--reason",
            "secret",
            "--actor",
            "user:rev",
            "--home",
            str(workspace),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "erased as redact_" in res.output
    assert scan_store(gated.path, SECRET) == []


def test_an_interrupted_erase_is_finished_by_the_next(gated: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    gated.write("/leak.md", SECRET.decode() + "\n", session=A)
    (p,) = proposals.proposals(gated.core)
    import gitmem.git.purge as purge_mod

    def boom(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt  # as if killed between the ref deletion and the purge

    monkeypatch.setattr(purge_mod, "purge", boom)
    with pytest.raises(KeyboardInterrupt):
        review.erase(gated.core, p.id, reviewer="user:rev", reason="a secret")
    monkeypatch.undo()
    assert not verify(gated.core, raise_on_failure=False).ok  # deny-listed objects still readable
    review.erase(gated.core, p.id, reviewer="user:rev", reason="a secret")
    assert scan_store(gated.path, SECRET) == []
    verify(gated.core)
    fsck(gated)


def test_a_reviewer_in_the_proposing_session_cannot_decide(gated: Store) -> None:
    gated.write("/x.md", "from a\n", session=A)
    (p,) = proposals.proposals(gated.core)
    for decide in (
        lambda: review.accept(gated.core, p.id, reviewer="user:other", session=A),
        lambda: review.reject(gated.core, p.id, reviewer="user:other", reason="no", session=A),
        lambda: review.erase(gated.core, p.id, reviewer="user:other", reason="no", session=A),
    ):
        with pytest.raises(ForbiddenError, match="cannot review it"):
            decide()
    assert proposals.get(gated.core, p.id).status == "open"
    review.accept(gated.core, p.id, reviewer="user:other", session=B)  # another session may
    assert gated.read("/x.md").content == "from a\n"


def test_a_write_planned_before_an_erase_never_revives_the_proposal(
    gated: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An erase lands between a proposal write's plan and its publish (another reviewer, another
    process): the write goes to a new proposal, the erased one stays erased, its ref stays gone."""
    import gitmem.engine.pipeline as batch_mod

    gated.write("/leak.md", SECRET.decode() + "\n", session=A)
    (p,) = proposals.proposals(gated.core)
    real = batch_mod.write_chain
    erased: list[str] = []

    def write_then_erase(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)  # the write's objects exist; its publish has not run yet
        if not erased:
            erased.append(review.erase(gated.core, p.id, reviewer="user:rev", reason="secret").id)
        return out

    monkeypatch.setattr(batch_mod, "write_chain", write_then_erase)
    gated.write("/late.md", "late note\n", session=A)
    monkeypatch.undo()
    assert erased
    old = proposals.get(gated.core, p.id)
    assert (old.status, old.erased) == ("rejected", erased[0])
    assert p.ref not in pygit2.Repository(str(gated.path)).references
    (new,) = proposals.proposals(gated.core, status="open")
    assert new.id != p.id and gated.read("/late.md", session=A).content == "late note\n"
    assert scan_store(gated.path, SECRET) == []
    verify(gated.core)
