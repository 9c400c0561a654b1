"""Many SDK clients at once, and clients that vanish mid-request: no lost or duplicated versions,
no half-written version, `git fsck` and `gitmem verify` clean."""

from __future__ import annotations

import socket
import subprocess
import threading
from pathlib import Path

from serverkit import client, running, token

import gitmem
from gitmem.audit.verify import verify

ROUNDS = 5


def _worker(url: str, secret: str, sid: str, scope: str, name: str, errors: list[BaseException]) -> None:
    try:
        c = client(url, secret, max_retries=0)
        api = c.beta.memory_stores.memories
        q = {"scope": scope}
        m = api.create(sid, path=f"/{name}.md", content="0", extra_query=q)
        sha = m.content_sha256
        for i in range(1, ROUNDS):
            m = api.update(
                m.id,
                memory_store_id=sid,
                content=str(i),
                precondition={"type": "content_sha256", "content_sha256": sha},
                extra_query=q,
            )
            sha = m.content_sha256
            got = api.retrieve(m.id, memory_store_id=sid, extra_query=q)
            assert got.content == str(i)
            list(api.list(sid, extra_query=q))
    except BaseException as exc:  # reported by the test
        errors.append(exc)


def test_eight_clients_same_and_different_scopes(workspace: Path) -> None:
    gitmem.create_store("notes", home=workspace).close()
    secret = token(workspace, stores={"notes": "rw"})
    with running(workspace) as url:
        sid = client(url, secret).beta.memory_stores.list().data[0].id
        errors: list[BaseException] = []
        plan = [("main", f"w{i}") for i in range(4)] + [(f"team{i}", f"t{i}") for i in range(4)]
        threads = [
            threading.Thread(target=_worker, args=(url, secret, sid, scope, name, errors))
            for scope, name in plan
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
    with gitmem.open_store("notes", workspace) as store:
        main = store.versions(scope="main")
        assert len(main) == 4 * ROUNDS and len({v.id for v in main}) == len(main)
        assert {m.path: m.content for m in store.list("/", with_content=True)} == {  # type: ignore[union-attr]
            f"/w{i}.md": str(ROUNDS - 1) for i in range(4)
        }
        for i in range(4):
            assert len(store.versions(scope=f"team{i}")) == ROUNDS
        verify(store.core)
    fsck = subprocess.run(
        ["git", "--git-dir", str(store.path), "fsck", "--strict"],
        capture_output=True,
        text=True,
    )
    assert fsck.returncode == 0, fsck.stderr


def _send(port: int, payload: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(payload)


def test_client_killed_mid_request_leaves_no_or_one_complete_version(workspace: Path) -> None:
    gitmem.create_store("notes", home=workspace).close()
    secret = token(workspace, stores={"notes": "rw"})
    with running(workspace) as url:
        c = client(url, secret)
        sid = c.beta.memory_stores.list().data[0].id
        port = int(url.rsplit(":", 1)[1])

        def request(path: str) -> tuple[bytes, bytes]:
            body = b'{"path": "' + path.encode() + b'", "content": "' + b"x" * 5000 + b'"}'
            head = (
                f"POST /v1/memory_stores/{sid}/memories HTTP/1.1\r\nhost: x\r\n"
                f"authorization: Bearer {secret}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\n\r\n"
            ).encode()
            return head, body

        head, body = request("/half.md")
        _send(port, head + body[: len(body) // 2])  # gone half-way through the body
        head, body = request("/whole.md")
        _send(port, head + body)  # gone right after sending, without reading the answer
        # The server still answers others, and finishes what it accepted.
        assert c.beta.memory_stores.memories.create(sid, path="/after.md", content="ok").path == "/after.md"
    with gitmem.open_store("notes", workspace) as store:
        paths = {m.path for m in store.list("/")}
        assert "/half.md" not in paths and "/after.md" in paths
        if "/whole.md" in paths:
            assert store.read("/whole.md").content == "x" * 5000
        assert len(store.versions(scope="main")) == len(paths)
        verify(store.core)
