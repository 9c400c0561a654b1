"""Conversations, responses and dreams through a node that is not the store's home: three real
nodes on a real PostgreSQL, the official ``openai`` client (conversations and responses, to the
examples' scripted model server) and the official ``anthropic`` client (dreams, to the dream tests'
scripted model). Each request is made at the home (a new conversation and a response name their
store in the body, a conversation's id names it in the path, a dream by its input; a dream's id
names no store and is found on the node that ran it), lands once there, and reaches the replicas."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

import gitmem
from gitmem.cluster.replication import refs_of
from gitmem.cluster.tokens import ClusterTokenStore
from gitmem.engine import proposals
from tests.cluster.test_cluster_nodes import cluster, the_copy
from tests.helpers import patience

openai = pytest.importorskip("openai")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "conversations_scripted.py"
SESSION = "sesn_work1"


def _upstream_class() -> Any:
    spec = importlib.util.spec_from_file_location("example_conversations_scripted", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ScriptedUpstream


@pytest.fixture
def upstream(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with _upstream_class()() as u:
        monkeypatch.setenv("GITMEM_RESPONSES_UPSTREAM", u.url)  # every node's /v1/responses
        yield u


def _texts(items: list[Any]) -> list[str]:
    out = []
    for i in items:
        c = (i if isinstance(i, dict) else i.model_dump())["content"]
        out.append(c if isinstance(c, str) else "".join(p["text"] for p in c))
    return out


def _level(tmp_path: Path, nodes: list[Any]) -> list[Path]:
    """Every copy, once the home's replication made them level with it."""
    nodes[0].node.tick()
    copies = [the_copy(tmp_path / f"n{i}") for i in range(3)]
    assert all(refs_of(c) == refs_of(copies[0]) for c in copies), "a replica is not level"
    return copies


def _versions(git_dir: Path) -> tuple[str, ...]:
    with gitmem.open_store(git_dir) as s:
        return tuple(v.id for v in s.versions(scope="u1"))


def test_conversations_and_responses_through_a_replica_node_land_once_at_the_home(
    database: str, tmp_path: Path, upstream: Any
) -> None:
    with cluster(database, tmp_path, n=3, replicas=2) as nodes:
        state = nodes[0].node.state
        tokens = ClusterTokenStore(state)
        _t, admin = tokens.create(actor="user:admin", admin=True)
        store = anthropic.Anthropic(base_url=nodes[0].url, api_key=admin).beta.memory_stores.create(
            name="notes"
        )
        assert state.placement(store.id).home == "n0"
        assert sorted(state.placement(store.id).replicas) == ["n1", "n2"]
        _t, alice = tokens.create(actor="user:alice", stores={"notes": "rw"}, session="s1")
        via = [openai.OpenAI(base_url=r.url + "/v1", api_key=alice, max_retries=0) for r in nodes]
        bind = {"memory_store": {"name": "notes"}, "scope": {"kind": "user", "value": "u1"}}
        # a new conversation names its store in the body: made through n1, at the home
        conv = via[1].conversations.create(items=[{"role": "system", "content": "be brief"}], extra_body=bind)
        # a response names it by its conversation (in the body): through n2
        first = via[2].responses.create(model="m", conversation=conv.id, input="hello")
        assert _texts(upstream.requests[-1]["input"]) == ["be brief", "hello"]
        # a conversation's own routes name the store by its id (in the path): through n1
        via[1].conversations.items.create(conv.id, items=[{"role": "user", "content": "and more"}])
        via[2].conversations.update(conv.id, metadata={"topic": "t"})
        copies = _level(tmp_path, nodes)
        # once each at the home (the replicas' copies take no write: their fences are shut)
        assert len({_versions(c) for c in copies}) == 1
        assert _versions(copies[0])
        for c in via:  # every node reads the home's conversation
            got = _texts(list(c.conversations.items.list(conv.id, order="asc", limit=100)))
            assert got == ["be brief", "hello", first.output_text, "and more"]
            assert c.conversations.retrieve(conv.id).metadata == {"topic": "t"}
        assert nodes[1].node.forwarded >= 2 and nodes[2].node.forwarded >= 2


