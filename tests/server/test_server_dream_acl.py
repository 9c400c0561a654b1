"""A dream against the store's ``acl.write`` (docs/dreams.md, "Who may ask"). Every change a dream
makes is written "under the same guard, limits and review rules as any caller", and the dreamer
writes as ``service:dreamer``, which an operator running dreams has to let write. So the
requester's own ``acl.write`` follows its dream (the engine's one check,
``gitmem.engine.access.dream_review``): an actor the acl shuts out of a scope may ask for a reviewed
dream there, never for one that publishes (403 before anything runs): not as a dream, nor by
setting or running a memory pipeline; a scheduled run is asked in the name of whoever set it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from dreamkit import Script, memory, text
from serverkit import client, running, token

import gitmem
from gitmem.engine import access
from gitmem.server import dream_runs
from gitmem.server.dream_jobs import DreamJobs, Pipeline
from gitmem.server.dreamer import DreamRunner
from tests.server.test_server_dreams import SESSION, contents, finished, inputs, seed

ACL = {"write": {"*": ["user:alice", "service:dreamer"]}}
PIPE = "/v1/gitmem/stores/notes/dream_pipeline"


@pytest.fixture
def env(workspace: Path, model: Script) -> Iterator[dict[str, Any]]:
    seed(workspace)
    with gitmem.open_store("notes", workspace) as s:
        s.update_settings(actor="user:alice", acl=ACL)
    bob = token(workspace, actor="user:bob", stores={"notes": "rw"})
    alice = token(workspace, actor="user:alice", stores={"notes": "rw"})
    with running(workspace) as url:
        b = client(url, bob)
        sid = next(s for s in b.beta.memory_stores.list() if s.name == "notes").id
        yield {"home": workspace, "sid": sid, "bob": b, "alice": client(url, alice), "model": model}


def _script(model: Script) -> None:
    model.turns[:] = [
        [
            text("Recording what the requester asked."),
            memory(1, command="create", path="/memories/bob.md", file_text="bob was here\n"),
        ],
        [text("Done.")],
    ]


def _dream(c: anthropic.Anthropic, sid: str, *, review: bool) -> Any:
    return c.beta.dreams.create(
        inputs=inputs(sid),
        model="m",
        instructions="Write /memories/bob.md saying bob was here.",
        output_behavior={"type": "update_existing", "memory_store_id": sid},
        extra_body={"gitmem": {"review": review}},
    )


def test_an_actor_the_acl_shuts_out_cannot_publish_through_a_dream(env: dict[str, Any]) -> None:
    b, sid, home, model = env["bob"], env["sid"], env["home"], env["model"]
    with pytest.raises(anthropic.PermissionDeniedError):  # the acl holds for bob's own writes
        b.beta.memory_stores.memories.create(sid, path="/bob.md", content="bob was here\n")
    _script(model)
    before = contents(home)
    with pytest.raises(anthropic.PermissionDeniedError) as refused:  # refused up front
        _dream(b, sid, review=False)
    assert "user:bob may not write scope 'main'" in str(refused.value)
    assert "reviewed dream" in str(refused.value)
    assert DreamJobs(home).all() == []  # nothing recorded, nothing run
    assert contents(home) == before


def test_it_may_ask_for_a_reviewed_dream_and_an_allowed_actor_still_publishes(env: dict[str, Any]) -> None:
    b, a, sid, home, model = env["bob"], env["alice"], env["sid"], env["home"], env["model"]
    _script(model)
    before = contents(home)
    d = finished(b, _dream(b, sid, review=True).id)
    assert d.status == "completed", d
    assert contents(home) == before  # a proposal, for a reviewer the acl lets write to decide
    pid = d.model_extra["gitmem"]["proposal_id"]
    with gitmem.open_store("notes", home) as s:
        assert s.proposal_paths(pid) == ["/bob.md"]  # the memory tool's /memories is the store's root
    _script(model)
    d = finished(a, _dream(a, sid, review=False).id)  # alice may write main: her dream publishes
    assert d.status == "completed", d
    assert contents(home)["/bob.md"] == "bob was here\n"


def test_pipelines_keep_the_rule_when_set_run_and_scheduled(
    env: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    b, a, home = env["bob"], env["alice"], env["home"]
    publish = {"model": "m", "output_behavior": "update_existing", "review": False}
    with pytest.raises(anthropic.PermissionDeniedError):  # bob may not set one that publishes
        b.post(PIPE, body=publish, cast_to=object)
    assert DreamJobs(home).pipeline(dream_runs.handle_of("notes", home)) is None
    p = a.post(PIPE, body={**publish, "every_seconds": 3600}, cast_to=object)
    assert p["review"] is False and p["set_by"] == "user:alice"  # type: ignore[index]
    with pytest.raises(anthropic.PermissionDeniedError):  # nor run alice's
        b.post(PIPE + "/run", cast_to=object)
    assert DreamJobs(home).all() == []
    runner = DreamRunner(home, workers=1)  # a scheduled run: asked as whoever set the pipeline
    try:
        (started,) = runner.run_due()
        d = DreamJobs(home).get(started)
        assert d.requested_by == "user:alice" and d.trigger == "schedule" and not d.review
    finally:
        runner.close()
    jobs = DreamJobs(home)
    p = jobs.pipeline(dream_runs.handle_of("notes", home))
    assert p is not None
    p.set_by, p.last_run_at = "user:bob", None  # a pipeline whose setter is shut out: skipped, logged
    jobs.save_pipeline(p)
    with gitmem.open_store("notes", home) as s:
        s.write("/notes/later.md", "later\n", session="sesn_work2", actor="user:alice")
    runner = DreamRunner(home, workers=1)
    try:
        assert runner.run_due() == []
    finally:
        runner.close()
    assert [x.id for x in DreamJobs(home).all()] == [started]
    assert "user:bob may not write scope 'main'" in caplog.text


def test_the_engine_rule(workspace: Path) -> None:
    acl = {
        "write": {"main": ["user:alice", "service:dreamer"], "team": ["*"]},
        "review": {"main": ["user:gated"]},
    }
    assert access.dream_review(acl, "main", "user:alice", False) is False
    assert access.dream_review(acl, "main", "user:bob", True) is True
    assert access.dream_review(acl, "main", "user:gated", False) is True  # acl.review: reviewed
    assert access.dream_review(acl, "team", "user:bob", False) is False
    assert access.dream_review({}, "main", "user:bob", False) is False  # no acl.write: anyone
    with pytest.raises(gitmem.ForbiddenError):
        access.dream_review(acl, "main", "user:bob", False)
    with pytest.raises(gitmem.ForbiddenError):
        access.dream_review(acl, "other", "user:alice", False)  # a scope no key matches is closed
    seed(workspace)
    with gitmem.open_store("notes", workspace) as s:
        s.update_settings(actor="user:alice", acl=ACL)
    jobs = DreamJobs(workspace)
    kw: dict[str, Any] = {"sessions": [SESSION], "model": "m", "behavior": "update_existing"}
    with pytest.raises(gitmem.ForbiddenError):  # the CLI's and every face's one path
        dream_runs.new_dream(jobs, workspace, "notes", review=False, requested_by="user:bob", **kw)
    assert dream_runs.new_dream(jobs, workspace, "notes", review=True, requested_by="user:bob", **kw).review
    with pytest.raises(gitmem.ForbiddenError):
        dream_runs.set_pipeline(
            jobs, workspace, Pipeline("notes", "m", review=False), requested_by="user:bob"
        )
