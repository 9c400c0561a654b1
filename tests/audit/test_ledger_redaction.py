"""A path redaction against the audit ledger's proposal decisions and the proposals' records.
docs/redaction.md: a ``--pattern`` matches memory paths too ("per-user files named by e-mail
address are common"), finds what only a proposal holds, and erasure reaches "the ledger (digests
only)"; its purge proof (``prove_purged(secrets=...)``) is the one check behind "purge verified".
The ledger is hash-chained and travels to every clone and ``/git`` reader, so a decision's entry
names its paths by keyed digests (docs/review.md); the audit timeline resolves them through what a
redaction scrubs (the index, the proposal's record)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import gitmem
from gitmem.audit import timeline, verify
from gitmem.audit.purge_proof import prove_purged
from gitmem.engine import ledger
from gitmem.model.caller import Caller

EMAIL = "alice.client@example.com"


def _propose(s: gitmem.Store, path: str) -> str:
    agent = Caller(actor="user:agent", session="sesn_agent1", review=True, rights=frozenset({"write"}))
    s.write(path, "Prefers e-mail contact.\n", caller=agent)
    (p,) = [p for p in s.proposals() if p.status == "open"]
    return p.id


def _ledger_text(repo: Path) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(repo), "log", "-p", "--format=%H %B", "refs/gitmem/ledger"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.mark.parametrize("decision", ["accepted", "rejected"])
def test_a_redacted_path_is_gone_from_the_ledger(workspace: Path, decision: str) -> None:
    with gitmem.create_store("notes", home=workspace) as s:
        s.write("/keep.md", "kept\n", actor="user:alice")
        pid = _propose(s, f"/people/{EMAIL}.md")
        if decision == "accepted":
            s.accept(pid, reviewer="user:lead")
            s.delete(f"/people/{EMAIL}.md", actor="user:alice")
        else:
            s.reject(pid, reviewer="user:lead", reason="not needed")
        # before the redaction the timeline still names the path, resolved from the digests
        (event,) = [e for e in timeline.audit(s.core, type=f"proposal_{decision}")]
        assert event.detail["paths"] == [f"/people/{EMAIL}.md"]
        s.redact_pattern(r"alice\.client@example\.com", reason="GDPR erasure request")
        assert all(EMAIL not in v.path for v in s.versions())
        (event,) = [e for e in timeline.audit(s.core, type=f"proposal_{decision}")]
        # resolved again: the published version's path as redacted, or nothing (the record's
        # decision no longer matches its digest)
        assert EMAIL not in repr(event.detail)
        assert all(p.startswith("/people/redacted-redact_") for p in event.detail["paths"])
        (entry,) = ledger.entries(s.core, kind=f"proposal_{decision}")
        assert len(entry.data["path_digests"]) == 1 and "paths" not in entry.data
        # the proposal's record keeps its decision, its path redacted as the chain's tree is
        (p,) = s.proposals()
        assert [d.action for d in p.decisions] == [decision]
        assert p.decisions[0].paths[0].startswith("/people/redacted-redact_")
        report = verify.verify(s.core)
        assert report.ok, report
        repo = s.path
    assert EMAIL not in _ledger_text(repo), "the redacted path is in the ledger (refs/gitmem/ledger)"
    proof = prove_purged(repo, secrets=[EMAIL.encode()])
    assert not proof.found_secrets, f"the redacted address is still in the store: {proof}"


def test_a_path_only_a_proposal_holds_can_be_redacted(workspace: Path) -> None:
    with gitmem.create_store("notes", home=workspace) as s:
        s.write("/keep.md", "kept\n", actor="user:alice")
        pid = _propose(s, f"/people/{EMAIL}.md")
        s.reject(pid, reviewer="user:lead", reason="not needed")
        red = s.redact_pattern(r"alice\.client@example\.com", reason="GDPR erasure request")
        assert red.scopes == ["main"]
        # the rejected proposal's chain was rewritten: its path is the redaction's mark now
        assert [d.path for d in s.proposal_diff(pid)] == [f"/people/redacted-{red.id}.md"]
        assert s.proposal(pid).status == "rejected"
        repo = s.path
    proof = prove_purged(repo, secrets=[EMAIL.encode()])
    assert not proof.found_secrets, f"the address is still in the store: {proof}"


def test_the_proof_reads_the_proposals_records(workspace: Path) -> None:
    """The purge proof looks in ``$GIT_DIR/gitmem/proposals/``: a decision's reason quoting a
    secret is found there, and a pattern redaction scrubs it."""
    with gitmem.create_store("notes", home=workspace) as s:
        s.write("/keep.md", "kept\n", actor="user:alice")
        pid = _propose(s, "/people/client.md")
        s.reject(pid, reviewer="user:lead", reason=f"we may not keep {EMAIL}")
        repo = s.path
        found = prove_purged(repo, secrets=[b"we may not keep"]).found_secrets
        assert any("gitmem/proposals/" in f for f in found), found
        s.write("/note.md", f"{EMAIL}\n", actor="user:alice")
        s.write("/note.md", "gone\n", actor="user:alice")
        red = s.redact_pattern(r"alice\.client@example\.com", reason="GDPR erasure request")
        assert s.proposal(pid).decisions[0].reason == f"we may not keep [redacted: {red.id}]"
    found = prove_purged(repo, secrets=[EMAIL.encode()]).found_secrets
    assert not [f for f in found if "gitmem/proposals/" in f], found


def test_a_path_an_earlier_redaction_named_is_gone_from_the_ledger(workspace: Path) -> None:
    """A redaction's entry lists its versions by id and their paths by keyed digest: a later
    pattern redaction of the path leaves no clear copy in an entry it cannot rewrite."""
    with gitmem.create_store("notes", home=workspace) as s:
        first = s.write(f"/people/{EMAIL}.md", "a secret\n", actor="user:alice")
        s.write(f"/people/{EMAIL}.md", "plain\n", actor="user:alice")
        s.redact(first.id, reason="content")
        (entry,) = ledger.entries(s.core, kind="redaction")
        assert entry.data["versions"][0]["version"] == first.id
        assert entry.data["versions"][0]["path_digest"] == ledger.digest(s.core, f"/people/{EMAIL}.md")
        s.delete(f"/people/{EMAIL}.md", actor="user:alice")
        s.redact_pattern(r"alice\.client@example\.com", reason="GDPR erasure request")
        repo = s.path
    assert EMAIL not in _ledger_text(repo)
    proof = prove_purged(repo, secrets=[EMAIL.encode()])
    assert not proof.found_secrets, proof
