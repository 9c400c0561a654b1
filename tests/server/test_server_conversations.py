"""OpenAI-compatible conversations on ``gitmem serve``, driven by the official ``openai`` client."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from serverkit import running, token  # noqa: E402

import gitmem  # noqa: E402
from gitmem.engine import conversations as conv  # noqa: E402

STORE = {"name": "notes"}
SCOPE = {"kind": "user", "value": "user-123"}


def client(url: str, secret: str) -> Any:
    return openai.OpenAI(base_url=url + "/v1", api_key=secret, max_retries=0)


def gitmem_log(home: Path, *args: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, "-m", "gitmem", "log", "notes", "--home", str(home), "--nl", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines()]


def published(home: Path) -> list[Any]:
    with gitmem.open_store("notes", home=home) as s:
        return s.versions(scope="user-123")


@pytest.fixture
def served(workspace: Path) -> Any:
    gitmem.create_store("notes", home=workspace).close()
    with running(workspace) as url:
        yield url


def test_the_official_client_round_trip(workspace: Path, served: str) -> None:
    secret = token(workspace, actor="user:alice", stores={"notes": "rw"}, session="sess-1")
    c = client(served, secret)
    made = c.conversations.create(
        items=[{"type": "message", "role": "user", "content": "Hello!"}],
        metadata={"topic": "demo"},
        extra_body={"memory_store": STORE, "scope": SCOPE},
    )
    assert made.object == "conversation" and made.metadata == {"topic": "demo"}
    assert made.id.startswith("conv_")
    assert c.conversations.retrieve(made.id).id == made.id
    added = c.conversations.items.create(
        made.id,
        items=[
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": f"answer {n}"}],
            }
            for n in range(5)
        ],
    )
    assert len(added.data) == 5 and added.first_id == added.data[0].id
    # Pages of two, oldest first: the client follows last_id / has_more itself.
    page = c.conversations.items.list(made.id, limit=2, order="asc")
    seen = [i.id for i in page]
    assert len(seen) == 6
    assert seen[1:] == [i.id for i in added.data]
    first = c.conversations.items.retrieve(seen[0], conversation_id=made.id)
    assert first.type == "message" and first.role == "user"  # type: ignore[union-attr]
    assert first.content[0].text == "Hello!"  # type: ignore[union-attr]
    newest = c.conversations.items.list(made.id, limit=1)
    assert [i.id for i in newest.data] == [seen[-1]] and newest.has_more
    after = c.conversations.items.delete(seen[2], conversation_id=made.id)
    assert after.id == made.id
    with pytest.raises(openai.NotFoundError):
        c.conversations.items.retrieve(seen[2], conversation_id=made.id)
    updated = c.conversations.update(made.id, metadata={"topic": "changed"})
    assert updated.metadata == {"topic": "changed"}
    assert c.conversations.retrieve(made.id).metadata == {"topic": "changed"}
    # Every step a version in the store's scope, by the token's actor and session.
    log = gitmem_log(workspace, "-s", "user-123")
    assert {v["actor"] for v in log} == {"user:alice"} and {v["session"] for v in log} == {"sess-1"}
    assert {v["scope"] for v in log} == {"user-123"}
    commits = {v.get("commit") or v["id"] for v in log}
    assert len(log) == 2 + 5 + 1 + 1  # create (meta + seed), 5 items, a delete, an update
    assert commits
    deleted = c.conversations.delete(made.id)
    assert deleted.deleted and deleted.id == made.id
    with pytest.raises(openai.NotFoundError):
        c.conversations.retrieve(made.id)
    # The store's other memories are untouched, and search leaves the records out.
    with gitmem.open_store("notes", home=workspace) as s:
        assert s.list("/", scope="user-123") == []


def test_access_follows_the_token(workspace: Path, served: str) -> None:
    rw = client(served, token(workspace, actor="user:alice", stores={"notes": "rw"}))
    ro = client(served, token(workspace, actor="user:bob", stores={"notes": "ro"}))
    gitmem.create_store("elsewhere", home=workspace).close()  # a grant names a store that exists (by id)
    other = client(served, token(workspace, actor="user:eve", stores={"elsewhere": "rw"}))
    confined = client(served, token(workspace, actor="user:carol", stores={"notes": "rw"}, scope="other"))
    made = rw.conversations.create(extra_body={"memory_store": STORE, "scope": SCOPE})
    for c in (other, confined):
        with pytest.raises(openai.NotFoundError):
            c.conversations.retrieve(made.id)
        with pytest.raises(openai.NotFoundError):
            c.conversations.items.list(made.id)
    with pytest.raises(openai.NotFoundError):
        other.conversations.create(extra_body={"memory_store": STORE, "scope": SCOPE})
    assert ro.conversations.retrieve(made.id).id == made.id
    with pytest.raises(openai.PermissionDeniedError):
        ro.conversations.items.create(made.id, items=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.PermissionDeniedError):
        ro.conversations.create(extra_body={"memory_store": STORE, "scope": SCOPE})
    with pytest.raises(openai.PermissionDeniedError):
        ro.conversations.delete(made.id)
    assert ro.conversations.items.list(made.id).data == []
    with pytest.raises(openai.AuthenticationError):
        client(served, "gitmem_nope").conversations.retrieve(made.id)
    # A forged id: another store's id, a scope the token may not use, garbage.
    _ulid, store_id, _scope = conv.parse_id(made.id)
    forged = conv.public_id(store_id, "other", made.id[5:31])
    with pytest.raises(openai.NotFoundError):
        confined.conversations.retrieve(forged)  # its scope, but no such conversation
    for bad in ("conv_x", "conv_" + "0" * 26 + "AAAA", "../../etc"):
        with pytest.raises(openai.NotFoundError):
            rw.conversations.retrieve(bad)


def test_the_guard_refuses_an_item_with_an_error(workspace: Path, served: str) -> None:
    c = client(served, token(workspace, actor="user:alice", stores={"notes": "rw"}))
    made = c.conversations.create(extra_body={"memory_store": STORE, "scope": SCOPE})
    before = gitmem_log(workspace)
    key = "AKIA" + "ABCDEFGHIJKLMNOP"
    with pytest.raises(openai.BadRequestError) as caught:
        c.conversations.items.create(
            made.id,
            items=[
                {"role": "user", "content": "fine"},
                {"role": "user", "content": f"my key is {key} and secret aws_secret_access_key=" + "a" * 40},
            ],
        )
    assert caught.value.code == "guard_rejected"
    assert gitmem_log(workspace) == before  # nothing written: the whole change refused
    assert c.conversations.items.list(made.id).data == []


def test_bad_input_is_a_400_and_writes_nothing(workspace: Path, served: str) -> None:
    c = client(served, token(workspace, actor="user:alice", stores={"notes": "rw"}))
    made = c.conversations.create(extra_body={"memory_store": STORE, "scope": SCOPE})
    before = gitmem_log(workspace)
    bad_calls = [
        lambda: c.conversations.items.create(made.id, items=[{"role": "wizard", "content": "x"}]),
        lambda: c.conversations.items.create(made.id, items=[{"role": "user", "content": 5}]),
        lambda: c.conversations.items.create(made.id, items=[{"role": "user", "content": "x", "id": "../x"}]),
        lambda: c.conversations.items.create(made.id, items=[{"role": "user", "content": "x"}] * 21),
        lambda: c.conversations.items.list(made.id, limit=101),
        lambda: c.conversations.items.list(made.id, order="sideways"),  # type: ignore[arg-type]
        lambda: c.conversations.items.list(made.id, after="msg_nope"),
        lambda: c.conversations.update(made.id, metadata={"k": "v" * 600}),
        lambda: c.conversations.create(extra_body={"memory_store": STORE, "scope": {"value": "bad scope"}}),
        lambda: c.conversations.create(),
    ]
    for call in bad_calls:
        with pytest.raises(openai.BadRequestError):
            call()
    with pytest.raises(openai.NotFoundError):
        c.conversations.create(extra_body={"memory_store": {"name": "nosuch"}})
    assert gitmem_log(workspace) == before


def test_a_large_item_is_chunked_and_read_back_whole(workspace: Path, served: str) -> None:
    with gitmem.open_store("notes", home=workspace) as s:
        limits = s.settings.limits
        s.update_settings(limits=type(limits)(**{**limits.__dict__, "max_memory_bytes": 2000}))
    c = client(served, token(workspace, actor="user:alice", stores={"notes": "rw"}))
    made = c.conversations.create(extra_body={"memory_store": STORE, "scope": SCOPE})
    text = "ünïcödé " * 1000  # ~10 kB of UTF-8, two-byte characters at every chunk edge
    added = c.conversations.items.create(made.id, items=[{"role": "user", "content": text}])
    got = c.conversations.items.retrieve(added.data[0].id, conversation_id=made.id)
    assert got.content[0].text == text  # type: ignore[union-attr]
    with gitmem.open_store("notes", home=workspace) as s:
        sizes = [m.size for m in s.list("/conversations/", scope="user-123")]
    assert len(sizes) > 5 and max(sizes) <= 2000


def test_a_review_token_proposes_and_reads_its_own_proposal(workspace: Path, served: str) -> None:
    reviewed = client(
        served, token(workspace, actor="user:intern", stores={"notes": "rw"}, review=True, session="rv-1")
    )
    other = client(served, token(workspace, actor="user:alice", stores={"notes": "rw"}))
    made = reviewed.conversations.create(
        items=[{"role": "user", "content": "proposed"}], extra_body={"memory_store": STORE, "scope": SCOPE}
    )
    # The scope itself is untouched: the versions wait on the proposal.
    assert published(workspace) == []
    with pytest.raises(openai.NotFoundError):
        other.conversations.retrieve(made.id)
    # Its writer sees the conversation and keeps working on it.
    assert reviewed.conversations.retrieve(made.id).id == made.id
    reviewed.conversations.items.create(made.id, items=[{"role": "user", "content": "more"}])
    got = reviewed.conversations.items.list(made.id, order="asc")
    assert [i.content[0].text for i in got.data] == ["proposed", "more"]  # type: ignore[union-attr]
    assert published(workspace) == []


def test_redacting_an_item_version_erases_it_and_the_conversation_still_reads(
    workspace: Path, served: str
) -> None:
    c = client(served, token(workspace, actor="user:alice", stores={"notes": "rw"}))
    made = c.conversations.create(extra_body={"memory_store": STORE, "scope": SCOPE})
    first = c.conversations.items.create(made.id, items=[{"role": "user", "content": "my phone is 555-0100"}])
    c.conversations.items.delete(first.data[0].id, conversation_id=made.id)
    c.conversations.items.create(made.id, items=[{"role": "user", "content": "kept"}])
    with gitmem.open_store("notes", home=workspace) as s:
        (created,) = [
            v for v in s.versions(scope="user-123", operation="created") if first.data[0].id in v.path
        ]
        s.redact(created.id, reason="PII", actor="user:admin")
    assert [i.content[0].text for i in c.conversations.items.list(made.id).data] == ["kept"]  # type: ignore[union-attr]


def test_every_answer_validates_against_the_sdks_own_models(workspace: Path, served: str) -> None:
    """The client builds its models leniently; here each raw answer is validated strictly."""
    from openai.types.conversations import (
        Conversation,
        ConversationDeletedResource,
        ConversationItem,
        ConversationItemList,
    )
    from pydantic import TypeAdapter

    c = client(served, token(workspace, actor="user:alice", stores={"notes": "rw"})).with_raw_response
    made = c.conversations.create(
        items=[{"role": "user", "content": "hi"}], extra_body={"memory_store": STORE, "scope": SCOPE}
    ).http_response.json()
    Conversation.model_validate(made, strict=False)
    cid = made["id"]
    added = c.conversations.items.create(
        cid,
        items=[
            {"role": "assistant", "content": "hello"},
            {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}", "id": "fc_1"},
            {"type": "function_call_output", "call_id": "call_1", "output": "42"},
        ],
    ).http_response.json()
    ConversationItemList.model_validate(added)
    listed = c.conversations.items.list(cid, order="asc").http_response.json()
    page = ConversationItemList.model_validate(listed)
    assert [i.type for i in page.data] == ["message", "message", "function_call", "function_call_output"]
    one = c.conversations.items.retrieve(page.data[1].id, conversation_id=cid).http_response.json()
    TypeAdapter(ConversationItem).validate_python(one)
    Conversation.model_validate(c.conversations.update(cid, metadata={"a": "b"}).http_response.json())
    Conversation.model_validate(
        c.conversations.items.delete(page.data[0].id, conversation_id=cid).http_response.json()
    )
    ConversationDeletedResource.model_validate(c.conversations.delete(cid).http_response.json())
