"""Who may read a proposal. docs/access.md ("Who receives which refs") says the APIs, MCP and the
console give a proposal only to its proposer and to reviewers, and ``/git`` hides
``refs/gitmem/proposals/*`` from read-only and ``--review`` tokens. The review API's read endpoints
and the console's review pages keep the same rule (one engine check,
``gitmem.engine.access.may_see_proposal``): a read-only token or another review token is no
reviewer, and a proposal it may not read answers exactly as an unknown one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from serverkit import client, running, token

import gitmem
from gitmem.engine import access
from gitmem.model.caller import Caller
from tests.consolekit import sign_in

UNREVIEWED = "unreviewed draft: the merger closes on Friday\n"
UNKNOWN = "prop_01ZZZZZZZZZZZZZZZZZZZZZZZZ"


@pytest.fixture
def env(workspace: Path) -> Iterator[dict[str, Any]]:
    with gitmem.create_store("notes", home=workspace) as s:
        s.write("/keep.md", "kept\n", actor="user:alice")
    gitmem.create_store("other", home=workspace).close()
    agent = token(workspace, actor="user:agent", stores={"notes": "rw"}, review=True)
    peer = token(workspace, actor="user:peer", stores={"notes": "rw"}, review=True)
    reader = token(workspace, actor="user:ro", stores={"notes": "ro"})
    reviewer = token(workspace, actor="user:rev", stores={"notes": "rw"})
    # read-only here, read-write on another store: its default ``review`` right is not for this one
    elsewhere = token(workspace, actor="user:else", stores={"notes": "ro", "other": "rw"})
    with running(workspace) as url:
        a = client(url, agent)
        sid = next(s for s in a.beta.memory_stores.list() if s.name == "notes").id
        a.beta.memory_stores.memories.create(sid, path="/draft.md", content=UNREVIEWED)
        with gitmem.open_store("notes", workspace) as s:
            (p,) = s.proposals()
        yield {
            "url": url,
            "agent": agent,
            "peer": peer,
            "reader": reader,
            "reviewer": reviewer,
            "elsewhere": elsewhere,
            "pid": p.id,
        }


def _get(env: dict[str, Any], who: str, tail: str = "") -> httpx.Response:
    return httpx.get(
        f"{env['url']}/v1/gitmem/stores/notes/proposals{tail}",
        headers={"authorization": f"Bearer {env[who]}"},
        timeout=30,
    )


@pytest.mark.parametrize("who", ["reader", "peer", "elsewhere"])
def test_a_non_reviewer_cannot_read_another_callers_proposal(env: dict[str, Any], who: str) -> None:
    leaked = []
    for tail in ("", f"/{env['pid']}", f"/{env['pid']}/diff"):
        r = _get(env, who, tail)
        if r.status_code == 200 and (env["pid"] in r.text or "merger closes" in r.text):
            leaked.append(tail or "list")
    assert leaked == [], f"a {who} token read the proposal through: {leaked}"


@pytest.mark.parametrize("who", ["reader", "peer", "elsewhere"])
def test_a_proposal_it_may_not_read_answers_as_an_unknown_one(env: dict[str, Any], who: str) -> None:
    for tail in ("", "/diff"):
        known = _get(env, who, f"/{env['pid']}{tail}")
        unknown = _get(env, who, f"/{UNKNOWN}{tail}")
        assert known.status_code == unknown.status_code == 404, (known.text, unknown.text)
        k, u = known.json()["error"], unknown.json()["error"]  # (each reply has its own request id)
        assert k["type"] == u["type"] and k["message"].replace(env["pid"], "X") == u["message"].replace(
            UNKNOWN, "X"
        )
    assert _get(env, who).json() == {"data": []}


@pytest.mark.parametrize("who", ["agent", "reviewer"])
def test_the_proposer_and_a_reviewer_read_it(env: dict[str, Any], who: str) -> None:
    listed = _get(env, who)
    assert listed.status_code == 200 and env["pid"] in listed.text, listed.text
    shown = _get(env, who, f"/{env['pid']}")
    assert shown.status_code == 200 and "/draft.md" in shown.text, shown.text
    diff = _get(env, who, f"/{env['pid']}/diff")
    assert diff.status_code == 200 and "merger closes" in diff.text, diff.text


@pytest.mark.parametrize("who", ["reader", "peer"])
def test_the_console_keeps_the_same_rule(env: dict[str, Any], who: str) -> None:
    with sign_in(env["url"], env[who]) as c:
        page = c.get(f"/console/stores/notes/proposals/{env['pid']}")
        unknown = c.get(f"/console/stores/notes/proposals/{UNKNOWN}")
        assert page.status_code == unknown.status_code == 404, page.text[:300]
        listing = c.get("/console/stores/notes/proposals")
        assert listing.status_code == 200
        assert env["pid"] not in listing.text and "/draft.md" not in listing.text
    with sign_in(env["url"], env["reviewer"]) as c:
        page = c.get(f"/console/stores/notes/proposals/{env['pid']}")
        assert page.status_code == 200 and "merger closes" in page.text


def test_the_engine_rule(workspace: Path) -> None:
    """The one check below every face: proposer (by owner or actor), reviewer, the scope."""
    with gitmem.create_store("notes", home=workspace) as s:
        proposer = Caller(actor="user:p", session="sesn_p", review=True)
        s.write("/d.md", "draft\n", caller=proposer)
        (p,) = s.proposals()
        core = s._core
        sid = s.settings.id
        same_actor = Caller(actor="user:p", session="sesn_other", review=True)
        reviewer = Caller(actor="user:r", stores={sid: "rw"})
        reader = Caller(actor="user:ro", stores={sid: "ro"}, rights=frozenset())
        peer = Caller(actor="user:q", stores={sid: "rw"}, review=True, rights=frozenset({"write"}))
        other_scope = Caller(actor="user:t", stores={sid: "rw"}, scope="team")
        assert access.may_see_proposal(core, None, p)
        for c in (proposer, same_actor, reviewer):
            assert access.may_see_proposal(core, c, p), c
            assert [x.id for x in s.proposals(caller=c)] == [p.id]
        for c in (reader, peer, other_scope):
            assert not access.may_see_proposal(core, c, p), c
            assert s.proposals(caller=c) == []
            with pytest.raises(gitmem.NotFoundError) as got:
                s.proposal_diff(p.id, caller=c)
            with pytest.raises(gitmem.NotFoundError) as unknown:
                s.proposal(UNKNOWN, caller=c)
            assert got.value.message.replace(p.id, "X") == unknown.value.message.replace(UNKNOWN, "X")


@pytest.mark.parametrize("who", ["reader", "elsewhere", "reviewer"])
def test_git_hides_the_proposal_refs_by_the_same_rule(env: dict[str, Any], who: str) -> None:
    """``/git`` (real ``git ls-remote``): the proposal refs go to reviewers of this store only; a
    token read-write on another store and read-only here does not receive them."""
    import subprocess

    out = subprocess.run(
        [
            "git",
            "-c",
            f"http.extraHeader=Authorization: Bearer {env[who]}",
            "ls-remote",
            f"{env['url']}/git/notes.git",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"GIT_TERMINAL_PROMPT": "0", "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
    )
    assert out.returncode == 0, out.stderr
    assert "refs/heads/main" in out.stdout
    assert ("refs/gitmem/proposals/" in out.stdout) == (who == "reviewer")
