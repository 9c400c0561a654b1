"""Probe: a dream against the store's ``acl.write``. docs/dreams.md: every change a dream makes is
written "under the same guard, limits and review rules as any caller"; the requester's ``acl.review``
follows its dream (gitmem/server/dream_runs.py). The store's ``acl.write`` decides who may write a
scope (docs/configuration.md), so an actor it shuts out of a scope must not get its words published
there by asking a dream: the dreamer writes as ``service:dreamer``, which an operator running dreams
has to let write."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from dreamkit import Script, memory, text
from serverkit import client, running, token

import gitmem
from tests.server.test_server_dreams import contents, finished, inputs, seed

ACL = {"write": {"*": ["user:alice", "service:dreamer"]}}


@pytest.fixture
def env(workspace: Path, model: Script) -> Iterator[dict[str, Any]]:
    seed(workspace)
    with gitmem.open_store("notes", workspace) as s:
        s.update_settings(actor="user:alice", acl=ACL)
    bob = token(workspace, actor="user:bob", stores={"notes": "rw"})
    with running(workspace) as url:
        b = client(url, bob)
        sid = next(s for s in b.beta.memory_stores.list() if s.name == "notes").id
        yield {"home": workspace, "sid": sid, "bob": b, "model": model}


@pytest.mark.xfail(
    strict=True,
    reason="gitmem/server/dream_runs.py new_dream checks the requester's acl.review but not its "
    "acl.write: a dream publishes, as service:dreamer, what an acl-denied requester asked for",
)
def test_an_actor_the_acl_shuts_out_cannot_publish_through_a_dream(env: dict[str, Any]) -> None:
    b, sid, home, model = env["bob"], env["sid"], env["home"], env["model"]
    with pytest.raises(anthropic.PermissionDeniedError):  # the acl holds for bob's own writes
        b.beta.memory_stores.memories.create(sid, path="/bob.md", content="bob was here\n")
    model.turns[:] = [
        [
            text("Recording what the requester asked."),
            memory(1, command="create", path="/memories/bob.md", file_text="bob was here\n"),
        ],
        [text("Done.")],
    ]
    before = contents(home)
    try:
        d = b.beta.dreams.create(
            inputs=inputs(sid),
            model="m",
            instructions="Write /memories/bob.md saying bob was here.",
            output_behavior={"type": "update_existing", "memory_store_id": sid},
            extra_body={"gitmem": {"review": False}},
        )
        finished(b, d.id)
    except anthropic.PermissionDeniedError:
        pass  # refused up front: the guarantee holds
    assert contents(home) == before, "the dream published for an actor acl.write shuts out"