def test_a_dream_through_a_replica_node_runs_at_the_home(database: str, tmp_path: Path, model: Any) -> None:
    from tests.dreamkit import SESSION_NOTE, STORE

    with cluster(database, tmp_path, n=3, replicas=2) as nodes:
        state = nodes[0].node.state
        _t, admin = ClusterTokenStore(state).create(actor="user:admin", admin=True)
        sdk = [anthropic.Anthropic(base_url=r.url, api_key=admin, max_retries=0) for r in nodes]
        store = sdk[0].beta.memory_stores.create(name="notes")
        assert state.placement(store.id).home == "n0"
        with gitmem.open_store(the_copy(tmp_path / "n0")) as s:  # at the home, which holds the lease
            for path, content in STORE.items():
                s.write(path, content, actor="user:alice")
            s.write(SESSION_NOTE[0], SESSION_NOTE[1], session=SESSION)
        _level(tmp_path, nodes)
        inputs = [
            {"type": "memory_store", "memory_store_id": store.id},
            {"type": "sessions", "session_ids": [SESSION]},
        ]
        made = sdk[1].beta.dreams.create(
            inputs=inputs, model="m", output_behavior={"type": "update_existing", "memory_store_id": store.id}
        )
        # the record is the home's alone: the dream ran there
        assert (tmp_path / "n0" / "dreams" / f"{made.id}.json").is_file()
        assert not (tmp_path / "n1" / "dreams").exists()
        deadline = patience(120)
        while (d := sdk[2].beta.dreams.retrieve(made.id)).status not in ("completed", "failed", "canceled"):
            assert time.monotonic() < deadline, "the dream never ended"
            time.sleep(0.1)
        assert d.status == "completed", d.error
        assert not (tmp_path / "n2" / "dreams").exists()
        copies = _level(tmp_path, nodes)
        proposal = d.model_extra["gitmem"]["proposal_id"]
        for c in copies:  # the dream's proposal (its two changes, once) on every copy
            with gitmem.open_store(c) as s:
                changes = [(v.operation, v.path) for v in proposals.versions(s.core, proposal)]
                assert changes == [("deleted", "/prefs/coffee-again.md"), ("modified", "/facts/office.md")]
                assert proposals.get(s.core, proposal).owner == d.session_id
        # a second store homed on n1, and a dream of it: the records are on two nodes now
        other = sdk[1].beta.memory_stores.create(name="other")
        assert state.placement(other.id).home == "n1"
        with gitmem.open_store(tmp_path / "n1" / "stores" / f"{other.id}.git") as s:
            s.write("/o.md", "other\n", session=SESSION)
        second = sdk[0].beta.dreams.create(
            inputs=[{"type": "memory_store", "memory_store_id": other.id}, inputs[1]],
            model="m",
            output_behavior={"type": "update_existing", "memory_store_id": other.id},
        )
        assert (tmp_path / "n1" / "dreams" / f"{second.id}.json").is_file()
        # every node lists both, newest first, and pages through them one at a time
        for c in sdk:
            assert [x.id for x in c.beta.dreams.list()] == [second.id, made.id]
            page = c.beta.dreams.list(limit=1)
            assert [x.id for x in page.data] == [second.id]
            assert [x.id for x in page.get_next_page().data] == [made.id]
        # an archive through the third node reaches the record at the home
        assert sdk[2].beta.dreams.archive(made.id).archived_at is not None
        assert sdk[1].beta.dreams.retrieve(made.id).archived_at is not None
        with pytest.raises(anthropic.NotFoundError):
            sdk[1].beta.dreams.retrieve("drm_" + "0" * 26)
