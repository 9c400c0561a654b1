"""Dreams under attack (docs/dreams.md): tokens that may not, a review token asking to skip review,
a model that sends nonsense or paths outside the store, a model endpoint that is down, a job file
that is corrupt, and the concurrency limit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from dreamkit import Script, memory, text
from serverkit import client, free_port, running, token
from test_server_dreams import SESSION, contents, finished, inputs, seed, wait_for

import gitmem
from gitmem.engine import proposals
from gitmem.server.dream_jobs import DreamJobs


@pytest.fixture
def model(model: Script, monkeypatch: pytest.MonkeyPatch) -> Script:
    """The shared scripted model (tests/dreamkit.py), with one dream worker (the concurrency limit)."""
    monkeypatch.setenv("GITMEM_DREAM_WORKERS", "1")
    return model


@pytest.fixture
def env(workspace: Path, model: Script) -> Iterator[dict[str, Any]]:
    seed(workspace)
    with gitmem.create_store("other", home=workspace) as s:
        s.write("/o.md", "other\n", session=SESSION)
    tokens = {
        "writer": token(workspace, actor="user:bob", stores={"notes": "rw", "other": "rw"}),
        "review": token(workspace, actor="user:agent", stores={"notes": "rw"}, review=True),
        "scoped": token(workspace, actor="user:team", stores={"notes": "rw"}, scope="team"),
        "outsider": token(workspace, actor="user:eve", stores={"other": "rw"}),
        "reader": token(workspace, actor="user:ro", stores={"notes": "ro"}),
    }
    with running(workspace) as url:
        clients = {k: client(url, v) for k, v in tokens.items()}
        sid = next(s for s in clients["writer"].beta.memory_stores.list() if s.name == "notes").id
        yield {"home": workspace, "sid": sid, "model": model, **clients}


def update(sid: str) -> dict[str, Any]:
    return {"type": "update_existing", "memory_store_id": sid}


def test_tokens_that_may_not_are_refused_and_a_review_token_cannot_skip_review(env: dict[str, Any]) -> None:
    sid, home = env["sid"], env["home"]
    before = contents(home)
    # no grant on the store: as an unknown store (docs/access.md: no existence oracle)
    with pytest.raises(anthropic.NotFoundError):
        env["outsider"].beta.dreams.create(inputs=inputs(sid), model="m", output_behavior=update(sid))
    with pytest.raises(anthropic.PermissionDeniedError):  # a grant without the right: 403
        env["reader"].beta.dreams.create(inputs=inputs(sid), model="m", output_behavior=update(sid))
    with pytest.raises(anthropic.PermissionDeniedError):  # another scope than its own
        env["scoped"].beta.dreams.create(
            inputs=inputs(sid),
            model="m",
            output_behavior=update(sid),
            extra_body={"gitmem": {"scope": "main"}},
        )
    d = env["review"].beta.dreams.create(
        inputs=inputs(sid), model="m", output_behavior=update(sid), extra_body={"gitmem": {"review": False}}
    )
    d = finished(env["review"], d.id)
    assert d.status == "completed" and d.model_extra["gitmem"]["review"] is True
    assert d.model_extra["gitmem"]["proposal_id"] and contents(home) == before
    # another store's token does not even learn the dream exists
    with pytest.raises(anthropic.NotFoundError):
        env["outsider"].beta.dreams.retrieve(d.id)
    with pytest.raises(anthropic.NotFoundError):
        env["outsider"].beta.dreams.cancel(d.id)
    assert d.id not in [x.id for x in env["outsider"].beta.dreams.list()]
    # unknown fields, forged ids
    with pytest.raises(anthropic.BadRequestError):
        env["writer"].beta.dreams.create(
            inputs=inputs(sid), model="m", extra_body={"gitmem": {"actor": "user:root"}}
        )
    with pytest.raises(anthropic.NotFoundError):  # no route: a path parameter holds no "/"
        env["writer"].beta.dreams.retrieve("drm_../../tokens")
    with pytest.raises(anthropic.BadRequestError):
        env["writer"].beta.dreams.retrieve("drm_..%2f..%2ftokens")
    with pytest.raises(anthropic.BadRequestError):
        env["writer"].beta.dreams.list(statuses=["done"])  # type: ignore[list-item]


def test_a_model_sending_nonsense_or_escaping_the_store_changes_nothing(env: dict[str, Any]) -> None:
    sid, home, model = env["sid"], env["home"], env["model"]
    model.turns[:] = [
        [
            text("Trying things."),
            memory(1, command="create", path="/memories/../../escape.md", file_text="x"),
            memory(2, command="create", path="/etc/passwd", file_text="x"),
            memory(3, command="str_replace", path="/memories/facts/office.md"),  # no old_str
            memory(4, command="format_disk"),
            {"type": "tool_use", "id": "toolu_0005", "name": "shell", "input": {"cmd": "rm -rf /"}},
            {"type": "tool_use", "id": "toolu_0006", "name": "memory", "input": "not an object"},
            memory(7, command="view", path=123),
            memory(8, command="view", path="/memories/facts/office.md", view_range=["a", {}]),
            memory(9, command="create", path="/memories/x.md", file_text={"not": "text"}),
        ],
        [text("Done.")],
    ]
    before = contents(home)
    d = finished(
        env["writer"],
        env["writer"]
        .beta.dreams.create(
            inputs=inputs(sid),
            model="m",
            output_behavior=update(sid),
            extra_body={"gitmem": {"review": False}},
        )
        .id,
    )
    assert d.status == "completed" and d.model_extra["gitmem"]["changes"] == []
    results = model.requests[1]["messages"][-1]["content"]
    assert len(results) == 9 and all(r["is_error"] for r in results)
    assert contents(home) == before
    assert not (home / "escape.md").exists() and not (home.parent / "escape.md").exists()


def test_a_model_endpoint_that_is_down_fails_the_dream(
    env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import gitmem.server.dreamer as dreamer

    monkeypatch.setenv("GITMEM_DREAM_BASE_URL", f"http://127.0.0.1:{free_port()}")
    runner = dreamer.DreamRunner(env["home"], workers=1)
    from gitmem.server.dream_runs import new_dream

    d = new_dream(
        DreamJobs(env["home"]),
        env["home"],
        "notes",
        sessions=[SESSION],
        model="m",
        behavior="update_existing",
    )
    runner.run(d.id)
    runner.close()
    got = DreamJobs(env["home"]).get(d.id)
    assert got.status == "failed" and got.error is not None and "Connection" in got.error["message"]
    assert got.worker_stopped and got.ended_at


def test_the_concurrency_limit_keeps_the_second_dream_pending(env: dict[str, Any]) -> None:
    w, model = env["writer"], env["model"]
    model.gate_turn = 1
    sid = env["sid"]
    other = next(s.id for s in w.beta.memory_stores.list() if s.name == "other")
    first = w.beta.dreams.create(inputs=inputs(sid), model="m", output_behavior=update(sid))
    wait_for(model.reached.is_set, "the first dream's model call")
    second = w.beta.dreams.create(inputs=inputs(other), model="m", output_behavior=update(other))
    assert w.beta.dreams.retrieve(second.id).status == "pending"  # one worker (GITMEM_DREAM_WORKERS=1)
    assert w.beta.dreams.retrieve(first.id).status == "running"
    model.release.set()
    assert finished(w, first.id).status == "completed"
    assert finished(w, second.id).status == "completed"


def test_a_corrupt_job_file_is_skipped_by_the_listing_and_refused_by_id(env: dict[str, Any]) -> None:
    w, sid = env["writer"], env["sid"]
    d = finished(w, w.beta.dreams.create(inputs=inputs(sid), model="m", output_behavior=update(sid)).id)
    bad = "drm_01" + "1" * 24
    (env["home"] / "dreams" / f"{bad}.json").write_text("{not json", encoding="utf-8")
    assert [x.id for x in w.beta.dreams.list()] == [d.id]
    with pytest.raises(anthropic.InternalServerError):
        w.with_options(max_retries=0).beta.dreams.retrieve(bad)
    with gitmem.open_store("notes", env["home"]) as s:
        assert proposals.get(s.core, d.model_extra["gitmem"]["proposal_id"]).status == "open"
    assert json.loads((env["home"] / "dreams" / f"{d.id}.json").read_text())["status"] == "completed"


def test_the_stores_own_review_rule_outranks_a_dream_asking_for_none(env: dict[str, Any]) -> None:
    w, sid, home = env["writer"], env["sid"], env["home"]
    with gitmem.open_store("notes", home) as s:
        s.update_settings(acl={"review": {"*": ["service:*"]}}, actor="user:admin")
    before = contents(home)
    d = w.beta.dreams.create(
        inputs=inputs(sid), model="m", output_behavior=update(sid), extra_body={"gitmem": {"review": False}}
    )
    d = finished(w, d.id)
    ext = d.model_extra["gitmem"]
    assert d.status == "completed" and ext["proposal_id"] is not None
    assert [c["landed"] for c in ext["changes"]] == [False, False]
    assert contents(home) == before
