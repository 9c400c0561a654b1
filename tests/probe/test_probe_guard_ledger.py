"""Probe: the secret guard against the audit ledger. The guard screens what a write stores (content,
paths, commit messages: docs/guard.md). The ledger (``refs/gitmem/ledger``) is git history that no
redaction may rewrite (it is hash-chained, checkpointed and witnessed: docs/transparency.md), and it
travels to every clone and every ``/git`` reader. Free text callers put into it (a reviewer's
rejection reason, a redaction's reason, a store's description) must be screened as a write is:
refused, or never stored in the clear."""

from __future__ import annotations

import contextlib
import random
import string
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import gitmem
from gitmem.errors import GitmemError
from gitmem.model.caller import Caller


def _fake_token(seed: int) -> str:
    """A GitHub-token-shaped string made at run time (as tests/conformance/kit.py makes them)."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    while True:
        body = "".join(rng.choice(alphabet) for _ in range(36))
        if (
            any(c.isdigit() for c in body)
            and any(c.isupper() for c in body)
            and any(c.islower() for c in body)
        ):
            return "ghp_" + body


SECRET = _fake_token(7)


def _ledger(repo: Path) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(repo), "log", "-p", "--format=%B", "refs/gitmem/ledger"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _reject(s: gitmem.Store) -> None:
    agent = Caller(actor="user:agent", session="sesn_agent1", review=True, rights=frozenset({"write"}))
    s.write("/draft.md", "draft\n", caller=agent)
    (p,) = s.proposals()
    s.reject(p.id, reviewer="user:lead", reason=f"leaks the deploy token {SECRET}")


def _redact(s: gitmem.Store) -> None:
    v = s.write("/old.md", "stale note\n", actor="user:alice")
    s.write("/old.md", "fresh note\n", actor="user:alice")
    s.redact(v.id, reason=f"it was next to {SECRET}")


def _describe(s: gitmem.Store) -> None:
    s.update_settings(actor="user:alice", description=f"deploys with {SECRET}")


@pytest.mark.xfail(
    strict=True,
    reason="free text written into the ledger (gitmem/engine/ledger.py append: proposal_rejected "
    "reason from gitmem/audit/review.py, redaction reason, settings values) is never screened by "
    "gitmem/engine/guard.py: a secret the guard refuses in a memory lands, unredactable, in the ledger",
)
@pytest.mark.parametrize(
    "how", [_reject, _redact, _describe], ids=["reject-reason", "redact-reason", "description"]
)
def test_a_secret_never_lands_in_the_ledger(workspace: Path, how: Callable[[gitmem.Store], None]) -> None:
    with gitmem.create_store("notes", home=workspace) as s:
        s.write("/keep.md", "kept\n", actor="user:alice")
        with pytest.raises(GitmemError):
            s.write("/leak.md", f"token {SECRET}\n", actor="user:alice")  # the guard holds for memories
        with contextlib.suppress(GitmemError):  # refused: the guarantee holds
            how(s)
        repo = s.path
    assert SECRET not in _ledger(repo)
