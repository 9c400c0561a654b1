"""Review-gated writes (issue 19): writes in review mode land as proposals on
refs/gitmem/proposals/<scope>/<id>; the proposer reads its own changes, others do not; a reviewer
accepts part and rejects part; conflicts are reported with a three-way diff; redaction and
retention reach proposals."""

from __future__ import annotations

import json
import random
import string
import time
from pathlib import Path
from typing import Any

import pygit2
import pytest
from typer.testing import CliRunner

from gitmem.audit import review
from gitmem.cli.app import app
from gitmem.engine import ledger, proposals
from gitmem.engine.batch import BatchOp, apply_batch
from gitmem.errors import ConflictError, ForbiddenError, GuardRejectedError, LimitExceededError, NotFoundError
from gitmem.model.caller import Caller
from gitmem.store import Store

A, B = "sesn_agent_a", "sesn_agent_b"


@pytest.fixture
def gated(store: Store) -> Store:
    store.write("/base.md", "one\ntwo\nthree\n", actor="user:alice")
    store.write("/keep.md", "kept\n", actor="user:alice")
    store.update_settings(acl={"review": {"main": ["session:*"]}})
    return store


def refs(store: Store) -> dict[str, str]:
    repo = pygit2.Repository(str(store.path))
    return {n: str(repo.references[n].target) for n in repo.references}


def test_review_mode_proposes_reads_see_own_accept_part_reject_part(gated: Store) -> None:
    tip = gated.core.tip("main")
    va = gated.write("/a.md", "from a\n", session=A)
    gated.str_replace("/base.md", "two", "TWO", session=A)
    gated.write("/b.md", "from b\n", session=B)
    assert gated.core.tip("main") == tip  # nothing published
    assert {m.path for m in gated.list()} == {"/base.md", "/keep.md"}

    # the proposer sees its proposal on top of the scope; others (and other sessions) do not
    assert gated.read("/a.md", session=A).content == "from a\n"
    assert gated.read("/base.md", session=A).content == "one\nTWO\nthree\n"
    assert gated.read("/keep.md", session=A).content == "kept\n"
    assert gated.read("/base.md").content == "one\ntwo\nthree\n"
    with pytest.raises(NotFoundError):
        gated.read("/a.md", session=B)
    with pytest.raises(NotFoundError):
        gated.read("/a.md")
    assert (
        gated.read("/a.md", caller=Caller(actor=None, session=A, review=True, local=True)).content
        == "from a\n"
    )

    (pa,) = [p for p in proposals.proposals(gated.core) if p.owner == A]
    assert pa.ref.startswith("refs/gitmem/proposals/main/prop_") and pa.ref in refs(gated)
    shown = proposals.versions(gated.core, pa.id)
    assert [(v.path, v.operation, v.actor, v.session) for v in shown] == [
        ("/a.md", "created", f"session:{A}", A),
        ("/base.md", "modified", f"session:{A}", A),
    ]
    assert shown[0].id == va.id
    diffs = {d.path: d for d in review.diff(gated.core, pa.id)}
    assert {p: d.status for p, d in diffs.items()} == {"/a.md": "clean", "/base.md": "clean"}
    assert "+TWO" in diffs["/base.md"].diff and "-two" in diffs["/base.md"].diff

    accepted = review.accept(gated.core, pa.id, reviewer="user:rev", paths=["/a.md"])
    (published,) = accepted.versions
    assert (published.path, published.actor, published.session) == ("/a.md", f"session:{A}", A)
    assert published.memory_id == va.memory_id  # the proposed memory keeps its id
    commit = gated.core.repo[pygit2.Oid(hex=published.commit)]
    assert "Gitmem-Reviewed-By: user:rev" in commit.message
    assert gated.read("/a.md").content == "from a\n"
    assert proposals.get(gated.core, pa.id).status == "open"  # /base.md still undecided

    closed = review.reject(gated.core, pa.id, reviewer="user:rev", reason="keep two lower-case")
    assert closed.status == "accepted"  # every path decided; part of it was accepted
    assert gated.read("/base.md").content == "one\ntwo\nthree\n"
    kinds = [(e.kind, e.actor, e.data.get("proposer")) for e in ledger.entries(gated.core)]
    assert ("proposal_accepted", "user:rev", f"session:{A}") in kinds
    assert ("proposal_rejected", "user:rev", f"session:{A}") in kinds
    reject_entry = ledger.entries(gated.core, kind="proposal_rejected")[-1]
    assert reject_entry.data["reason"] == "keep two lower-case" and reject_entry.data["path_digests"] == [
        ledger.digest(gated.core, "/base.md")
    ]

    # B's proposal is untouched and separate; rejecting it whole
    (pb,) = proposals.proposals(gated.core, status="open")
    assert pb.owner == B
    assert review.reject(gated.core, pb.id, reviewer="user:rev", reason="no").status == "rejected"
    assert "/b.md" not in {m.path for m in gated.list()}
    # a new write by A after its proposal closed starts a new proposal
    gated.write("/later.md", "x\n", session=A)
    (again,) = proposals.proposals(gated.core, status="open")
    assert again.owner == A and again.id != pa.id


