"""Anthropic's Dreams API on a real ``gitmem serve``, driven by the official SDK's ``beta.dreams``,
with the model a scripted Messages API server on 127.0.0.1 (tests/dreamkit.py): what a dream
changes lands in its proposal (update_existing) or a copied store (create_new), attributed to the
dream's session and actor, with the model's reasoning per change (docs/dreams.md)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from dreamkit import (
    MERGE_REASON,
    SESSION_NOTE,
    STALE_REASON,
    STORE,
    Script,
    memory,
    text,
)
from serverkit import client, running, token

import gitmem
from gitmem.audit import review
from gitmem.engine import proposals
from gitmem.server.dream_jobs import DreamJobs

SESSION = "sesn_work1"


def wait_for(fn: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def seed(home: Path) -> None:
    with gitmem.create_store("notes", home=home) as s:
        for path, content in STORE.items():
            s.write(path, content, actor="user:alice")
        s.write(SESSION_NOTE[0], SESSION_NOTE[1], session=SESSION)


@pytest.fixture
def env(workspace: Path, model: Script) -> Iterator[dict[str, Any]]:
    seed(workspace)
    writer = token(workspace, actor="user:bob", stores={"notes": "rw"})
    reader = token(workspace, actor="user:carol", stores={"notes": "ro"})
    admin = token(workspace, actor="user:admin", admin=True)
    with running(workspace) as url:
        w = client(url, writer)
        sid = next(s for s in w.beta.memory_stores.list() if s.name == "notes").id
        yield {
            "home": workspace,
            "url": url,
            "writer": w,
            "reader": client(url, reader),
            "admin": client(url, admin),
            "sid": sid,
            "model": model,
        }


def inputs(sid: str, sessions: list[str] | None = None) -> list[dict[str, Any]]:
    return [
        {"type": "memory_store", "memory_store_id": sid},
        {"type": "sessions", "session_ids": sessions or [SESSION]},
    ]


def finished(c: anthropic.Anthropic, dream_id: str) -> Any:
    return wait_for(
        lambda: (d := c.beta.dreams.retrieve(dream_id)).status in ("completed", "failed", "canceled") and d,
        f"dream {dream_id} to end",
    )


def contents(home: Path, name: str = "notes") -> dict[str, str]:
    with gitmem.open_store(name, home) as s:
        return {m.path: s.read(m.path).content for m in s.list()}  # type: ignore[union-attr]


def test_update_existing_lands_exactly_the_scripted_changes_as_a_proposal(env: dict[str, Any]) -> None:
    w, sid, home = env["writer"], env["sid"], env["home"]
    before = contents(home)
    d = w.beta.dreams.create(
        inputs=inputs(sid),
        model="claude-sonnet-4-6",
        instructions="Merge duplicates and fix stale facts.",
        output_behavior={"type": "update_existing", "memory_store_id": sid},
    )
    assert d.id.startswith("drm_") and d.status == "pending" and d.outputs == []
    assert d.usage.input_tokens == 0 and d.model.id == "claude-sonnet-4-6"
    d = finished(w, d.id)
    assert d.status == "completed", d.error
    assert d.ended_at is not None and d.error is None and d.session_id and d.session_id.startswith("sesn_")
    assert d.outputs[0].memory_store_id == sid
    assert d.usage.input_tokens == 100 + 101 + 102 + 103 and d.usage.output_tokens == 40
    ext = d.model_extra["gitmem"]
    # nothing reached the scope
    assert contents(home) == before
    # the proposal holds exactly the two changes, by the dream's session and actor
    with gitmem.open_store("notes", home) as s:
        p = proposals.get(s.core, ext["proposal_id"])
        assert p.status == "open" and p.owner == d.session_id
        vs = proposals.versions(s.core, p.id)
        assert [(v.operation, v.path) for v in vs] == [
            ("deleted", "/prefs/coffee-again.md"),
            ("modified", "/facts/office.md"),
        ]
        assert {(v.actor, v.session) for v in vs} == {("service:dreamer", d.session_id)}
        diffs = {x.path: x for x in review.diff(s.core, p.id)}
        assert set(diffs) == {"/prefs/coffee-again.md", "/facts/office.md"}
    assert [(c["path"], c["operation"], c["reasoning"], c["landed"]) for c in ext["changes"]] == [
        ("/prefs/coffee-again.md", "deleted", MERGE_REASON, False),
        ("/facts/office.md", "modified", STALE_REASON, False),
    ]
    # the model was given the session's versions and the instructions
    first = env["model"].requests[0]["messages"][0]["content"]
    assert "Lisbon" in first and "Merge duplicates and fix stale facts." in first
    # a reviewer accepts one change: only that one lands
    accepted = env["admin"].post(
        f"/v1/gitmem/stores/notes/proposals/{p.id}/accept",
        body={"paths": ["/facts/office.md"]},
        cast_to=object,
    )
    assert accepted["proposal"]["status"] == "open"
    after = contents(home)
    assert after["/facts/office.md"] == "The office is in Lisbon.\n"
    assert after["/prefs/coffee-again.md"] == STORE["/prefs/coffee-again.md"]


def _refs_and_objects(path: Path) -> tuple[str, str]:
    refs = subprocess.run(
        ["git", "--git-dir", str(path), "for-each-ref"], capture_output=True, text=True, check=True
    )
    objects = subprocess.run(
        ["git", "--git-dir", str(path), "cat-file", "--batch-all-objects", "--batch-check"],
        capture_output=True,
        text=True,
        check=True,
    )
    return refs.stdout, objects.stdout


def test_create_new_copies_the_store_with_history_and_leaves_the_input_byte_identical(
    env: dict[str, Any],
) -> None:
    a, sid, home = env["admin"], env["sid"], env["home"]
    with gitmem.open_store("notes", home) as s:
        path, history = s.path, [v.id for v in s.versions()]
        settings = (s.path / "gitmem.yaml").read_bytes()
    before = _refs_and_objects(path)
    d = a.beta.dreams.create(inputs=inputs(sid), model={"id": "claude-opus-4-7", "speed": "standard"})
    assert d.output_behavior.type == "create_new"
    d = finished(a, d.id)
    assert d.status == "completed", d.error
    out_id = d.outputs[0].memory_store_id
    assert out_id != sid
    assert _refs_and_objects(path) == before and (path / "gitmem.yaml").read_bytes() == settings
    name = d.model_extra["gitmem"]["output_store"]
    out = contents(home, name)
    assert "/prefs/coffee-again.md" not in out and out["/facts/office.md"] == "The office is in Lisbon.\n"
    with gitmem.open_store(name, home) as s:
        assert s.settings.id == out_id
        ids = [v.id for v in s.versions()]
        assert ids[-len(history) :] == history  # the input's history is kept under the dream's versions
        mine = [v for v in s.versions() if v.id not in history]
        assert {(v.actor, v.session) for v in mine} == {("service:dreamer", d.session_id)}
    assert all(c["landed"] for c in d.model_extra["gitmem"]["changes"])
    # a writer token may not create a store
    with pytest.raises(anthropic.PermissionDeniedError):
        env["writer"].beta.dreams.create(inputs=inputs(sid), model="m")


def test_two_update_existing_dreams_at_once_conflict(env: dict[str, Any]) -> None:
    w, sid, model = env["writer"], env["sid"], env["model"]
    model.gate_turn = 1
    behavior = {"type": "update_existing", "memory_store_id": sid}
    first = w.beta.dreams.create(inputs=inputs(sid), model="m", output_behavior=behavior)
    with pytest.raises(anthropic.ConflictError):
        w.beta.dreams.create(inputs=inputs(sid), model="m", output_behavior=behavior)
    model.release.set()
    assert finished(w, first.id).status == "completed"
    second = w.beta.dreams.create(inputs=inputs(sid), model="m", output_behavior=behavior)
    assert finished(w, second.id).status == "completed"


def test_cancel_mid_run_keeps_the_partial_writes_in_the_proposal(env: dict[str, Any]) -> None:
    w, sid, model, home = env["writer"], env["sid"], env["model"], env["home"]
    model.gate_turn = 2  # after the merge, before the stale fact
    before = contents(home)
    d = w.beta.dreams.create(
        inputs=inputs(sid), model="m", output_behavior={"type": "update_existing", "memory_store_id": sid}
    )
    wait_for(model.reached.is_set, "the model's third turn")
    c = w.beta.dreams.cancel(d.id)
    assert c.status == "canceled" and c.ended_at is not None
    assert w.beta.dreams.cancel(d.id).status == "canceled"  # unchanged
    # the model's answer never comes (the gate holds it): the worker lets go all the same
    jobs = DreamJobs(home)
    wait_for(lambda: jobs.get(d.id).worker_stopped, "the worker to let go mid-model-call")
    assert not model.release.is_set() and jobs.stopped(jobs.get(d.id))
    d = w.beta.dreams.retrieve(d.id)
    ext = d.model_extra["gitmem"]
    assert [c["path"] for c in ext["changes"]] == ["/prefs/coffee-again.md"]
    assert contents(home) == before
    with gitmem.open_store("notes", home) as s:
        vs = proposals.versions(s.core, ext["proposal_id"])
        assert [(v.operation, v.path) for v in vs] == [("deleted", "/prefs/coffee-again.md")]
    archived = w.beta.dreams.archive(d.id)
    assert archived.archived_at is not None
    model.release.set()  # the abandoned request's answer, when it comes, changes nothing
    wait_for(lambda: len(model.requests) >= 3, "the abandoned request")
    assert jobs.get(d.id).status == "canceled" and jobs.get(d.id).changes == ext["changes"]
    assert d.id not in [x.id for x in w.beta.dreams.list()]
    assert d.id in [x.id for x in w.beta.dreams.list(include_archived=True)]


def test_refusals_list_filters_and_pages(env: dict[str, Any]) -> None:
    w, r, sid, model = env["writer"], env["reader"], env["sid"], env["model"]
    behavior = {"type": "update_existing", "memory_store_id": sid}
    d = finished(w, w.beta.dreams.create(inputs=inputs(sid), model="m", output_behavior=behavior).id)
    with pytest.raises(anthropic.BadRequestError):
        w.beta.dreams.cancel(d.id)  # completed
    model.gate_turn = 1
    running_one = w.beta.dreams.create(inputs=inputs(sid), model="m", output_behavior=behavior)
    with pytest.raises(anthropic.BadRequestError):
        w.beta.dreams.archive(running_one.id)
    assert [x.id for x in w.beta.dreams.list(statuses=["completed"])] == [d.id]
    both = [x.id for x in w.beta.dreams.list(statuses=["completed", "pending", "running"])]
    assert both == [running_one.id, d.id]  # newest first
    page = w.beta.dreams.list(limit=1)
    assert [x.id for x in page.data] == [running_one.id] and page.next_page
    assert [x.id for x in page.get_next_page().data] == [d.id]
    assert [x.id for x in w.beta.dreams.list(limit=1)] == [running_one.id, d.id]  # auto-paging
    assert [x.id for x in w.beta.dreams.list(created_at_lt=running_one.created_at)] == [d.id]
    # a read-only token sees dreams but may not write with one
    assert d.id in [x.id for x in r.beta.dreams.list()]
    with pytest.raises(anthropic.PermissionDeniedError):
        r.beta.dreams.create(inputs=inputs(sid), model="m", output_behavior=behavior)
    with pytest.raises(anthropic.PermissionDeniedError):
        r.beta.dreams.cancel(running_one.id)
    model.release.set()
    finished(w, running_one.id)
    # bad requests
    for bad in (
        {"instructions": ""},
        {"instructions": "x" * 4097},
        {"inputs": inputs(sid, [SESSION, SESSION])},
        {"inputs": inputs(sid)[:1]},
        {"output_behavior": {"type": "update_existing", "memory_store_id": "memstore_01" + "0" * 24}},
    ):
        kw: dict[str, Any] = {"inputs": inputs(sid), "model": "m", "output_behavior": behavior, **bad}
        with pytest.raises(anthropic.BadRequestError):
            w.beta.dreams.create(**kw)
    with pytest.raises(anthropic.NotFoundError):
        w.beta.dreams.create(inputs=inputs(sid, ["sesn_never"]), model="m", output_behavior=behavior)
    with pytest.raises(anthropic.NotFoundError):
        w.beta.dreams.retrieve("drm_01" + "0" * 24)


def test_a_secret_the_model_writes_is_refused_by_the_guard_and_reported(env: dict[str, Any]) -> None:
    w, sid, model, home = env["writer"], env["sid"], env["model"], env["home"]
    secret = "AKIA" + "IOSFODNN7EXAMPLE"
    model.turns[:] = [
        [
            text(f"Keep the deploy key {secret}."),
            memory(1, command="create", path="/memories/keys.md", file_text=f"aws {secret}\n"),
        ],
        [text("Done.")],
    ]
    d = finished(
        w,
        w.beta.dreams.create(
            inputs=inputs(sid), model="m", output_behavior={"type": "update_existing", "memory_store_id": sid}
        ).id,
    )
    ext = d.model_extra["gitmem"]
    assert ext["changes"] == [] and ext["proposal_id"] is None
    assert (
        ext["refused"][0]["path"] == "/memories/keys.md" and "secret" in ext["refused"][0]["message"].lower()
    )
    assert ext["refused"][0]["reasoning"] == "Keep the deploy key [secret withheld]."
    assert secret not in (home / "dreams" / f"{d.id}.json").read_text()
    tool_result = model.requests[1]["messages"][-1]["content"][0]
    assert tool_result["is_error"] is True
    with gitmem.open_store("notes", home) as s:
        assert "/keys.md" not in contents(home)
        mine = [p for p in proposals.proposals(s.core) if p.owner == d.session_id]
        assert all(proposals.versions(s.core, p.id) == [] for p in mine)  # at most an empty record
        git_dir = s.path  # stores/<id>.git: a store's directory follows its id
    out = subprocess.run(
        ["git", "--git-dir", str(git_dir), "log", "--all", "-p"],
        capture_output=True,
        check=True,
    )
    assert out.stdout and secret.encode() not in out.stdout


def test_update_existing_without_review_publishes_each_change_and_says_which_landed(
    env: dict[str, Any],
) -> None:
    w, sid, home = env["writer"], env["sid"], env["home"]
    d = w.beta.dreams.create(
        inputs=inputs(sid),
        model="m",
        output_behavior={"type": "update_existing", "memory_store_id": sid},
        extra_body={"gitmem": {"review": False}},
    )
    d = finished(w, d.id)
    ext = d.model_extra["gitmem"]
    assert d.status == "completed" and ext["review"] is False and ext["proposal_id"] is None
    assert [(c["path"], c["landed"]) for c in ext["changes"]] == [
        ("/prefs/coffee-again.md", True),
        ("/facts/office.md", True),
    ]
    after = contents(home)
    assert "/prefs/coffee-again.md" not in after and after["/facts/office.md"] == "The office is in Lisbon.\n"
    with gitmem.open_store("notes", home) as s:
        mine = s.versions(session=d.session_id)
        assert sorted(v.id for v in mine) == sorted(c["version_id"] for c in ext["changes"])
        assert {v.actor for v in mine} == {"service:dreamer"}


def _serve(home: Path, port: int, model_url: str) -> subprocess.Popen[bytes]:
    import os
    import sys

    env = {**os.environ, "GITMEM_DREAM_BASE_URL": model_url, "GITMEM_DREAM_API_KEY": "scripted"}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gitmem",
            "serve",
            "--home",
            str(home),
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.slow  # a real server, killed mid-dream and started again
def test_a_server_killed_mid_run_ends_the_dream_failed_and_nothing_reaches_the_scope(
    workspace: Path, model: Script
) -> None:
    import signal

    from serverkit import free_port

    seed(workspace)
    secret = token(workspace, actor="user:bob", stores={"notes": "rw"})
    model.gate_turn = 2  # the merge is written, the stale fact not yet
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    model_url = __import__("os").environ["GITMEM_DREAM_BASE_URL"]
    before = contents(workspace)
    server = _serve(workspace, port, model_url)
    try:
        c = client(url, secret, max_retries=8)
        # the waits for the server poll without the SDK's retries (their backoff grows to 8 s)
        probe = client(url, secret, max_retries=0)
        sid = wait_for(lambda: _store_id(probe), "the server to answer", timeout=180)
        d = c.beta.dreams.create(
            inputs=inputs(sid), model="m", output_behavior={"type": "update_existing", "memory_store_id": sid}
        )
        wait_for(model.reached.is_set, "the model's third turn")
        server.send_signal(signal.SIGKILL)
        server.wait(30)
        model.release.set()
        server = _serve(workspace, port, model_url)
        d = wait_for(lambda: _retrieve(probe, d.id), "the restarted server", timeout=180)
        assert d.status == "failed" and d.error.type == "internal_error" and d.ended_at is not None
        ext = d.model_extra["gitmem"]
        assert ext["proposal_id"] in d.error.message and "not applied" in d.error.message
        assert contents(workspace) == before  # never applied outside review
        with gitmem.open_store("notes", workspace) as s:
            vs = proposals.versions(s.core, ext["proposal_id"])
            assert [(v.operation, v.path) for v in vs] == [("deleted", "/prefs/coffee-again.md")]
        # the store is free again: a new update_existing dream runs to the end
        model.gate_turn = None
        again = c.beta.dreams.create(
            inputs=inputs(sid), model="m", output_behavior={"type": "update_existing", "memory_store_id": sid}
        )
        assert finished(c, again.id).status == "completed"
    finally:
        server.terminate()
        server.wait(30)


def _store_id(c: anthropic.Anthropic) -> str | None:
    try:
        return next(s.id for s in c.beta.memory_stores.list() if s.name == "notes")
    except anthropic.APIConnectionError:
        return None


def _retrieve(c: anthropic.Anthropic, dream_id: str) -> Any:
    try:
        return c.beta.dreams.retrieve(dream_id)
    except anthropic.APIConnectionError:
        return None


def test_the_pipeline_endpoints_dream_over_the_sessions_since_the_last_run(env: dict[str, Any]) -> None:
    w, r, home = env["writer"], env["reader"], env["home"]
    base = "/v1/gitmem/stores/notes/dream_pipeline"
    with pytest.raises(anthropic.NotFoundError):
        w.get(base, cast_to=object)
    with pytest.raises(anthropic.PermissionDeniedError):
        r.post(base, body={"model": "m"}, cast_to=object)
    with pytest.raises(anthropic.PermissionDeniedError):  # create_new creates a store: admin only
        w.post(base, body={"model": "m", "output_behavior": "create_new"}, cast_to=object)
    p = w.post(base, body={"model": "m", "instructions": "Be brief."}, cast_to=object)
    assert p["behavior"] == "update_existing" and p["review"] is True and p["every_seconds"] == 0  # type: ignore[index]
    run = w.post(base + "/run", cast_to=object)
    d = run["dream"]  # type: ignore[index]
    assert d["inputs"][1]["session_ids"] == [SESSION] and d["gitmem"]["trigger"] == "api"
    assert finished(w, d["id"]).status == "completed"
    assert w.get(base, cast_to=object)["last_dream"] == d["id"]  # type: ignore[index]
    again = w.post(base + "/run", cast_to=object)
    assert again["dream"] is None  # type: ignore[index]
    with gitmem.open_store("notes", home) as s:
        s.write("/notes/later.md", "later\n", session="sesn_work2")
    third = w.post(base + "/run", cast_to=object)["dream"]  # type: ignore[index]
    assert third["inputs"][1]["session_ids"] == ["sesn_work2"]
    finished(w, third["id"])


def test_create_new_canceled_mid_run_keeps_its_partial_writes_in_the_output_store(
    env: dict[str, Any],
) -> None:
    a, sid, model, home = env["admin"], env["sid"], env["model"], env["home"]
    model.gate_turn = 2
    before = contents(home)
    d = a.beta.dreams.create(inputs=inputs(sid), model="m")
    wait_for(model.reached.is_set, "the model's third turn")
    assert a.beta.dreams.cancel(d.id).status == "canceled"
    jobs = DreamJobs(home)
    wait_for(lambda: jobs.get(d.id).worker_stopped, "the worker to let go mid-model-call")
    assert not model.release.is_set()
    d = a.beta.dreams.retrieve(d.id)
    assert d.status == "canceled" and d.outputs
    out = contents(home, d.model_extra["gitmem"]["output_store"])
    assert "/prefs/coffee-again.md" not in out and out["/facts/office.md"] == STORE["/facts/office.md"]
    assert contents(home) == before


def test_a_pending_dream_found_at_start_is_run(workspace: Path, model: Script) -> None:
    from gitmem.server.dream_runs import new_dream

    seed(workspace)
    jobs = DreamJobs(workspace)
    d = new_dream(jobs, workspace, "notes", sessions=[SESSION], model="m", behavior="update_existing")
    secret = token(workspace, actor="user:bob", stores={"notes": "rw"})
    with running(workspace) as url:  # the server's start picks it up
        got = finished(client(url, secret), d.id)
    assert got.status == "completed" and len(got.model_extra["gitmem"]["changes"]) == 2


def test_an_openai_compatible_endpoint_runs_the_same_dream(
    workspace: Path, model: Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    monkeypatch.setenv("GITMEM_DREAM_PROVIDER", "openai")
    monkeypatch.setenv("GITMEM_DREAM_BASE_URL", os.environ["GITMEM_DREAM_BASE_URL"] + "/v1")
    seed(workspace)
    secret = token(workspace, actor="user:bob", stores={"notes": "rw"})
    with running(workspace) as url:
        c = client(url, secret)
        sid = next(s.id for s in c.beta.memory_stores.list() if s.name == "notes")
        d = c.beta.dreams.create(
            inputs=inputs(sid),
            model="gpt-x",
            output_behavior={"type": "update_existing", "memory_store_id": sid},
        )
        d = finished(c, d.id)
    assert d.status == "completed", d.error
    changes = d.model_extra["gitmem"]["changes"]
    assert [(x["path"], x["reasoning"]) for x in changes] == [
        ("/prefs/coffee-again.md", MERGE_REASON),
        ("/facts/office.md", STALE_REASON),
    ]
    assert d.usage.input_tokens == 100 + 101 + 102 + 103
    last = model.requests[-1]["messages"]
    assert last[0]["role"] == "system" and last[-1]["role"] == "tool"
