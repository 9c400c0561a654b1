"""``/v1/responses`` with ``conversation=``: the official ``openai`` client through gitmem to a scripted
OpenAI-compatible model server on 127.0.0.1 (the example's), plain and streamed."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from serverkit import free_port, running, token  # noqa: E402

import gitmem  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "conversations_scripted.py"
BIND = {"memory_store": {"name": "notes"}, "scope": {"kind": "user", "value": "u1"}}


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("example_conversations_scripted", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ScriptedUpstream = _example().ScriptedUpstream


@pytest.fixture
def upstream() -> Iterator[Any]:
    with ScriptedUpstream() as u:
        yield u


@pytest.fixture
def served(workspace: Path, upstream: Any) -> Iterator[str]:
    gitmem.create_store("notes", home=workspace).close()
    with running(workspace, responses_upstream=upstream.url) as url:
        yield url


def client(url: str, secret: str) -> Any:
    return openai.OpenAI(base_url=url + "/v1", api_key=secret, max_retries=0)


def texts(items: list[Any]) -> list[str]:
    out = []
    for i in items:
        d = i if isinstance(i, dict) else i.model_dump()
        c = d["content"]
        out.append(c if isinstance(c, str) else "".join(p["text"] for p in c))
    return out


def stored(c: Any, cid: str) -> list[dict[str, Any]]:
    return [i.model_dump(exclude_none=True) for i in c.conversations.items.list(cid, order="asc", limit=100)]


def versions(workspace: Path) -> list[Any]:
    with gitmem.open_store("notes", home=workspace) as s:
        return s.versions(scope="u1")


def test_plain_and_streamed_turns_store_what_the_client_saw(
    workspace: Path, served: str, upstream: Any
) -> None:
    c = client(served, token(workspace, actor="user:alice", stores={"notes": "rw"}, session="s1"))
    conv = c.conversations.create(items=[{"role": "system", "content": "be brief"}], extra_body=BIND)
    first = c.responses.create(model="m", conversation=conv.id, input="hello")
    # The upstream got the whole conversation, then the new input, and never gitmem's conversation id.
    assert texts(upstream.requests[-1]["input"]) == ["be brief", "hello"]
    assert "conversation" not in upstream.requests[-1]
    items = stored(c, conv.id)
    assert texts(items) == ["be brief", "hello", first.output_text]
    assert items[-1] == first.output[0].model_dump(exclude_none=True)
    assert len(versions(workspace)) == 1 + 1 + 2  # meta, seed, then one batch of input + output

    events = []
    with c.responses.create(
        model="m", conversation=conv.id, input=[{"role": "user", "content": "again"}], stream=True
    ) as s:
        events = list(s)
    done = [e for e in events if e.type == "response.completed"]
    assert len(done) == 1 and [e.sequence_number for e in events] == list(range(len(events)))
    seen = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert texts(upstream.requests[-1]["input"]) == ["be brief", "hello", first.output_text, "again"]
    items = stored(c, conv.id)
    assert texts(items) == ["be brief", "hello", first.output_text, "again", seen]
    assert items[-1] == done[0].response.output[0].model_dump(exclude_none=True)
    vs = versions(workspace)
    assert len(vs) == 6 and {v.actor for v in vs} == {"user:alice"} and {v.session for v in vs} == {"s1"}


def test_an_upstream_failure_appends_nothing(workspace: Path, served: str, upstream: Any) -> None:
    c = client(served, token(workspace, actor="user:alice", stores={"notes": "rw"}))
    conv = c.conversations.create(extra_body=BIND)
    before = len(versions(workspace))
    with pytest.raises(openai.InternalServerError):
        c.responses.create(model="m", conversation=conv.id, input="please FAIL")
    with pytest.raises(openai.InternalServerError):
        c.responses.create(model="m", conversation=conv.id, input="please FAIL", stream=True)
    with c.responses.create(model="m", conversation=conv.id, input="BREAK now", stream=True) as s:
        try:
            events = list(s)
        except openai.APIError:
            events = []
    assert not any(e.type == "response.completed" for e in events)
    with c.responses.create(model="m", conversation=conv.id, input="BADEND please", stream=True) as s:
        events = list(s)
    assert events[-1].type == "response.failed"
    assert len(versions(workspace)) == before and stored(c, conv.id) == []
    assert len(upstream.requests) == 4


def test_an_unreachable_or_missing_upstream(workspace: Path) -> None:
    gitmem.create_store("notes", home=workspace).close()
    secret = token(workspace, actor="user:alice", stores={"notes": "rw"})
    with running(workspace, responses_upstream=f"http://127.0.0.1:{free_port()}/v1") as url:
        c = client(url, secret)
        conv = c.conversations.create(extra_body=BIND)
        with pytest.raises(openai.APIStatusError) as caught:
            c.responses.create(model="m", conversation=conv.id, input="hello")
        assert caught.value.status_code == 502
        assert stored(c, conv.id) == []
    with running(workspace) as url:
        with pytest.raises(openai.APIStatusError) as caught:
            client(url, secret).responses.create(model="m", conversation=conv.id, input="hello")
        assert caught.value.status_code == 501


def test_access_and_the_guard(workspace: Path, served: str, upstream: Any) -> None:
    rw = client(served, token(workspace, actor="user:alice", stores={"notes": "rw"}))
    ro = client(served, token(workspace, actor="user:bob", stores={"notes": "ro"}))
    gitmem.create_store("other", home=workspace).close()  # a grant needs a store (docs/stores.md)
    none = client(served, token(workspace, actor="user:eve", stores={"other": "rw"}))
    conv = rw.conversations.create(extra_body=BIND)
    with pytest.raises(openai.PermissionDeniedError):
        ro.responses.create(model="m", conversation=conv.id, input="hi")
    with pytest.raises(openai.NotFoundError):
        none.responses.create(model="m", conversation=conv.id, input="hi")
    with pytest.raises(openai.NotFoundError):
        rw.responses.create(model="m", conversation="conv_nope", input="hi")
    with pytest.raises(openai.BadRequestError):
        rw.responses.create(model="m", conversation=conv.id, input="hi", previous_response_id="resp_1")
    assert upstream.requests == []  # refused before the model was asked
    before = len(versions(workspace))
    key = "AKIA" + "ABCDEFGHIJKLMNOP"
    with pytest.raises(openai.BadRequestError) as caught:
        rw.responses.create(model="m", conversation=conv.id, input=f"my key {key}")
    assert caught.value.code == "guard_rejected"
    stream = rw.responses.create(model="m", conversation=conv.id, input=f"my key {key}", stream=True)
    with stream as s, pytest.raises(openai.APIError, match="guard|secret|refus"):
        list(s)
    assert len(versions(workspace)) == before and stored(rw, conv.id) == []


def test_without_a_conversation_it_forwards_and_stores_nothing(
    workspace: Path, served: str, upstream: Any
) -> None:
    c = client(served, token(workspace, actor="user:alice", stores={"notes": "rw"}))
    r = c.responses.create(model="m", input="stateless")
    assert "stateless" in r.output_text and upstream.requests[-1]["input"] == "stateless"
    assert versions(workspace) == []


def test_the_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _example().main(["--home", str(tmp_path / "ws")]) == 0
    out = capsys.readouterr().out
    assert "turn 1: turn 1: I saw 2 item(s), the last was 'My order is late.'" in out
    assert "turn 2 (streamed): turn 2: I saw 4 item(s), the last was 'Order 42, please check.'" in out
    log = out.split("$ gitmem log support --scope user-123\n", 1)[1].splitlines()
    assert len(log) == 6 and all(line.endswith("service:support-bot  sesn_demo") for line in log)
    assert log[-1].split()[:2] == ["created", log[-1].split()[1]] and log[-1].split()[1].endswith(
        "/conversation.json"
    )


def test_a_review_tokens_turn_lands_on_its_proposal(workspace: Path, served: str, upstream: Any) -> None:
    owner = client(served, token(workspace, actor="user:alice", stores={"notes": "rw"}))
    conv = owner.conversations.create(items=[{"role": "user", "content": "seed"}], extra_body=BIND)
    reviewed = client(served, token(workspace, actor="user:intern", stores={"notes": "rw"}, review=True))
    before = len(versions(workspace))
    first = reviewed.responses.create(model="m", conversation=conv.id, input="proposed turn")
    assert len(versions(workspace)) == before  # nothing published: it waits for a reviewer
    assert texts(stored(owner, conv.id)) == ["seed"]
    assert texts(stored(reviewed, conv.id)) == ["seed", "proposed turn", first.output_text]
    # Its next turn sends the model what it sees: its own proposed turn included.
    reviewed.responses.create(model="m", conversation=conv.id, input="next")
    assert texts(upstream.requests[-1]["input"]) == ["seed", "proposed turn", first.output_text, "next"]


def test_a_confined_token_and_bad_includes(workspace: Path, served: str) -> None:
    confined = client(served, token(workspace, actor="user:carol", stores={"notes": "rw"}, scope="u1"))
    with pytest.raises(openai.PermissionDeniedError):
        confined.conversations.create(extra_body={**BIND, "scope": {"kind": "user", "value": "u2"}})
    conv = confined.conversations.create(extra_body=BIND)
    with pytest.raises(openai.BadRequestError):
        confined.conversations.items.list(conv.id, include=["nonsense"])  # type: ignore[list-item]
    assert confined.conversations.items.list(conv.id, include=["message.output_text.logprobs"]).data == []


def test_the_answer_is_the_upstreams_byte_for_byte(workspace: Path, served: str, upstream: Any) -> None:
    import httpx2 as httpx

    secret = token(workspace, actor="user:alice", stores={"notes": "rw"})
    cid = client(served, secret).conversations.create(extra_body=BIND).id
    h = {"authorization": f"Bearer {secret}"}
    plain = httpx.post(
        served + "/v1/responses", json={"model": "m", "conversation": cid, "input": "a"}, headers=h
    )
    assert plain.status_code == 200 and plain.content == upstream.sent[-1]
    body = {"model": "m", "conversation": {"id": cid}, "input": "b", "stream": True}
    with httpx.stream("POST", served + "/v1/responses", json=body, headers=h) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        got = b"".join(r.iter_raw())
    assert got == upstream.sent[-1] and got.count(b"event: ") > 5
    assert len(stored(client(served, secret), cid)) == 4  # two turns, each its input and output