def test_conflicting_proposal_is_reported_with_three_way_and_nothing_lost(gated: Store) -> None:
    gated.str_replace("/base.md", "two", "two (agent)", session=A)
    gated.str_replace("/base.md", "two", "two (alice)", actor="user:alice")  # not in review mode: published
    (p,) = proposals.proposals(gated.core)
    (d,) = review.diff(gated.core, p.id)
    assert d.status == "conflict"
    assert d.base == "one\ntwo\nthree\n" and d.current == "one\ntwo (alice)\nthree\n"
    assert d.proposed == "one\ntwo (agent)\nthree\n"
    assert (
        "<<<<<<< scope" in d.three_way and "||||||| base" in d.three_way and ">>>>>>> proposal" in d.three_way
    )
    before = refs(gated)
    with pytest.raises(ConflictError, match="conflicts"):
        review.accept(gated.core, p.id, reviewer="user:rev")
    assert refs(gated) == before
    assert gated.read("/base.md", session=A).content == "one\ntwo (agent)\nthree\n"
    assert gated.read("/base.md").content == "one\ntwo (alice)\nthree\n"


def test_proposals_obey_limits_guard_batches_and_renames(gated: Store) -> None:
    gated.update_settings(limits=gated.settings.limits.__class__(max_memory_bytes=64))
    with pytest.raises(LimitExceededError):
        gated.write("/big.md", "x" * 100, session=A)
    rng = random.Random(3)
    token = "gh" + "p_" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(33)) + "a1Z"
    with pytest.raises(GuardRejectedError):
        gated.write("/s.md", f"token {token}\n", session=A)
    assert proposals.proposals(gated.core)[0].owner == A  # the proposal exists, empty
    assert proposals.versions(gated.core, proposals.proposals(gated.core)[0].id) == []
    result = apply_batch(
        gated.core,
        [
            BatchOp("write", "/n1.md", "1\n"),
            BatchOp("write", "/n2.md", "x" * 100),
            BatchOp("rename", "/keep.md", new_path="/kept.md"),
        ],
        session=A,
        skip_refused=True,
    )
    assert [v.path for v in result.versions] == ["/n1.md", "/kept.md"]
    assert [r.op.path for r in result.refused] == ["/n2.md"]
    assert {m.path for m in gated.list()} == {"/base.md", "/keep.md"}
    kept_id = gated.read("/keep.md").memory_id
    (p,) = proposals.proposals(gated.core)
    accepted = review.accept(gated.core, p.id, reviewer="user:rev")
    assert sorted(accepted.paths) == ["/keep.md", "/kept.md", "/n1.md"]
    assert {m.path for m in gated.list()} == {"/base.md", "/kept.md", "/n1.md"}
    assert gated.read("/kept.md").memory_id == kept_id  # the rename kept the memory
    assert proposals.get(gated.core, p.id).status == "accepted"


def test_redaction_purges_a_secret_in_a_proposal(gated: Store) -> None:
    gated.update_settings(guard={"secrets": "off"})
    secret = "hunter" + "2" * 3 + "-sesame"
    gated.write("/leak.md", f"pw {secret}\n", session=A)
    (p,) = proposals.proposals(gated.core)
    review.accept(gated.core, p.id, reviewer="user:rev")
    published = gated.versions(path="/leak.md")[0]
    gated.write("/more.md", "more\n", session=A)  # a new proposal, on top of the secret's history
    gated.write("/leak.md", "clean\n", actor="user:alice")
    gated.write("/leak.md", f"pw {secret}\n", session=B)  # a proposal holding the secret itself
    gated.write("/leak.md", "clean again\n", session=B)
    open_before = {
        q.id: proposals.versions(gated.core, q.id) for q in proposals.proposals(gated.core, status="open")
    }
    from gitmem.audit import redact

    redact.redact(gated.core, published.id, reason="leaked", actor="user:rev")
    odb = pygit2.Odb(str(gated.path / "objects"))
    blobs = [odb.read(oid)[1] for oid in odb if odb.read(oid)[0] == pygit2.enums.ObjectType.BLOB]
    assert not any(secret.encode() in data for data in blobs)
    for q in proposals.proposals(gated.core, status="open"):  # the proposals survive, rewritten
        assert [v.id for v in proposals.versions(gated.core, q.id)] == [v.id for v in open_before[q.id]]
    assert gated.read("/leak.md", session=B).content == "clean again\n"
    assert gated.read("/more.md", session=A).content == "more\n"


