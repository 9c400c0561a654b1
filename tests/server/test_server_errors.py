"""Authentication, permissions and bad input: the right 4xx with a message naming the field, never
a 500, and nothing written."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2 as httpx
import pytest
from serverkit import client, running, token

import gitmem
from gitmem.errors import AuthenticationError
from gitmem.server.tokens import TokenStore


@pytest.fixture
def env(workspace: Path) -> Iterator[dict[str, Any]]:
    gitmem.create_store("notes", home=workspace).close()
    secret = token(workspace, admin=True)
    with running(workspace) as url:
        sid = client(url, secret).beta.memory_stores.list().data[0].id
        yield {"url": url, "home": workspace, "secret": secret, "sid": sid, "c": client(url, secret)}


def raw(env: dict[str, Any], method: str, path: str, **kw: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {env['secret']}", **kw.pop("headers", {})}
    return httpx.request(method, env["url"] + path.replace("SID", env["sid"]), headers=headers, **kw)


def versions(env: dict[str, Any]) -> int:
    with gitmem.open_store("notes", env["home"]) as s:
        return len(s.versions(scope="main"))


def test_tokens_file_is_0600_and_holds_no_secret(workspace: Path) -> None:
    with gitmem.create_store("notes", home=workspace) as notes:
        sid = notes.id
    store = TokenStore(workspace)
    tok, secret = store.create(actor="user:alice", stores={"notes": "ro"}, expires="30d")
    text = (workspace / "tokens.json").read_text()
    assert secret not in text and tok.id in text
    assert stat.S_IMODE(os.stat(workspace / "tokens.json").st_mode) == 0o600
    assert store.authenticate(secret) == tok
    assert tok.stores == {sid: "ro"}  # the grant holds the store's id, not its name
    assert tok.may_read(sid) and not tok.may_write(sid) and not tok.may_read("other")
    store.revoke(tok.id)
    with pytest.raises(AuthenticationError):
        store.authenticate(secret)


def test_missing_invalid_revoked_expired_tokens_are_401(env: dict[str, Any]) -> None:
    for bad in ("nope", "gitmem_01ARZ3NDEKTSV4RRFFQ69G5FAV_" + "A" * 43):
        with pytest.raises(anthropic.AuthenticationError):
            client(env["url"], bad).beta.memory_stores.list()
    r = httpx.get(env["url"] + "/v1/memory_stores")
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    tok, secret = TokenStore(env["home"]).create(stores={"notes": "rw"})
    assert client(env["url"], secret).beta.memory_stores.list().data
    TokenStore(env["home"]).revoke(tok.id)
    with pytest.raises(anthropic.AuthenticationError):
        client(env["url"], secret).beta.memory_stores.list()
    ok = httpx.get(env["url"] + "/v1/memory_stores", headers={"x-api-key": env["secret"]})
    assert ok.status_code == 200


def test_read_only_token_cannot_write(env: dict[str, Any]) -> None:
    ro = client(env["url"], token(env["home"], stores={"notes": "ro"}))
    assert ro.beta.memory_stores.memories.list(env["sid"]).data == []
    with pytest.raises(anthropic.PermissionDeniedError):
        ro.beta.memory_stores.memories.create(env["sid"], path="/x.md", content="x")
    gitmem.create_store("other", home=env["home"]).close()
    none = client(env["url"], token(env["home"], stores={"other": "rw"}))
    with pytest.raises(anthropic.NotFoundError):  # no grant: as if the store did not exist
        none.beta.memory_stores.memories.list(env["sid"])
    assert versions(env) == 0


def test_oversize_content_is_413_and_huge_body_413_before_parsing(env: dict[str, Any]) -> None:
    c = env["c"]
    with pytest.raises(anthropic.ContentTooLargeError):
        c.beta.memory_stores.memories.create(env["sid"], path="/big.md", content="x" * 102_401)
    r = raw(env, "POST", "/v1/memory_stores/SID/memories", content=b"{" + b" " * (2 << 20))
    assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"
    assert r.headers["request-id"].startswith("req_")
    assert versions(env) == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{not json", "JSON"),
        (b'{"path": "/a.md", "content": "x", "extra": 1}', "extra"),
        (b'{"path": "/a.md"}', "content"),
        (b'{"path": "/a.md", "content": 5}', "content"),
        (b'{"path": 5, "content": "x"}', "path"),
        (b'{"path": "/.gitmem/x", "content": "x"}', "path"),
        (b'{"path": "/.anthropic-memory-store", "content": "x"}', "path"),
        (b'{"path": "/a/../b", "content": "x"}', "path"),
        (b'{"path": "/a.md", "content": "\\ud800"}', "UTF-8"),
        (b'{"path": "/a.md", "content": "\xff\xfe"}', "JSON"),
        (b"[1, 2]", "object"),
    ],
)
def test_bad_create_bodies_are_400(env: dict[str, Any], body: bytes, field: str) -> None:
    r = raw(env, "POST", "/v1/memory_stores/SID/memories", content=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error" and field in r.json()["error"]["message"]
    assert versions(env) == 0


@pytest.mark.parametrize(
    "query",
    [
        "depth=2",
        "depth=x",
        "limit=0",
        "limit=101",
        "view=everything",
        "path_prefix=/notes",
        "page=garbage",
        "page=page_eyJrIjoiL2EiLCJxIjoiMCJ9",
        "scope=..bad",
    ],
)
def test_bad_list_queries_are_400(env: dict[str, Any], query: str) -> None:
    r = raw(env, "GET", f"/v1/memory_stores/SID/memories?{query}")
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"].split(":")[0] in query


def test_bad_ids_are_4xx(env: dict[str, Any]) -> None:
    c, sid = env["c"], env["sid"]
    with pytest.raises(anthropic.NotFoundError):
        c.beta.memory_stores.retrieve("memstore_nope")
    with pytest.raises(anthropic.BadRequestError):
        c.beta.memory_stores.memories.retrieve("not-an-id", memory_store_id=sid)
    with pytest.raises(anthropic.NotFoundError):
        c.beta.memory_stores.memories.retrieve("mem_01ARZ3NDEKTSV4RRFFQ69G5FAV", memory_store_id=sid)
    with pytest.raises(anthropic.BadRequestError):
        c.beta.memory_stores.memory_versions.retrieve("memver_x", memory_store_id=sid)
    with pytest.raises(anthropic.NotFoundError):
        c.beta.memory_stores.memory_versions.redact("memver_01ARZ3NDEKTSV4RRFFQ69G5FAV", memory_store_id=sid)
    with pytest.raises(anthropic.BadRequestError):
        c.beta.memory_stores.memories.delete(
            "mem_01ARZ3NDEKTSV4RRFFQ69G5FAV", memory_store_id=sid, expected_content_sha256="abc"
        )
    with pytest.raises(anthropic.BadRequestError):
        c.beta.memory_stores.memory_versions.list(sid, operation="exploded")
    with pytest.raises(anthropic.BadRequestError):
        c.beta.memory_stores.memories.update(
            "mem_01ARZ3NDEKTSV4RRFFQ69G5FAV",
            memory_store_id=sid,
            content="x",
            precondition={"type": "version", "content_sha256": "0" * 64},  # type: ignore[typeddict-item]
        )
    assert raw(env, "GET", "/v1/nothing").status_code == 404


def test_both_beta_headers_are_400(env: dict[str, Any]) -> None:
    both = "agent-memory-2026-07-22,managed-agents-2026-04-01"
    r = raw(env, "GET", "/v1/memory_stores", headers={"anthropic-beta": both})
    assert r.status_code == 400


def test_healthz_and_metrics(env: dict[str, Any]) -> None:
    env["c"].beta.memory_stores.memories.create(env["sid"], path="/m.md", content="m")
    with pytest.raises(anthropic.ConflictError):
        env["c"].beta.memory_stores.memories.create(env["sid"], path="/m.md", content="m")
    assert httpx.get(env["url"] + "/healthz").json()["status"] == "ok"
    text = httpx.get(env["url"] + "/metrics").text
    assert 'gitmem_writes_total{operation="created"} 1.0' in text
    assert 'gitmem_conflicts_total{type="memory_path_conflict_error"} 1.0' in text
    assert "gitmem_http_request_seconds_bucket" in text
