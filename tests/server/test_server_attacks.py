"""Every token holder is an attacker: requests against a real ``gitmem serve`` that try to pick an
actor, reach a store or scope the token lacks, write with a read-only token, forge cursors, smuggle
bad text into a store, race each other, hang up, dawdle, or learn the server's file system. Each
test is one attack; the server must answer with the right 4xx (never a 500) and write nothing it
should not."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from serverkit import client, running, token

import gitmem
from gitmem.errors import InvalidInputError
from gitmem.server.tokens import TokenStore

Env = dict[str, Any]


@pytest.fixture
def env(workspace: Path) -> Iterator[Env]:
    gitmem.create_store("notes", home=workspace).close()
    gitmem.create_store("secret", home=workspace).close()
    admin = token(workspace, admin=True)
    with running(workspace, body_timeout=1.0) as url:
        ids = {s.name: s.id for s in client(url, admin).beta.memory_stores.list().data}
        yield {"url": url, "home": workspace, "admin": admin, "sid": ids["notes"], "other": ids["secret"]}


def call(env: Env, method: str, path: str, secret: str | None = None, **kw: Any) -> httpx.Response:
    headers = {"x-api-key": secret or env["admin"], **kw.pop("headers", {})}
    path = path.replace("SID", env["sid"]).replace("OTHER", env["other"])
    return httpx.request(method, env["url"] + path, headers=headers, timeout=30, **kw)


def versions(env: Env, name: str = "notes", scope: str = "main") -> int:
    with gitmem.open_store(name, env["home"]) as s:
        return len(s.versions(scope=scope))


def burst(n: int, fn: Callable[[int], httpx.Response]) -> list[httpx.Response]:
    """``fn(0..n-1)`` in n threads released at once."""
    out: list[Any] = [None] * n
    gate = threading.Barrier(n)

    def run(i: int) -> None:
        gate.wait()
        out[i] = fn(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def cursor(key: Any, what: list[Any]) -> str:
    """A cursor forged the way the server encodes one (its fingerprint is no secret)."""
    q = hashlib.sha256(json.dumps(what).encode()).hexdigest()[:16]
    raw = json.dumps({"k": key, "q": q}).encode()
    return "page_" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def statuses(responses: list[httpx.Response]) -> Counter[int]:
    return Counter(r.status_code for r in responses)


# ---------------------------------------------------------------------- who the request is
def test_no_request_field_header_or_query_chooses_the_actor(env: Env) -> None:
    secret = token(env["home"], actor="user:alice", stores={"notes": "rw"}, session="sesn_alice1")
    forged = {"x-gitmem-actor": "user:mallory", "anthropic-session": "sesn_mallory", "x-actor": "x"}
    r = call(
        env,
        "POST",
        "/v1/memory_stores/SID/memories?actor=user:mallory&session_id=sesn_m",
        secret,
        headers=forged,
        json={"path": "/a.md", "content": "a"},
    )
    assert r.status_code == 200
    body = {"path": "/b.md", "content": "b", "actor": "user:mallory"}
    assert call(env, "POST", "/v1/memory_stores/SID/memories", secret, json=body).status_code == 400
    [v] = client(env["url"], secret).beta.memory_stores.memory_versions.list(env["sid"]).data
    assert v.created_by is not None and v.created_by.type == "session_actor"
    assert v.created_by.session_id == "sesn_alice1"
    with gitmem.open_store("notes", env["home"]) as s:
        assert [(v.actor, v.session) for v in s.versions(scope="main")] == [("user:alice", "sesn_alice1")]


def test_expired_revoked_and_malformed_tokens_are_401(env: Env) -> None:
    tokens = TokenStore(env["home"])
    other_last = "B" if env["admin"].endswith("A") else "A"
    tok, secret = tokens.create(stores={"notes": "rw"}, expires="1h")
    data = json.loads((env["home"] / "tokens.json").read_text())
    data["tokens"][tok.id]["expires_at"] = "2020-01-01T00:00:00Z"
    (env["home"] / "tokens.json").write_text(json.dumps(data))
    auth = [
        {"x-api-key": secret},
        {"authorization": "Basic " + env["admin"]},  # not Bearer: the x-api-key below is not used
        {"authorization": "Bearer " + env["admin"][:-1] + other_last},  # one character off
        {"authorization": "Bearer " + env["admin"] + "x"},
    ]
    for headers in auth:
        r = httpx.get(env["url"] + "/v1/memory_stores", headers={"x-api-key": env["admin"], **headers})
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    assert httpx.get(env["url"] + f"/v1/memory_stores?api_key={env['admin']}").status_code == 401


# ---------------------------------------------------------------------- reach
def test_read_only_token_writes_through_no_endpoint(env: Env) -> None:
    admin = client(env["url"], env["admin"]).beta.memory_stores
    m = admin.memories.create(env["sid"], path="/a.md", content="a")
    ro = token(env["home"], stores={"notes": "ro"})
    attempts = [
        ("POST", "/v1/memory_stores/SID/memories", {"path": "/b.md", "content": "b"}),
        ("POST", f"/v1/memory_stores/SID/memories/{m.id}", {"content": "b"}),
        ("DELETE", f"/v1/memory_stores/SID/memories/{m.id}", None),
        ("POST", f"/v1/memory_stores/SID/memory_versions/{m.memory_version_id}/redact", None),
        ("POST", "/v1/memory_stores/SID", {"description": "x"}),
        ("POST", "/v1/memory_stores/SID/archive", None),
        ("DELETE", "/v1/memory_stores/SID", None),
        ("POST", "/v1/memory_stores", {"name": "mine"}),
    ]
    for method, path, body in attempts:
        r = call(env, method, path, ro, json=body)
        assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error", (path, r.text)
    assert versions(env) == 1 and admin.retrieve(env["sid"]).archived_at is None


def test_store_management_needs_admin_even_with_every_store(env: Env) -> None:
    every = token(env["home"], stores={"*": "rw"})
    for method, path in [("POST", "/v1/memory_stores/SID/archive"), ("DELETE", "/v1/memory_stores/OTHER")]:
        assert call(env, method, path, every).status_code == 403
    assert call(env, "POST", "/v1/memory_stores", every, json={"name": "x"}).status_code == 403
    assert len(gitmem.list_stores(env["home"])) == 2


def test_other_store_and_scope_stay_out_of_reach(env: Env) -> None:
    api = client(env["url"], env["admin"]).beta.memory_stores
    theirs = api.memories.create(env["other"], path="/s.md", content="s")
    team = api.memories.create(env["sid"], path="/t.md", content="t", extra_query={"scope": "team"})
    mine = token(env["home"], stores={"notes": "rw"}, scope="main")
    for path in [  # a store without a grant answers as an unknown one (docs/access.md): 404
        "/v1/memory_stores/OTHER/memories",
        f"/v1/memory_stores/OTHER/memories/{theirs.id}",
    ]:
        assert call(env, "GET", path, mine).status_code == 404, path
    for path in [
        "/v1/memory_stores/SID/memories?scope=team",
        "/v1/memory_stores/SID/memories?scope=main&scope=team",
        f"/v1/memory_stores/SID/memory_versions/{team.memory_version_id}?scope=team",
    ]:
        assert call(env, "GET", path, mine).status_code == 403, path
    for method, path in [
        ("GET", f"/v1/memory_stores/SID/memories/{theirs.id}"),
        ("GET", f"/v1/memory_stores/SID/memories/{team.id}"),
        ("GET", f"/v1/memory_stores/SID/memory_versions/{theirs.memory_version_id}"),
        ("GET", f"/v1/memory_stores/SID/memory_versions/{team.memory_version_id}"),
        ("POST", f"/v1/memory_stores/SID/memory_versions/{theirs.memory_version_id}/redact"),
        ("DELETE", f"/v1/memory_stores/SID/memories/{team.id}"),
        ("GET", "/v1/memory_stores/secret/memories"),  # a name is not an id
    ]:
        assert call(env, method, path, mine).status_code == 404, path
    listed = call(env, "GET", f"/v1/memory_stores/SID/memory_versions?memory_id={theirs.id}", mine)
    assert listed.json()["data"] == []
    assert [s["name"] for s in call(env, "GET", "/v1/memory_stores", mine).json()["data"]] == ["notes"]
    assert versions(env, "secret") == 1 and versions(env, "notes", "team") == 1


def test_permission_error_does_not_name_a_store_the_token_cannot_see(env: Env) -> None:
    mine = token(env["home"], stores={"notes": "rw"})
    r = call(env, "GET", "/v1/memory_stores/OTHER/memories", mine)
    unknown = call(env, "GET", "/v1/memory_stores/memstore_01M8TJRDFD0BMAR4RAN4RXPJ7T/memories", mine)
    assert r.status_code == unknown.status_code == 404 and "secret" not in r.text
    assert r.json()["error"]["type"] == unknown.json()["error"]["type"]  # no existence oracle


# ---------------------------------------------------------------------- cursors
@pytest.mark.parametrize("key", [5, [1, 2], {"a": 1}, "x", ["a"], [None, None], ["a", "b", "c"]])
def test_tampered_store_list_cursor_is_400(env: Env, key: Any) -> None:
    page = cursor(key, ["stores", False, None, None])
    r = call(env, "GET", "/v1/memory_stores", params={"page": page})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("page:")


def test_cursor_of_another_store_is_400(env: Env) -> None:
    api = client(env["url"], env["admin"]).beta.memory_stores
    for sid in (env["sid"], env["other"]):
        for i in range(3):
            api.memories.create(sid, path=f"/m{i}.md", content=str(i))
    for kind in ("memories", "memory_versions"):
        page = call(env, "GET", f"/v1/memory_stores/OTHER/{kind}?limit=1").json()["next_page"]
        assert page
        r = call(env, "GET", f"/v1/memory_stores/SID/{kind}", params={"limit": 1, "page": page})
        assert r.status_code == 400, (kind, r.text)
        r = call(env, "GET", f"/v1/memory_stores/OTHER/{kind}", params={"limit": 1, "page": page})
        assert r.status_code == 200 and len(r.json()["data"]) == 1


# ---------------------------------------------------------------------- text and paths
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/memory_stores", b'{"name": "sur", "description": "\\ud800"}'),
        ("POST", "/v1/memory_stores", b'{"name": "sur", "metadata": {"\\udfff": "x"}}'),
        ("POST", "/v1/memory_stores", b'{"name": "sur", "metadata": {"k": "a\\ud800b"}}'),
        ("POST", "/v1/memory_stores/SID", b'{"description": "\\ud83d"}'),
        ("POST", "/v1/memory_stores/SID", b'{"metadata": {"k": "\\ud800"}}'),
    ],
)
def test_lone_surrogates_in_store_fields_are_400(env: Env, method: str, path: str, body: bytes) -> None:
    r = call(env, method, path, content=body)
    assert r.status_code == 400 and "surrogate" in r.json()["error"]["message"], r.text
    listing = call(env, "GET", "/v1/memory_stores")
    assert listing.status_code == 200 and [s["name"] for s in listing.json()["data"]] == ["secret", "notes"]
    assert [s["description"] for s in listing.json()["data"]] == ["", ""]


@pytest.mark.parametrize(
    "path", ["/.anthropic-memory-store/x.md", "/.Anthropic-Memory-Store", "/.ANTHROPIC-MEMORY-STORE/a/b"]
)
def test_paths_that_would_clash_with_the_sdk_marker_are_400(env: Env, path: str) -> None:
    r = call(env, "POST", "/v1/memory_stores/SID/memories", json={"path": path, "content": "x"})
    assert r.status_code == 400 and "reserved" in r.json()["error"]["message"], r.text
    m = call(env, "POST", "/v1/memory_stores/SID/memories", json={"path": "/ok.md", "content": "x"}).json()
    r = call(env, "POST", f"/v1/memory_stores/SID/memories/{m['id']}", json={"path": path})
    assert r.status_code == 400
    assert versions(env) == 1


@pytest.mark.parametrize(
    "path",
    [
        "//a.md",
        "/a/",
        "/a\u0000.md",
        "/a\u0007.md",
        "/cafe\u0301.md",
        "/\u202e.md",
        "/.gitmem/x",
        "/.git/config",
        "/a/../b",
        "/" + "a" * 1025,
        "a.md",
        "/\ud800.md",
    ],
)
def test_odd_paths_are_400(env: Env, path: str) -> None:
    body = json.dumps({"path": path, "content": "x"}).encode()  # \ud800 travels as an escape
    r = call(env, "POST", "/v1/memory_stores/SID/memories", content=body)
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("path"), r.text
    assert versions(env) == 0


@pytest.mark.parametrize(
    "body",
    [
        b'{"path": "/a.md", "content": "a\\u0000b"}',
        b'{"path": "/a.md", "content": "\\udc80"}',
        b'{"path": "/a.md", "content": "\xc3\x28"}',
        b'{"path": "/a.md", "content": "x", "z": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
        b'{"path": "/a.md", "content": ' + b"1" * 5000 + b"}",
        b'{"path": "/a.md", "content": "x"}\x00',
    ],
)
def test_hostile_content_is_400_and_writes_nothing(env: Env, body: bytes) -> None:
    r = call(env, "POST", "/v1/memory_stores/SID/memories", content=body)
    assert r.status_code == 400, r.text
    assert versions(env) == 0


def test_chunked_body_over_the_limit_is_413(env: Env) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"path": "/a.md", "content": "'
        for _ in range(40):
            yield b"x" * 65536

    r = call(env, "POST", "/v1/memory_stores/SID/memories", content=chunks())
    assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"
    assert versions(env) == 0


# ---------------------------------------------------------------------- races
def test_same_precondition_twice_at_once_exactly_one_wins(env: Env) -> None:
    m = call(env, "POST", "/v1/memory_stores/SID/memories", json={"path": "/p.md", "content": "v0"}).json()
    pre = {"type": "content_sha256", "content_sha256": m["content_sha256"]}
    got = burst(
        8,
        lambda i: call(
            env,
            "POST",
            f"/v1/memory_stores/SID/memories/{m['id']}",
            json={"content": f"v{i + 1}", "precondition": pre},
        ),
    )
    assert statuses(got) == Counter({200: 1, 409: 7})
    assert all(r.headers.get("x-should-retry") == "false" for r in got if r.status_code == 409)
    assert versions(env) == 2


def test_creates_on_one_path_and_deletes_of_one_memory_exactly_one_wins(env: Env) -> None:
    got = burst(
        8,
        lambda i: call(
            env, "POST", "/v1/memory_stores/SID/memories", json={"path": "/same.md", "content": str(i)}
        ),
    )
    assert statuses(got) == Counter({200: 1, 409: 7})
    mid = next(r.json()["id"] for r in got if r.status_code == 200)
    gone = burst(8, lambda i: call(env, "DELETE", f"/v1/memory_stores/SID/memories/{mid}"))
    assert statuses(gone) == Counter({200: 1, 404: 7})
    assert versions(env) == 2


def _create_and_delete_race(env: Env, name: str) -> None:
    got = burst(6, lambda i: call(env, "POST", "/v1/memory_stores", json={"name": name}))
    assert statuses(got) == Counter({200: 6}), [r.text for r in got]  # names repeat: six stores
    sids = {r.json()["id"] for r in got}
    assert len(sids) == 6
    sid = sorted(sids)[0]
    gone = burst(6, lambda i: call(env, "DELETE", f"/v1/memory_stores/{sid}"))
    assert statuses(gone) == Counter({200: 1, 404: 5}), [r.text for r in gone]
    for other in sorted(sids)[1:]:
        assert call(env, "DELETE", f"/v1/memory_stores/{other}").status_code == 200


def test_store_creates_of_one_name_make_distinct_stores_and_deletes_of_one_exactly_one_wins(env: Env) -> None:
    before = sorted(p.name for p in (env["home"] / "stores").iterdir())
    for round_ in range(3):
        _create_and_delete_race(env, f"race{round_}")
    assert sorted(s.name for s in gitmem.list_stores(env["home"])) == ["notes", "secret"]
    assert sorted(p.name for p in (env["home"] / "stores").iterdir()) == before


def _delete_under_load(env: Env, pause: float) -> list[httpx.Response]:
    """Five clients writing and listing in a new store while it is deleted; their answers."""
    sid = call(env, "POST", "/v1/memory_stores", json={"name": "doomed"}).json()["id"]
    stop = threading.Event()
    seen: list[httpx.Response] = []

    def hammer(i: int) -> None:
        for k in range(40):
            if stop.is_set():
                return
            body = {"path": f"/w{i}_{k}.md", "content": "x" * 4000}
            seen.append(call(env, "POST", f"/v1/memory_stores/{sid}/memories", json=body))
            seen.append(call(env, "GET", f"/v1/memory_stores/{sid}/memories?view=full"))

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    time.sleep(pause)
    deleted = call(env, "DELETE", f"/v1/memory_stores/{sid}")
    stop.set()
    for t in threads:
        t.join()
    assert deleted.status_code == 200, deleted.text
    return seen


def test_deleting_a_store_with_requests_in_flight(env: Env) -> None:
    before = sorted(p.name for p in (env["home"] / "stores").iterdir())
    for round_ in range(4):
        seen = _delete_under_load(env, 0.2 + 0.1 * round_)
        assert set(statuses(seen)) <= {200, 404}, [r.text for r in seen if r.status_code not in (200, 404)]
        assert sorted(p.name for p in (env["home"] / "stores").iterdir()) == before


# ---------------------------------------------------------------------- leaks and headers
def test_error_bodies_never_show_server_paths(env: Env) -> None:
    home = str(env["home"])
    bad = call(env, "POST", "/v1/memory_stores", json={"name": "x" * 256})
    assert bad.status_code == 400 and home not in bad.text
    call(env, "POST", "/v1/memory_stores/SID/memories", json={"path": "/a.md", "content": "a"})
    gitmem.delete_store("notes", env["home"])  # behind the server's back, its Store still pooled
    for method, path in [("GET", "/v1/memory_stores/SID"), ("POST", "/v1/memory_stores/SID/memories")]:
        r = call(env, method, path, json={"path": "/b.md", "content": "b"})
        assert r.status_code == 404 and home not in r.text, r.text
    assert "Traceback" not in r.text


def test_security_headers_on_every_response(env: Env) -> None:
    for r in [
        call(env, "GET", "/v1/memory_stores"),
        call(env, "GET", "/v1/memory_stores/nope"),
        httpx.get(env["url"] + "/v1/memory_stores"),
        httpx.get(env["url"] + "/healthz"),
        call(env, "POST", "/v1/memory_stores/SID/memories", content=b"{" + b" " * (2 << 20)),
    ]:
        assert r.headers["x-content-type-options"] == "nosniff", r.url
        assert r.headers["cache-control"] == "no-store", r.url


def test_a_trailing_slash_is_not_redirected_to_the_host_header(env: Env) -> None:
    r = call(env, "GET", "/v1/memory_stores/", headers={"host": "evil.example"})
    assert r.status_code == 404 and "location" not in r.headers


def test_made_up_methods_do_not_grow_the_metrics(env: Env) -> None:
    for i in range(20):
        assert httpx.request(f"XM{i}", env["url"] + "/v1/memory_stores").status_code == 405
    text = httpx.get(env["url"] + "/metrics").text
    assert 'method="XM' not in text and 'method="other"' in text


# ---------------------------------------------------------------------- clients that hang up or dawdle
def _port(env: Env) -> int:
    return int(env["url"].rsplit(":", 1)[1])


def _head(env: Env, length: int) -> bytes:
    return (
        f"POST /v1/memory_stores/{env['sid']}/memories HTTP/1.1\r\nhost: x\r\n"
        f"x-api-key: {env['admin']}\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    ).encode()


def test_a_client_hanging_up_mid_body_is_no_500_and_writes_nothing(env: Env) -> None:
    body = b'{"path": "/cut.md", "content": "' + b"y" * 50_000 + b'"}'
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", _port(env))) as s:
            s.sendall(_head(env, len(body)) + body[: len(body) // 2])
    time.sleep(0.5)
    assert versions(env) == 0
    assert 'status="500"' not in httpx.get(env["url"] + "/metrics").text


def test_a_slow_body_times_out_with_408(env: Env) -> None:
    with socket.create_connection(("127.0.0.1", _port(env))) as s:
        s.settimeout(20)
        s.sendall(_head(env, 100) + b"{")
        reply = s.recv(4096)
    assert reply.startswith(b"HTTP/1.1 408"), reply[:80]
    assert versions(env) == 0


# ---------------------------------------------------------------------- the library below the server
def test_library_create_store_from_threads_each_makes_its_own(workspace: Path) -> None:
    errors: list[BaseException] = []

    def create(_i: int) -> None:
        try:
            gitmem.create_store("race", home=workspace).close()
        except BaseException as exc:
            errors.append(exc)

    for _ in range(3):
        threads = [threading.Thread(target=create, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        made = [s for s in gitmem.list_stores(workspace) if s.name == "race"]
        assert len({s.id for s in made}) == 6
        for s in made:
            gitmem.delete_store(s.id, workspace)


def test_library_refuses_lone_surrogates_in_store_settings(workspace: Path) -> None:
    with pytest.raises(InvalidInputError):
        gitmem.create_store("sur", description="\ud800", home=workspace)
    with pytest.raises(InvalidInputError):
        gitmem.create_store("sur2", metadata={"k": "\udfff"}, home=workspace)


def test_a_scoped_token_learns_nothing_of_redactions_in_other_scopes(env: Env) -> None:
    api = client(env["url"], env["admin"]).beta.memory_stores
    m = api.memories.create(env["sid"], path="/pw.md", content="hunter2")
    api.memories.update(m.id, memory_store_id=env["sid"], content="rotated")
    api.memory_versions.redact(m.memory_version_id, memory_store_id=env["sid"])
    team = token(env["home"], stores={"notes": "rw"}, scope="team")
    r = call(
        env,
        "POST",
        "/v1/memory_stores/SID/memories?scope=team",
        team,
        json={"path": "/guess.md", "content": "hunter2"},
    )
    assert r.status_code == 200 and "redacted" not in r.text


def test_token_creates_at_once_keep_every_token_0600(workspace: Path) -> None:
    import os
    import stat
    import subprocess
    import sys

    gitmem.create_store("notes", home=workspace).close()  # a grant names a store that exists
    cmd = [sys.executable, "-m", "gitmem", "token", "create", "--store", "notes:ro", "--json"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)]
    secrets = [json.loads(p.communicate()[0])["secret"] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0]
    tokens = TokenStore(workspace)
    assert len(tokens.list()) == 4 and len({tokens.authenticate(s).id for s in secrets}) == 4
    assert stat.S_IMODE(os.stat(workspace / "tokens.json").st_mode) == 0o600
    assert not any(s in (workspace / "tokens.json").read_text() for s in secrets)


def _some_request(env: Env, i: int, k: int, sid: str, scope: str, m: dict[str, Any]) -> httpx.Response:
    base, q = f"/v1/memory_stores/{sid}", f"?scope={scope}"
    method, path, body = [
        ("POST", f"{base}/memories/{m['id']}{q}", {"content": f"u{k}"}),
        ("GET", f"{base}/memories{q}&view=full&depth=1", None),
        ("GET", f"{base}/memory_versions{q}&view=full&limit=5", None),
        ("POST", f"{base}/memory_versions/{m['memory_version_id']}/redact{q}", None),
        ("POST", f"{base}/memories/{m['id']}{q}", {"path": f"/mv/{i}_{k}.md"}),
        ("DELETE", f"{base}/memories/{m['id']}{q}", None),
    ][k % 6]
    return call(env, method, path, json=body)


def test_mixed_concurrent_requests_never_500(env: Env) -> None:
    """Creates, updates, renames, deletes, redactions and full listings in two stores and three
    scopes at once: libgit2 and SQLite handles must never be shared by two threads."""
    answers: list[httpx.Response] = []

    def worker(i: int) -> httpx.Response:
        mine: list[tuple[str, str, dict[str, Any]]] = []
        for k in range(24):
            sid, scope = (env["sid"], env["other"])[k % 2], ("main", "team", f"s{i}")[k % 3]
            if k % 4 == 0 or not mine:
                body = {"path": f"/d{k % 3}/m{i}_{k}.md", "content": f"c{i}.{k}"}
                r = call(env, "POST", f"/v1/memory_stores/{sid}/memories?scope={scope}", json=body)
                if r.status_code == 200:
                    mine.append((sid, scope, r.json()))
            else:
                r = _some_request(env, i, k, *mine[k % len(mine)])
            answers.append(r)
        return r

    burst(6, worker)
    assert answers and all(r.status_code < 500 for r in answers), [
        r.text for r in answers if r.status_code >= 500
    ]