def test_rejected_proposals_are_dropped_after_min_days(gated: Store) -> None:
    gated.write("/x.md", "x\n", session=A)
    gated.write("/y.md", "y\n", session=B)
    pa, pb = proposals.proposals(gated.core)
    review.reject(gated.core, pa.id, reviewer="user:rev", reason="no")
    assert proposals.drop_expired(gated.core) == []  # kept for retention.min_days
    later = time.time() + (gated.settings.retention.min_days + 1) * 86400
    assert proposals.drop_expired(gated.core, now=later) == [pa.id]
    assert pa.ref not in refs(gated) and pb.ref in refs(gated)  # the open one stays
    with pytest.raises(NotFoundError):
        proposals.get(gated.core, pa.id)
    review.reject(gated.core, pb.id, reviewer="user:rev", reason="no")
    from gitmem.audit.retention import prune

    assert prune(gated.core, now=int(later)).dropped_proposals == [pb.id]
    assert proposals.proposals(gated.core) == []


def test_cli_review_list_show_diff_accept_reject(gated: Store, tmp_path: Path) -> None:
    gated.write("/a.md", "from a\n", session=A)
    gated.write("/c.md", "from a too\n", session=A)
    runner = CliRunner()
    out = runner.invoke(app, ["review", "list", "notes", "--json"])
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.stdout)
    pid = row["id"]
    assert row["owner"] == A and row["status"] == "open" and row["paths"] == ["/a.md", "/c.md"]
    show = runner.invoke(app, ["review", "show", "notes", pid])
    assert show.exit_code == 0 and "/a.md" in show.stdout and f"session:{A}" in show.stdout
    diff = runner.invoke(app, ["review", "diff", "notes", pid])
    assert diff.exit_code == 0 and "+from a" in diff.stdout
    acc = runner.invoke(app, ["review", "accept", "notes", pid, "--path", "/a.md", "--actor", "user:rev"])
    assert acc.exit_code == 0, acc.output
    rej = runner.invoke(
        app, ["review", "reject", "notes", pid, "--reason", "not needed", "--actor", "user:rev"]
    )
    assert rej.exit_code == 0, rej.output
    assert {m.path for m in gated.list()} == {"/a.md", "/base.md", "/keep.md"}
    again = runner.invoke(app, ["review", "accept", "notes", pid, "--actor", "user:rev"])
    assert again.exit_code == 4
    missing = runner.invoke(app, ["review", "show", "notes", "prop_01M8RNZSHGPWZCMSYBKAMQYCT7"])
    assert missing.exit_code == 3


def test_session_mount_in_review_mode(gated: Store, tmp_path: Path) -> None:
    from gitmem import sessions

    gated.update_settings(acl={})  # only the mount asks for review
    sess = sessions.start_session(["notes:review"], root=tmp_path / "mnt")
    other = sessions.start_session(["notes"], root=tmp_path / "other")
    assert "reviewed" in (tmp_path / "mnt" / "SYSTEM_PROMPT.md").read_text()
    mine = tmp_path / "mnt" / "notes"
    (mine / "idea.md").write_text("proposed idea\n")
    (mine / "base.md").write_text("one\ntwo\nthree\nfour\n")
    tip = gated.core.tip("main")
    report = sessions.sync_session(sess.id).mounts[0]
    assert sorted(v.path for v in report.versions) == ["/base.md", "/idea.md"]
    assert gated.core.tip("main") == tip
    assert (mine / "idea.md").read_text() == "proposed idea\n"  # the mount keeps the proposal
    assert sessions.sync_session(sess.id).mounts[0].versions == []  # nothing new to propose
    sessions.sync_session(other.id)
    assert not (tmp_path / "other" / "notes" / "idea.md").exists()
    (p,) = proposals.proposals(gated.core)
    assert p.owner == sess.id
    review.accept(gated.core, p.id, reviewer="user:rev", paths=["/idea.md"])
    sessions.sync_session(other.id)
    assert (tmp_path / "other" / "notes" / "idea.md").read_text() == "proposed idea\n"
    assert (tmp_path / "other" / "notes" / "base.md").read_text() == "one\ntwo\nthree\n"


