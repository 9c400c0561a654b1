"""GitmemSession: the Agents SDK Session protocol on a real gitmem store, against the SDK's SQLiteSession."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents.memory import Session, SessionSettings, SQLiteSession  # noqa: E402

from gitmem.errors import InvalidInputError  # noqa: E402
from gitmem.integrations.openai_agents import GitmemSession  # noqa: E402
from gitmem.store import Store  # noqa: E402

PATH = "/conversations/conv_1.jsonl"


def user(text: str) -> Any:
    return {"role": "user", "content": text}


def assistant(text: str) -> Any:
    return {
        "type": "message",
        "role": "assistant",
        "id": f"msg_{text}",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def session(store: Store) -> GitmemSession:
    return GitmemSession("conv_1", store, actor="user:alice", session="sesn_agents")


def test_it_implements_the_session_protocol(session: GitmemSession) -> None:
    assert isinstance(session, Session)
    assert session.session_id == "conv_1"
    assert session.session_settings == SessionSettings()


def test_add_then_get_in_order(session: GitmemSession) -> None:
    run(session.add_items([user("hi"), assistant("hello")]))
    run(session.add_items([user("tea?")]))
    assert run(session.get_items()) == [user("hi"), assistant("hello"), user("tea?")]
    assert run(session.get_items(limit=2)) == [assistant("hello"), user("tea?")]


def test_the_conversation_is_one_json_lines_memory(session: GitmemSession, store: Store) -> None:
    run(session.add_items([user("thé"), user("line\nbreak")]))
    text = store.read(PATH).content
    assert text == '{"role": "user", "content": "thé"}\n{"role": "user", "content": "line\\nbreak"}\n'
    assert [json.loads(line) for line in (text or "").splitlines()] == [user("thé"), user("line\nbreak")]


def test_each_call_that_changes_something_is_one_version(session: GitmemSession, store: Store) -> None:
    run(session.add_items([user("a"), user("b")]))
    run(session.add_items([]))
    run(session.pop_item())
    run(session.clear_session())
    run(session.clear_session())
    run(session.pop_item())
    vs = store.versions(PATH)
    assert [v.operation for v in vs] == ["deleted", "modified", "created"]
    assert {(v.actor, v.session) for v in vs} == {("user:alice", "sesn_agents")}


def test_pop_returns_the_newest_item_and_none_when_empty(session: GitmemSession) -> None:
    assert run(session.pop_item()) is None
    run(session.add_items([user("a"), user("b")]))
    assert run(session.pop_item()) == user("b")
    assert run(session.pop_item()) == user("a")
    assert run(session.pop_item()) is None
    assert run(session.get_items()) == []


def test_session_settings_limit_is_the_default(store: Store) -> None:
    s = GitmemSession("c", store, session_settings=SessionSettings(limit=1))
    run(s.add_items([user("a"), user("b")]))
    assert run(s.get_items()) == [user("b")]
    assert run(s.get_items(limit=5)) == [user("a"), user("b")]


def test_conversations_are_apart(store: Store) -> None:
    a, b = GitmemSession("a", store), GitmemSession("b", store)
    run(a.add_items([user("for a")]))
    assert run(b.get_items()) == []
    run(b.clear_session())
    assert run(a.get_items()) == [user("for a")]


def test_session_ids_with_awkward_characters_are_one_file(store: Store) -> None:
    s = GitmemSession("team/alice 50%", store)
    run(s.add_items([user("x")]))
    assert [m.path for m in store.list("/")] == ["/conversations/team%2Falice 50%25.jsonl"]
    assert run(GitmemSession("team/alice 50%", store).get_items()) == [user("x")]


def test_bad_lines_are_skipped_like_sqlite_skips_bad_rows(session: GitmemSession, store: Store) -> None:
    store.write(PATH, '{"role": "user", "content": "a"}\nnot json\n{"role": "user", "content": "b"}\n{oops\n')
    assert run(session.get_items()) == [user("a"), user("b")]
    assert run(session.get_items(limit=1)) == [user("b")]
    assert run(session.pop_item()) == user("b")
    assert store.read(PATH).content == '{"role": "user", "content": "a"}\nnot json\n'


def test_unicode_line_separators_stay_inside_their_item(session: GitmemSession) -> None:
    run(session.add_items([user("a\u2028b\x85c"), user("lone \ud800")]))
    assert run(session.get_items()) == [user("a\u2028b\x85c"), user("lone \ud800")]


def test_concurrent_appends_lose_nothing(store: Store) -> None:
    s = GitmemSession("c", store)

    async def go() -> None:
        await asyncio.gather(*(s.add_items([user(str(i))]) for i in range(10)))

    run(go())
    assert sorted(i["content"] for i in run(s.get_items())) == sorted(str(i) for i in range(10))


def test_two_objects_on_one_conversation_see_each_other(store: Store, workspace: Path) -> None:
    import gitmem

    other = gitmem.open_store("notes", home=workspace)
    a, b = GitmemSession("c", store), GitmemSession("c", other)
    run(a.add_items([user("1")]))
    run(b.add_items([user("2")]))
    run(a.add_items([user("3")]))
    assert run(b.get_items()) == [user("1"), user("2"), user("3")]
    other.close()


def test_bad_arguments_are_refused(store: Store) -> None:
    for kw in ({"scope": "no such/scope"}, {"actor": "bob"}, {"prefix": "conversations"}):
        with pytest.raises(InvalidInputError):
            GitmemSession("c", store, **kw)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        GitmemSession("x" * 300, store)
    with pytest.raises(TypeError):
        GitmemSession(7, store)  # type: ignore[arg-type]


def test_content_over_the_limit_is_refused_and_nothing_written(session: GitmemSession, store: Store) -> None:
    from gitmem.errors import LimitExceededError

    run(session.add_items([user("a")]))
    with pytest.raises(LimitExceededError):
        run(session.add_items([user("x" * (store.settings.limits.max_memory_bytes + 1))]))
    assert run(session.get_items()) == [user("a")]
    assert len(store.versions(PATH)) == 1


# ---------------------------------------------------------------------- conformance with SQLiteSession
async def _script(s: Any, rng: random.Random) -> list[Any]:
    out: list[Any] = []
    n = 0
    for _ in range(40):
        action = rng.choices(["add", "get", "pop", "clear"], [5, 4, 2, 1])[0]
        if action == "add":
            items = []
            for _ in range(rng.randint(0, 3)):
                n += 1
                items.append(rng.choice([user, assistant])(f"m{n} ü\u2028"))
            out.append(await s.add_items(items))
        elif action == "get":
            out.append(await s.get_items(rng.choice([None, 0, 1, 2, 5, 100, -1])))
        elif action == "pop":
            out.append(await s.pop_item())
        else:
            out.append(await s.clear_session())
    out.append(await s.get_items())
    return out


@pytest.mark.parametrize("seed", range(5))
def test_same_sequence_same_results_as_sqlite_session(store: Store, seed: int) -> None:
    ours = run(_script(GitmemSession(f"conv_{seed}", store), random.Random(seed)))
    sqlite = SQLiteSession(f"conv_{seed}")
    theirs = run(_script(sqlite, random.Random(seed)))
    sqlite.close()
    assert ours == theirs
