"""The conversation methods of ``Store`` (gitmem/facade/conversation_ops.py), as a library caller
uses them: by ULID and scope, with the engine deciding access, review and attribution."""

from __future__ import annotations

import pytest

from gitmem.errors import AccessError, InvalidInputError, NotFoundError
from gitmem.model.caller import Caller
from gitmem.store import Store, parse_conversation_id


def _ulid(store: Store, cid: str, scope: str) -> str:
    ulid, store_id, in_scope = parse_conversation_id(cid)
    assert (store_id, in_scope) == (store.id, scope)
    return ulid


def test_a_conversation_from_creation_to_deletion(store: Store) -> None:
    made = store.create_conversation(
        scope="u1",
        scope_kind="user",
        metadata={"topic": "zoo"},
        items=[{"role": "user", "content": "hello"}],
        actor="user:alice",
    )
    ulid = _ulid(store, made.id, "u1")
    assert store.conversation(ulid, scope="u1") == made
    [first] = store.conversation_items(ulid, scope="u1")
    assert first["content"] == [{"type": "input_text", "text": "hello"}] and first["status"] == "completed"
    added = store.add_conversation_items(
        ulid, [{"role": "assistant", "content": "hi", "id": "msg_2"}], scope="u1", actor="user:alice"
    )
    assert added[0]["content"][0] == {"type": "output_text", "text": "hi", "annotations": []}
    assert [i["id"] for i in store.conversation_items(ulid, scope="u1")] == [first["id"], "msg_2"]
    assert store.conversation_item(ulid, "msg_2", scope="u1") == added[0]
    with pytest.raises(InvalidInputError, match="already in the conversation"):
        store.add_conversation_items(ulid, [{"role": "user", "content": "x", "id": "msg_2"}], scope="u1")
    new = store.update_conversation(ulid, {"topic": "birds"}, scope="u1", actor="user:alice")
    assert new.metadata == {"topic": "birds"} and store.conversation(ulid, scope="u1") == new
    assert store.delete_conversation_item(ulid, "msg_2", scope="u1", actor="user:alice") == new
    with pytest.raises(NotFoundError):
        store.conversation_item(ulid, "msg_2", scope="u1")
    assert store.delete_conversation(ulid, scope="u1", actor="user:alice") == new
    with pytest.raises(NotFoundError):
        store.conversation(ulid, scope="u1")
    assert store.conversation_items(ulid, scope="u1") == []
    assert {v.actor for v in store.versions(scope="u1")} == {"user:alice"}


def test_bad_input_is_refused_and_writes_nothing(store: Store) -> None:
    made = store.create_conversation(items=[{"role": "user", "content": "a"}])
    ulid = _ulid(store, made.id, "main")
    before = len(store.versions(scope="main"))
    with pytest.raises(InvalidInputError, match="role"):
        store.add_conversation_items(ulid, [{"role": "wizard", "content": "x"}])
    with pytest.raises(InvalidInputError, match="metadata"):
        store.update_conversation(ulid, {"k": 1})  # type: ignore[dict-item]
    with pytest.raises(InvalidInputError, match="expected its ULID"):
        store.conversation("../etc")
    with pytest.raises(NotFoundError):  # a conversation that is not there gains no items
        store.add_conversation_items("01ARZ3NDEKTSV4RRFFQ69G5FAV", [{"role": "user", "content": "x"}])
    assert len(store.versions(scope="main")) == before


def test_the_engine_decides_access_and_review(store: Store) -> None:
    made = store.create_conversation(scope="u1", items=[{"role": "user", "content": "a"}])
    ulid = _ulid(store, made.id, "u1")
    write = frozenset({"write"})  # not the default rights, which hold admin (every store, read-write)
    other = Caller(actor="user:eve", stores={store.id: "rw"}, scope="u2", rights=write)
    with pytest.raises(AccessError):
        store.conversation(ulid, scope="u1", caller=other)
    with pytest.raises(AccessError):
        store.conversation_items(ulid, scope="u1", caller=other)
    reader = Caller(actor="user:ro", stores={store.id: "ro"}, rights=write)
    assert store.conversation(ulid, scope="u1", caller=reader) == made
    with pytest.raises(AccessError):
        store.add_conversation_items(ulid, [{"role": "user", "content": "b"}], scope="u1", caller=reader)
    # A review-mode caller's items land on its proposal: it reads them on top, nobody else does.
    bob = Caller(
        actor="user:bob",
        session="s-bob",
        stores={store.id: "rw"},
        review=True,
        rights=write,
        session_bound=True,
    )
    store.add_conversation_items(
        ulid, [{"role": "user", "content": "b", "id": "msg_b"}], scope="u1", actor="user:bob", caller=bob
    )
    assert [i["id"] for i in store.conversation_items(ulid, scope="u1", caller=bob)][-1] == "msg_b"
    assert "msg_b" not in [i["id"] for i in store.conversation_items(ulid, scope="u1")]
    assert store.conversation_item(ulid, "msg_b", scope="u1", caller=bob)["id"] == "msg_b"
    with pytest.raises(NotFoundError):
        store.conversation_item(ulid, "msg_b", scope="u1", caller=reader)