def test_review_token_and_review_api(gated: Store, workspace: Path) -> None:
    anthropic = pytest.importorskip("anthropic")
    import httpx2 as httpx
    from serverkit import client, running, token

    gated.update_settings(acl={})
    agent = token(workspace, actor="user:agent", stores={"notes": "rw"}, review=True)
    admin = token(workspace, actor="user:rev", admin=True)
    with running(workspace) as url:
        c = client(url, agent)
        sid = next(s for s in c.beta.memory_stores.list() if s.name == "notes").id
        c.beta.memory_stores.memories.create(sid, path="/from-api.md", content="proposed over http\n")
        assert "/from-api.md" not in {m.path for m in gated.list()}
        base = f"{url}/v1/gitmem/stores/notes/proposals"
        listed = httpx.get(base, headers={"x-api-key": admin}).json()["data"]
        (p,) = listed
        assert p["owner"] == "user:agent" and p["paths"] == ["/from-api.md"]
        diff = httpx.get(f"{base}/{p['id']}/diff", headers={"x-api-key": admin}).json()["data"]
        assert diff[0]["status"] == "clean" and "+proposed over http" in diff[0]["diff"]
        refused = httpx.post(f"{base}/{p['id']}/accept", headers={"x-api-key": agent}, json={})
        assert refused.status_code == 403
        bad = httpx.post(f"{base}/{p['id']}/accept", headers={"x-api-key": admin}, json={"paths": "nope"})
        assert bad.status_code == 400
        ok = httpx.post(f"{base}/{p['id']}/accept", headers={"x-api-key": admin}, json={"reason": "fine"})
        assert ok.status_code == 200, ok.text
        assert ok.json()["proposal"]["status"] == "accepted"
        missing = httpx.get(f"{base}/prop_01M8RNZSHGPWZCMSYBKAMQYCT7", headers={"x-api-key": admin})
        assert missing.status_code == 404
    assert anthropic is not None
    v = gated.versions(path="/from-api.md")[0]
    assert v.actor == "user:agent"
    assert "Gitmem-Reviewed-By: user:rev" in gated.core.repo[pygit2.Oid(hex=v.commit)].message


def test_mcp_review_and_reviewer_tools(gated: Store) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client

    from gitmem.integrations.mcp_server import ServedStore, build_server

    gated.update_settings(acl={})
    agent = build_server([ServedStore("notes", gated)], session="sesn_mcp_agent", review=True)
    rev = build_server([ServedStore("notes", gated)], session="sesn_mcp_rev", actor="user:rev", reviewer=True)

    def text(result: Any) -> str:
        assert not result.is_error, result
        return "".join(getattr(p, "text", "") for p in result.content)

    async def run() -> None:
        async with Client(agent) as a:
            text(
                await a.call_tool("write_memory", {"store": "notes", "path": "/m.md", "content": "via mcp\n"})
            )
            read = json.loads(text(await a.call_tool("read_memory", {"store": "notes", "path": "/m.md"})))
            assert read["content"] == "via mcp\n"
            names = {t.name for t in (await a.list_tools()).tools}
            assert "accept_proposal" not in names
        with pytest.raises(NotFoundError):
            gated.read("/m.md")
        async with Client(rev) as r:
            (p,) = json.loads(text(await r.call_tool("list_proposals", {"store": "notes"})))
            assert p["owner"] == "sesn_mcp_agent"
            diff = json.loads(
                text(await r.call_tool("diff_proposal", {"store": "notes", "proposal": p["id"]}))
            )
            assert diff[0]["path"] == "/m.md"
            done = json.loads(
                text(await r.call_tool("accept_proposal", {"store": "notes", "proposal": p["id"]}))
            )
            assert done["status"] == "accepted"

    anyio.run(run)
    assert gated.read("/m.md").content == "via mcp\n"
    entry = ledger.entries(gated.core, kind="proposal_accepted")[-1]
    assert entry.actor == "user:rev" and entry.data["proposer"] == "session:sesn_mcp_agent"


def test_proposers_and_reviewed_actors_cannot_decide(gated: Store) -> None:
    gated.write("/x.md", "x\n", session=A)
    (p,) = proposals.proposals(gated.core)
    before = refs(gated)
    with pytest.raises(ForbiddenError, match="cannot review it"):
        review.accept(gated.core, p.id, reviewer=f"session:{A}")
    with pytest.raises(ForbiddenError, match="review mode"):
        review.reject(gated.core, p.id, reviewer=f"session:{B}", reason="sabotage")
    assert refs(gated) == before and proposals.get(gated.core, p.id).decisions == []
