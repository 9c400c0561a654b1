"""An attacker against the finished door (docs/access.md): forged sessions, cross-scope erasure,
review escapes and resource exhaustion per token. Each test failed before its fix."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx2 as httpx
import pytest
from serverkit import running, token

import gitmem
from gitmem.audit import review
from gitmem.engine import proposals as P
from gitmem.errors import ForbiddenError, NotFoundError
from gitmem.model.caller import Caller
from gitmem.push.pushenv import push_session, session_namespace
from gitmem.sessions import revert_session
from gitmem.store import BatchOp, Store

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ACCEPT = {"accept": "application/json, text/event-stream"}
TEAM = Caller(
    actor="user:team",
    stores={"*": "rw"},
    scope="team",
    rights=frozenset({"write", "redact", "review", "erase"}),
)


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "GITMEM_"))}
    env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e.org"})
    env.update({"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e.org"})
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------------- forged sessions
def test_a_push_cannot_claim_another_tokens_session(store: Store, workspace: Path, tmp_path: Path) -> None:
    """A token without a session of its own pushing ``-o session=<another token's>`` over /git
    writes in its own namespace, never in the other token's session."""
    store.write("/seed.md", "seed\n", actor="user:seed")
    secret = token(workspace, actor="user:mallory", stores={"notes": "rw"})
    with running(workspace) as url:
        remote = f"http://x:{secret}@{url.removeprefix('http://')}/git/notes.git"
        work = tmp_path / "w"
        assert _git("clone", "-q", remote, str(work)).returncode == 0
        (work / "forged.md").write_text("mine\n")
        _git("add", "-A", cwd=work)
        assert _git("commit", "-qm", "forged", cwd=work).returncode == 0
        r = _git("push", "-q", "-o", "session=sesn_victim", "origin", "HEAD:refs/heads/main", cwd=work)
        assert r.returncode == 0, r.stderr
    [v] = store.versions("/forged.md")
    assert v.actor == "user:mallory"
    assert v.session != "sesn_victim" and v.session == f"{session_namespace('user:mallory')}.sesn_victim"
    assert store.versions(session="sesn_victim") == []  # revert-session sesn_victim never reaches it


def test_push_session_namespaces_are_one_actors_alone() -> None:
    env = {"REMOTE_USER": "x"}
    a, b = session_namespace("user:a.b"), session_namespace("user:a_b")
    assert a != b and "." not in a
    assert push_session(env, ["session=" + a + ".x"], "user:a_b") == f"{b}.{a}.x"  # not a's
    assert push_session(env, ["session=" + b + ".x"], "user:a_b") == f"{b}.x"  # its own: kept
    assert push_session({}, ["session=sesn_any"], "user:a_b") == "sesn_any"  # a local push: trusted
    assert push_session({"GITMEM_PUSH_SESSION": "sesn_tok"}, ["session=sesn_x"], "user:t") == "sesn_tok"


# ---------------------------------------------------------------------- cross-scope reads and erasure
def test_a_scope_confined_caller_reads_no_other_scopes_history(store: Store) -> None:
    main = store.write("/secret.md", "main only\n", actor="user:seed")
    team = store.write("/t.md", "team\n", scope="team", actor="user:seed")
    assert main is not None and team is not None
    assert {v.scope for v in store.versions(caller=TEAM)} == {"team"}
    with pytest.raises(ForbiddenError):
        store.versions(scope="main", caller=TEAM)
    with pytest.raises(NotFoundError):
        store.version(main.id, caller=TEAM)
    with pytest.raises(NotFoundError):
        store.diff(main.id, caller=TEAM)
    assert store.version(team.id, caller=TEAM).path == "/t.md"


def test_a_scope_confined_caller_cannot_revert_or_erase_in_another_scope(store: Store) -> None:
    store.write("/m.md", "by a session\n", actor="user:bot", session="sesn_bot")
    with pytest.raises(ForbiddenError):
        revert_session(store, "sesn_bot", scope="main", caller=TEAM)
    with pytest.raises(NotFoundError):  # every scope it may touch (team): nothing there
        revert_session(store, "sesn_bot", caller=TEAM)
    assert store.read("/m.md").content == "by a session\n"
    proposer = Caller(actor="user:p", session="sesn_p", review=True)
    store.write("/p.md", "proposed\n", caller=proposer)
    p = P.open_proposal(store.core, "main", "sesn_p")
    assert p is not None
    for decide in (review.accept, review.reject):
        with pytest.raises(ForbiddenError):
            decide(store.core, p.id, reviewer="user:team", caller=TEAM)
    with pytest.raises(ForbiddenError):
        review.erase(store.core, p.id, reviewer="user:team", reason="mine now", caller=TEAM)
    assert P.get(store.core, p.id).status == "open"


# ---------------------------------------------------------------------- review escapes
def test_every_write_path_of_a_review_caller_is_a_proposal_or_refused(store: Store) -> None:
    v = store.write("/a.md", "old\n", actor="user:seed")
    store.write("/a.md", "new\n", actor="user:seed")
    assert v is not None
    bot = Caller(actor="user:bot", session="sesn_bot", stores={"*": "rw"}, review=True)
    store.write("/b.md", "b\n", caller=bot)
    store.restore(v.id, caller=bot)
    store.batch([BatchOp("create", "/c.md", "c\n")], caller=bot)
    with pytest.raises(ForbiddenError):
        store.redact(v.id, reason="escape", caller=bot)
    with pytest.raises(ForbiddenError):
        store.redact_pattern("old", reason="escape", caller=bot)
    assert store.read("/a.md").content == "new\n"
    for path in ("/b.md", "/c.md"):
        with pytest.raises(NotFoundError):
            store.read(path)
    p = P.open_proposal(store.core, "main", "sesn_bot")
    assert p is not None and set(P.touched(store.core, p)) == {"/a.md", "/b.md", "/c.md"}


# ---------------------------------------------------------------------- resource exhaustion per token
def test_one_token_cannot_hold_every_open_store_over_mcp(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token reading many stores opens each in every MCP server it starts: its servers hold at
    most MAX_STORES_PER_TOKEN stores together (503 for it alone); ``?store=`` narrows a server."""
    from gitmem.server import mcp_http

    monkeypatch.setattr(mcp_http, "MAX_STORES_PER_TOKEN", 8)
    for n in range(5):
        gitmem.create_store(f"s{n}", home=workspace).close()
    admin = token(workspace, actor="user:admin", admin=True)
    other = token(workspace, actor="user:o", stores={"s0": "ro"})
    with running(workspace) as url, httpx.Client(timeout=30) as http:
        h = {"authorization": f"Bearer {admin}", **ACCEPT}
        assert http.post(f"{url}/mcp?session=a", headers=h, json=INIT).status_code == 200  # 5 stores
        refused = http.post(f"{url}/mcp?session=b", headers=h, json=INIT)
        assert refused.status_code == 503 and "open stores" in refused.text
        narrow = http.post(f"{url}/mcp?session=c&store=s1&store=s2", headers=h, json=INIT)
        assert narrow.status_code == 200  # 5 + 2 <= 8
        o = {"authorization": f"Bearer {other}", **ACCEPT}
        assert http.post(f"{url}/mcp", headers=o, json=INIT).status_code == 200
