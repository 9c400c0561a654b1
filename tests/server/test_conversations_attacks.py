"""Attacks on the conversations API and the checkpointer: races, archived stores, hand-made records,
secrets in a graph's state, a server killed in the middle of a turn."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from serverkit import running, token  # noqa: E402

import gitmem  # noqa: E402
from gitmem.engine import conversations as conv  # noqa: E402
from gitmem.errors import GuardRejectedError  # noqa: E402
from tests.helpers import patience  # noqa: E402

BIND = {"memory_store": {"name": "notes"}, "scope": {"kind": "user", "value": "u1"}}


def client(url: str, secret: str) -> Any:
    return openai.OpenAI(base_url=url + "/v1", api_key=secret, max_retries=0)


@pytest.fixture
def served(workspace: Path) -> Any:
    gitmem.create_store("notes", home=workspace).close()
    with running(workspace) as url:
        yield url


def test_concurrent_appends_keep_every_item_in_order(workspace: Path, served: str) -> None:
    c = client(served, token(workspace, actor="user:alice", stores={"notes": "rw"}))
    made = c.conversations.create(extra_body=BIND)
    errors: list[BaseException] = []

    def append(n: int) -> None:
        try:
            for k in range(3):
                c.conversations.items.create(made.id, items=[{"role": "user", "content": f"{n}-{k}"}])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    texts = [i.content[0].text for i in c.conversations.items.list(made.id, order="asc", limit=100)]  # type: ignore[union-attr]
    assert sorted(texts) == sorted(f"{n}-{k}" for n in range(4) for k in range(3))
    for n in range(4):  # each writer's items in its own order
        mine = [t for t in texts if t.startswith(f"{n}-")]
        assert mine == [f"{n}-{k}" for k in range(3)]
    with gitmem.open_store("notes", home=workspace) as s:
        paths = [m.path for m in s.list("/conversations/", scope="u1")]
    seqs = [p.rsplit("/", 1)[1][:6] for p in paths if "/items/" in p]
    assert len(set(seqs)) == len(seqs) == 12


def test_an_archived_store_refuses_changes(workspace: Path, served: str) -> None:
    c = client(served, token(workspace, actor="user:alice", stores={"notes": "rw"}))
    made = c.conversations.create(extra_body=BIND)
    with gitmem.open_store("notes", home=workspace) as s:
        s.update_settings(archived_at="2026-01-01T00:00:00Z")
    with pytest.raises(openai.APIStatusError) as caught:
        c.conversations.items.create(made.id, items=[{"role": "user", "content": "late"}])
    assert caught.value.status_code in (403, 409)
    assert c.conversations.items.list(made.id).data == []
    assert c.conversations.retrieve(made.id).id == made.id  # reading still works


def test_a_hand_made_record_is_an_error_not_a_crash_or_a_silent_gap(workspace: Path, served: str) -> None:
    c = client(served, token(workspace, actor="user:alice", stores={"notes": "rw"}))
    made = c.conversations.create(items=[{"role": "user", "content": "one"}], extra_body=BIND)
    ulid = made.id[5:31]
    with gitmem.open_store("notes", home=workspace) as s:
        s.write(f"/conversations/{ulid}/items/000009-msg_junk.json", "not json at all", scope="u1")
        s.write(f"/conversations/{ulid}/items/notes.txt", "a stray file", scope="u1")
    with pytest.raises(openai.InternalServerError):
        c.conversations.items.list(made.id)
    with gitmem.open_store("notes", home=workspace) as s:
        s.delete(f"/conversations/{ulid}/items/000009-msg_junk.json", scope="u1")
    # A file whose name is not an item's is not an item (ignored); the conversation reads again.
    assert [i.content[0].text for i in c.conversations.items.list(made.id).data] == ["one"]  # type: ignore[union-attr]


def test_a_body_that_is_not_an_object_and_unknown_fields(workspace: Path, served: str) -> None:
    import httpx2 as httpx

    secret = token(workspace, actor="user:alice", stores={"notes": "rw"})
    h = {"authorization": f"Bearer {secret}"}
    for body in (b"[]", b"{", b'"x"', json.dumps({**BIND, "surprise": 1}).encode()):
        r = httpx.post(served + "/v1/conversations", content=body, headers=h)
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(served + "/v1/conversations", content=b"{}", headers={"authorization": "Bearer nope"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"


def test_the_checkpointer_refuses_a_secret_in_the_state_whole(workspace: Path) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from gitmem.integrations.langgraph_checkpoint import GitmemSaver

    store = gitmem.create_store("graphs", home=workspace)
    saver = GitmemSaver(store, scope="g")
    cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": "my key is AKIA" + "ABCDEFGHIJKLMNOP"}
    cp["channel_versions"] = {"messages": saver.get_next_version(None, None)}
    before = store.core.tip("g")
    with pytest.raises(GuardRejectedError):
        saver.put(cfg, cp, {"source": "input", "step": -1}, cp["channel_versions"])  # type: ignore[arg-type]
    assert store.core.tip("g") == before and saver.get_tuple(cfg) is None
    store.close()


def test_forged_conversation_ids_never_leave_their_store(workspace: Path, served: str) -> None:
    gitmem.create_store("secret", home=workspace).close()
    owner = client(served, token(workspace, actor="user:boss", stores={"secret": "rw"}))
    made = owner.conversations.create(extra_body={**BIND, "memory_store": {"name": "secret"}})
    ulid, store_id, _scope = conv.parse_id(made.id)
    intruder = client(served, token(workspace, actor="user:eve", stores={"notes": "rw"}))
    # The same ULID with the intruder's store id: a conversation that does not exist there.
    with gitmem.open_store("notes", home=workspace) as s:
        mine = s.settings.id
    with pytest.raises(openai.NotFoundError):
        intruder.conversations.items.list(conv.public_id(mine, "u1", ulid))
    with pytest.raises(openai.NotFoundError):
        intruder.conversations.items.list(made.id)
    with pytest.raises(openai.NotFoundError):
        intruder.conversations.items.create(made.id, items=[{"role": "user", "content": "x"}])


def test_sigkill_of_the_server_loses_no_acknowledged_item(workspace: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    import httpx2 as httpx
    from serverkit import free_port

    gitmem.create_store("notes", home=workspace).close()
    secret = token(workspace, actor="user:alice", stores={"notes": "rw"})
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "gitmem",
        "serve",
        "--home",
        str(workspace),
        "--port",
        str(port),
        "--log-level",
        "error",
    ]
    proc = subprocess.Popen(cmd)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = patience(60)
        while True:
            try:
                httpx.get(url + "/healthz")
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("gitmem serve did not start") from None
                time.sleep(0.1)
        c = client(url, secret)
        cid = c.conversations.create(extra_body=BIND).id
        acked: list[str] = []
        errors: list[BaseException] = []

        def append() -> None:
            n = 0
            while True:
                try:
                    c.conversations.items.create(
                        cid,
                        items=[{"role": "user", "content": f"m{n}"}, {"role": "user", "content": f"m{n}b"}],
                    )
                except Exception as exc:  # noqa: BLE001 - the kill ends it
                    errors.append(exc)
                    return
                acked.append(f"m{n}")
                n += 1

        writer = threading.Thread(target=append)
        writer.start()
        while len(acked) < 8 and writer.is_alive():
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        writer.join()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(acked) >= 8 and errors
    with gitmem.open_store("notes", home=workspace) as s:
        ulid = conv.parse_id(cid)[0]
        texts = [i["content"][0]["text"] for i in conv.items(s.core, "u1", ulid)]
    assert set(acked) <= set(texts)
    assert all(f"{t}b" in texts for t in texts if not t.endswith("b"))  # each call whole, or not at all
    verify = subprocess.run(
        [sys.executable, "-m", "gitmem", "verify", "notes", "--home", str(workspace)],
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
