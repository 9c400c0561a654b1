"""Webhooks (docs/webhooks.md): a receiver on 127.0.0.1 verifies every delivery with the
``standardwebhooks`` package and the anthropic SDK's ``webhooks.unwrap``, and sees each event
once, in order: store events driven through the SDK, version events from API writes, batches,
git pushes, restores and redactions."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import httpx2 as httpx
import pytest
from anthropic.types.beta import (
    BetaWebhookMemoryStoreArchivedEventData,
    BetaWebhookMemoryStoreCreatedEventData,
    BetaWebhookMemoryStoreDeletedEventData,
)
from serverkit import client, running, token
from standardwebhooks import Webhook

import gitmem
from gitmem import webhooks
from gitmem.engine import events
from gitmem.engine.batch import BatchOp
from tests.helpers import patience


class Receiver:
    """An HTTP receiver on 127.0.0.1: verifies each delivery's signature (a bad one fails the
    test), keeps the events it accepted in arrival order; ``fail`` makes it answer 500."""

    def __init__(self) -> None:
        self.secret: str | None = None
        self.accepted: list[dict[str, Any]] = []
        self.attempts: list[float] = []
        self.bad: list[str] = []
        self.fail = False
        self.delay = 0.0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["content-length"]))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver.lock:
                    receiver.attempts.append(time.monotonic())
                    fail = receiver.fail
                if receiver.delay:
                    time.sleep(receiver.delay)
                try:
                    assert receiver.secret is not None
                    payload = Webhook(receiver.secret).verify(body, headers)
                    sdk = anthropic.Anthropic(api_key="x").beta.webhooks.unwrap(
                        body.decode(), headers=headers, key=receiver.secret
                    )
                    assert sdk.id == payload["id"] == headers["webhook-id"]
                except Exception as exc:  # noqa: BLE001 - recorded, and the test fails on it
                    with receiver.lock:
                        receiver.bad.append(f"{type(exc).__name__}: {exc}")
                    self.send_response(400)
                    self.end_headers()
                    return
                if fail:
                    self.send_response(500)
                    self.end_headers()
                    return
                with receiver.lock:
                    receiver.accepted.append({"payload": payload, "sdk": sdk, "headers": headers})
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        # polled every 0.05 s: shutdown() waits for the next poll (0.5 s by default, each test)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def payloads(self) -> list[dict[str, Any]]:
        with self.lock:
            return [a["payload"] for a in self.accepted]

    def wait_for(self, count: int, budget: float = 120.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + budget
        while len(self.payloads()) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        got = self.payloads()
        assert len(got) >= count, (len(got), count, self.bad)
        return got

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()
    assert not r.bad, r.bad


@pytest.fixture(autouse=True)
def fast_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITMEM_WEBHOOK_INTERVAL", "0.05")
    monkeypatch.setenv("GITMEM_WEBHOOK_BACKOFF", "0.1")


def add(workspace: Path, receiver: Receiver, **kw: Any) -> webhooks.Endpoint:
    ep, secret = webhooks.add_endpoint(workspace, receiver.url, allow_private=True, **kw)
    receiver.secret = secret
    return ep


def versions_in_order(workspace: Path, store_id: str) -> list[str]:
    with gitmem.open_store(store_id, workspace) as s:
        return [v.id for v in reversed(s.versions())]


def version_ids(payloads: list[dict[str, Any]], store_id: str | None = None) -> list[str]:
    return [
        p["data"]["memory_version_id"]
        for p in payloads
        if p["data"]["type"] == events.VERSION_EVENT and store_id in (None, p["data"]["memory_store_id"])
    ]


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_sdk_store_events_and_every_version_once_in_order(workspace: Path, receiver: Receiver) -> None:
    admin = token(workspace, admin=True, actor="user:admin")
    add(workspace, receiver)
    with running(workspace) as url:
        c = client(url, admin)
        a = c.beta.memory_stores.create(name="Customer Support Memory (EU)")
        m = c.beta.memory_stores.memories.create(a.id, path="/prefs.md", content="likes tea\n")
        c.beta.memory_stores.memories.update(m.id, memory_store_id=a.id, content="likes coffee\n")
        c.beta.memory_stores.memories.create(a.id, path="/other.md", content="x\n")
        c.beta.memory_stores.memories.delete(m.id, memory_store_id=a.id)
        with gitmem.open_store(a.id, workspace) as s:  # a batch: several versions, one ref move
            s.batch([BatchOp("write", f"/b{i}.md", f"b{i}\n") for i in range(3)], session="sesn_batch")
        c.beta.memory_stores.archive(a.id)
        b = c.beta.memory_stores.create(name="Scratch")
        c.beta.memory_stores.delete(b.id)
        expected_versions = versions_in_order(workspace, a.id)
        assert len(expected_versions) == 7
        got = receiver.wait_for(3 + 7)
        time.sleep(0.5)  # nothing more arrives
        got = receiver.payloads()
    kinds = [p["data"]["type"] for p in got]
    assert kinds.count("memory_store.created") == 2 and kinds.count(events.VERSION_EVENT) == 7
    assert version_ids(got, a.id) == expected_versions  # each once, in write order
    assert len({p["id"] for p in got}) == len(got)
    store_events = [
        (p["data"]["type"], p["data"]["id"]) for p in got if p["data"]["type"].startswith("memory_store")
    ]
    assert store_events == [
        ("memory_store.created", a.id),
        ("memory_store.archived", a.id),
        ("memory_store.created", b.id),
        ("memory_store.deleted", b.id),
    ]
    # the SDK parses Anthropic's three event types into its own classes
    sdk_types = {
        type(x["sdk"].data)
        for x in receiver.accepted
        if x["payload"]["data"]["type"].startswith("memory_store")
    }
    assert sdk_types == {
        BetaWebhookMemoryStoreCreatedEventData,
        BetaWebhookMemoryStoreArchivedEventData,
        BetaWebhookMemoryStoreDeletedEventData,
    }
    first = got[kinds.index(events.VERSION_EVENT)]
    assert first["type"] == "event" and first["data"]["path"] == "/prefs.md"
    assert first["data"]["operation"] == "created" and first["data"]["actor"] == "user:admin"
    assert {"organization_id", "workspace_id"} <= set(first["data"])
    batch = [p["data"] for p in got if p["data"].get("session_id") == "sesn_batch"]
    assert [d["path"] for d in batch] == ["/b0.md", "/b1.md", "/b2.md"]


def test_git_push_restore_and_redaction(workspace: Path, tmp_path: Path, receiver: Receiver) -> None:
    with gitmem.create_store("Team Notes", home=workspace) as s:
        sid = s.id
        s.write("/first.md", "one\n")
    add(workspace, receiver)
    secret = token(workspace, stores={sid: "rw"}, actor="user:pusher")
    with running(workspace) as url:
        base = url.replace("http://", f"http://x:{secret}@")
        work = tmp_path / "work"
        assert _git("clone", "-q", f"{base}/git/{sid}.git", str(work)).returncode == 0
        for who in ("user.name=t", "user.email=t@example.com"):
            _git("config", *who.split("="), cwd=work)
        (work / "pushed.md").write_text("from git\n")
        _git("add", "-A", cwd=work)
        _git("commit", "-qm", "pushed", cwd=work)
        pushed = _git("push", "-q", "origin", "HEAD:main", cwd=work)
        assert pushed.returncode == 0, pushed.stderr
        got = receiver.wait_for(1)
        assert [(p["data"]["path"], p["data"]["operation"]) for p in got] == [("/pushed.md", "created")]
        # a version written while the receiver fails, then redacted before it is delivered:
        # its event comes once, after the rewrite, with path null
        receiver.fail = True
        with gitmem.open_store(sid, workspace) as s:
            leaked = s.write("/leak.md", "my note of a thing\n").id
            fixed = s.write("/leak.md", "nothing here\n").id
            while len(receiver.attempts) < 2:
                time.sleep(0.05)
            s.redact(leaked, reason="secret", actor="user:admin")
            after = s.write("/after.md", "fine\n").id
        receiver.fail = False
        got = receiver.wait_for(4)
        assert version_ids(got) == versions_in_order(workspace, sid)[1:]
        assert version_ids(got)[1:] == [leaked, fixed, after]
        assert [p["data"]["path"] for p in got] == ["/pushed.md", None, "/leak.md", "/after.md"]
        # a redaction of a version delivered before: later versions come once, none again
        with gitmem.open_store(sid, workspace) as s:
            again = s.write("/pushed.md", "replaced\n").id
            s.redact(got[0]["data"]["memory_version_id"], reason="oops", actor="user:admin")
            last = s.write("/last.md", "end\n").id
        got = receiver.wait_for(6)
        time.sleep(0.5)
        got = receiver.payloads()
        assert version_ids(got)[4:] == [again, last] and len(got) == 6
        # a restored store: created, and its whole history arrives under its new id
        with gitmem.open_store(sid, workspace) as s:
            bundle = tmp_path / "s.bundle"
            from gitmem.engine.transfer import export_bundle

            export_bundle(s.core, bundle)
        restored = gitmem.store.restore_store("Restored", bundle, home=workspace, allow_unverified=True)
        rid = restored.settings.id
        n = len(versions_in_order(workspace, rid))
        got = receiver.wait_for(6 + 1 + n)
        assert [p["data"]["type"] for p in got[6:8]] == ["memory_store.created", events.VERSION_EVENT]
        assert version_ids(got, rid) == versions_in_order(workspace, rid)


def test_admin_api_and_ssrf(workspace: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    admin = token(workspace, admin=True, actor="user:admin")
    with gitmem.create_store("Notes", home=workspace) as s:
        sid = s.id
    reader = token(workspace, stores={sid: "rw"})
    with running(workspace) as url:
        h = {"x-api-key": admin, "anthropic-version": "2023-06-01"}
        base = f"{url}/v1/gitmem/webhooks"
        # not an admin: refused; loopback without allow_private: refused (SSRF)
        r = httpx.post(base, json={"url": receiver.url}, headers={**h, "x-api-key": reader})
        assert r.status_code == 403
        r = httpx.post(base, json={"url": receiver.url}, headers=h)
        assert r.status_code == 403 and "not a public address" in r.text
        r = httpx.post(base, json={"url": receiver.url, "allow_private": True}, headers=h)
        assert r.status_code == 403 and "GITMEM_WEBHOOK_ALLOW_PRIVATE" in r.text
        for bad in ("file:///etc/passwd", "http://u:p@127.0.0.1/", "ftp://x", "http://"):
            assert httpx.post(base, json={"url": bad}, headers=h).status_code == 400
        monkeypatch.setenv("GITMEM_WEBHOOK_ALLOW_PRIVATE", "1")
        r = httpx.post(base, json={"url": receiver.url, "allow_private": True}, headers=h)
        assert r.status_code == 200, r.text
        created = r.json()
        assert created["secret"].startswith("whsec_") and created["status"] == "active"
        receiver.secret = created["secret"]
        listed = httpx.get(base, headers=h).json()["data"]
        assert [e["id"] for e in listed] == [created["id"]] and "secret" not in json.dumps(listed)
        assert httpx.get(base, headers={**h, "x-api-key": reader}).status_code == 403
        r = httpx.post(f"{base}/{created['id']}/test", headers=h)
        assert r.json()["delivered"] is True
        assert receiver.wait_for(1)[0]["data"]["type"] == "gitmem.webhook_test"
        d = workspace / "webhooks"
        assert (d.stat().st_mode & 0o777) == 0o700
        assert ((d / "endpoints.json").stat().st_mode & 0o777) == 0o600
        assert httpx.delete(f"{base}/{created['id']}", headers=h).status_code == 200
        assert httpx.get(base, headers=h).json()["data"] == []
        assert httpx.delete(f"{base}/{created['id']}", headers=h).status_code == 404


def test_a_failing_receiver_is_retried_with_backoff_then_stopped_and_resumed(
    workspace: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITMEM_WEBHOOK_BACKOFF", "0.2")
    monkeypatch.setenv("GITMEM_WEBHOOK_MAX_FAILURES", "5")
    with gitmem.create_store("Notes", home=workspace) as s:
        sid = s.id
    ep = add(workspace, receiver)
    receiver.fail = True
    with running(workspace):
        with gitmem.open_store(sid, workspace) as s:
            s.write("/a.md", "a\n")
            s.write("/b.md", "b\n")
        deadline = patience(120)
        while webhooks.describe(workspace, ep)["status"] != "stopped" and time.monotonic() < deadline:
            time.sleep(0.05)
        row = webhooks.describe(workspace, ep)
        assert row["status"] == "stopped" and row["failures"] == 5 and row["last_error"] == "HTTP 500"
        attempts = list(receiver.attempts)
        assert len(attempts) == 5  # stopped: no more attempts
        gaps = [b - a for a, b in zip(attempts, attempts[1:], strict=False)]
        for i, gap in enumerate(gaps):  # at least the backoff: 0.2, 0.4, 0.8, 1.6 s (jitter 0.8-1)
            assert gap >= 0.8 * 0.2 * 2**i - 0.01, gaps
        listed = subprocess.run(
            ["/work/main/.venv/bin/python", "-m", "gitmem", "--home", str(workspace), "webhook", "list", "--json"],
            capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(Path(gitmem.__file__).parent.parent), "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert json.loads(listed.stdout)[0]["status"] == "stopped", listed.stderr
        receiver.fail = False
        webhooks.resume_endpoint(workspace, ep.id)
        got = receiver.wait_for(2)
        assert version_ids(got) == versions_in_order(workspace, sid)  # nothing skipped
        assert webhooks.describe(workspace, ep)["status"] == "active"


def test_a_failing_or_hanging_receiver_does_not_slow_writes(
    workspace: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITMEM_WEBHOOK_TIMEOUT", "5")
    admin = token(workspace, admin=True, actor="user:admin")

    def writes(c: anthropic.Anthropic, sid: str, n: int) -> float:
        started = time.perf_counter()
        for i in range(n):
            c.beta.memory_stores.memories.create(sid, path=f"/m{i}-{time.monotonic_ns()}.md", content="x\n")
        return time.perf_counter() - started

    with running(workspace) as url:
        c = client(url, admin)
        sid = c.beta.memory_stores.create(name="Bench").id
        writes(c, sid, 5)  # warm
        floor = min(writes(c, sid, 20) for _ in range(2))
        add(workspace, receiver)
        receiver.fail, receiver.delay = True, 2.0  # slow, then 500: every delivery fails late
        loaded = min(writes(c, sid, 20) for _ in range(2))
        assert len(receiver.attempts) >= 1  # deliveries were being tried meanwhile
    assert loaded < 3 * floor + 0.5, (floor, loaded)


def test_each_scope_sends_its_own_versions_once(workspace: Path, receiver: Receiver) -> None:
    with gitmem.create_store("Scoped", home=workspace) as s:
        sid = s.id
        s.write("/before.md", "main, before the endpoint\n")
    add(workspace, receiver)
    with running(workspace):
        with gitmem.open_store(sid, workspace) as s:
            s.write("/a.md", "main\n")
            s.write("/w.md", "work\n", scope="work")  # a scope new to the endpoint
            s.write("/a.md", "main again\n")
            s.write("/w.md", "work again\n", scope="work")
            expected = {
                scope: [v.id for v in reversed(s.versions(scope=scope)) if v.path != "/before.md"]
                for scope in ("main", "work")
            }
        got = receiver.wait_for(4)
        time.sleep(0.5)
        got = receiver.payloads()
    by_scope = {
        scope: [p["data"]["memory_version_id"] for p in got if p["data"]["scope"] == scope]
        for scope in ("main", "work")
    }
    assert by_scope == expected and len(got) == 4
