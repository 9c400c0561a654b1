"""Probe: a path redaction against the audit ledger's proposal decisions. docs/redaction.md: a
``--pattern`` matches memory paths too ("per-user files named by e-mail address are common") and
erasure reaches "the ledger (digests only)"; its purge proof (``prove_purged(secrets=...)``) is the
one check behind "purge verified". A path that went through review is named in plain text by the
``proposal_accepted`` / ``proposal_rejected`` ledger entries, which a redaction never rewrites, and
the ledger ref travels to every clone and every ``/git`` reader."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import gitmem
from gitmem.audit.purge_proof import prove_purged
from gitmem.model.caller import Caller

EMAIL = "alice.client@example.com"


def _propose(s: gitmem.Store, path: str) -> str:
    agent = Caller(actor="user:agent", session="sesn_agent1", review=True, rights=frozenset({"write"}))
    s.write(path, "Prefers e-mail contact.\n", caller=agent)
    (p,) = [p for p in s.proposals() if p.status == "open"]
    return p.id


@pytest.mark.xfail(
    strict=True,
    reason="gitmem/audit/review.py (_accept/_reject) writes proposal paths in plain text into the "
    "ledger; gitmem/audit/redact.py's path redaction leaves them, so the purge proof finds them",
)
@pytest.mark.parametrize("decision", ["accepted"])
def test_a_redacted_path_is_gone_from_the_ledger(workspace: Path, decision: str) -> None:
    with gitmem.create_store("notes", home=workspace) as s:
        s.write("/keep.md", "kept\n", actor="user:alice")
        pid = _propose(s, f"/people/{EMAIL}.md")
        if decision == "accepted":
            s.accept(pid, reviewer="user:lead")
            s.delete(f"/people/{EMAIL}.md", actor="user:alice")
        else:
            s.reject(pid, reviewer="user:lead", reason="not needed")
        s.redact_pattern(r"alice\.client@example\.com", reason="GDPR erasure request")
        assert all(EMAIL not in v.path for v in s.versions())
        repo = s.path
    ledger = subprocess.run(
        ["git", "--git-dir", str(repo), "log", "-p", "--format=%H %B", "refs/gitmem/ledger"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert EMAIL not in ledger, "the redacted path is in the ledger (refs/gitmem/ledger), which clones get"
    proof = prove_purged(repo, secrets=[EMAIL.encode()])
    assert not proof.found_secrets, f"the redacted address is still in the store: {proof}"


@pytest.mark.xfail(
    strict=True,
    reason="gitmem/audit/redact.py (redact_pattern) matches paths on the index's version rows only, "
    "so a path only a proposal holds is 'matches no version' though docs/redaction.md says a pattern "
    "finds what only a proposal holds",
)
def test_a_path_only_a_proposal_holds_can_be_redacted(workspace: Path) -> None:
    with gitmem.create_store("notes", home=workspace) as s:
        s.write("/keep.md", "kept\n", actor="user:alice")
        pid = _propose(s, f"/people/{EMAIL}.md")
        s.reject(pid, reviewer="user:lead", reason="not needed")
        s.redact_pattern(r"alice\.client@example\.com", reason="GDPR erasure request")
        repo = s.path
    proof = prove_purged(repo, secrets=[EMAIL.encode()])
    assert not proof.found_secrets, f"the address is still in the store: {proof}"
