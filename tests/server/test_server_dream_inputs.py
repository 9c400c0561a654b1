"""What a dream reads and what its model may do (docs/dreams.md#what-the-model-sees): the sessions'
conversation items, reserved paths, the dream's caller, huge or broken model answers, a model
server that hangs, instructions with control characters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from dreamkit import Script, memory, text
from serverkit import client, running, token
from test_server_dreams import SESSION, contents, finished, inputs, seed

import gitmem
from gitmem.engine import proposals

CHAT = "sesn_chat1"


@pytest.fixture
def env(workspace: Path, model: Script) -> Iterator[dict[str, Any]]:
    seed(workspace)
    writer = token(workspace, actor="user:bob", stores={"notes": "rw"})
    chat = token(workspace, actor="user:chat", stores={"notes": "rw"}, session=CHAT)
    with running(workspace) as url:
        w = client(url, writer)
        sid = next(s for s in w.beta.memory_stores.list() if s.name == "notes").id
        yield {"home": workspace, "url": url, "writer": w, "chat": chat, "sid": sid, "model": model}


def update(sid: str) -> dict[str, Any]:
    return {"type": "update_existing", "memory_store_id": sid}


def test_the_model_reads_the_sessions_conversation_items_and_never_sees_their_records(
    env: dict[str, Any],
) -> None:
    w, sid, model = env["writer"], env["sid"], env["model"]
    o = openai.OpenAI(base_url=env["url"] + "/v1", api_key=env["chat"])
    conv = o.conversations.create(
        extra_body={"memory_store": {"name": "notes"}},
        items=[{"role": "user", "content": "My order 42 is late, I now live in Porto."}],
    )
    o.conversations.items.create(
        conv.id, items=[{"role": "assistant", "content": "Noted: your address is in Porto now."}]
    )
    d = finished(
        w, w.beta.dreams.create(inputs=inputs(sid, [CHAT]), model="m", output_behavior=update(sid)).id
    )
    assert d.status == "completed", d.error
    first = model.requests[0]["messages"][0]["content"]
    assert "user: My order 42 is late, I now live in Porto." in first
    assert "assistant: Noted: your address is in Porto now." in first
    assert first.index("user: My order 42") < first.index("assistant: Noted")
    assert "/conversations/" not in first and '"role"' not in first  # a transcript, not its records
    listing = model.requests[1]["messages"][-1]["content"][0]["content"]  # the model's view of /memories
    assert "/memories/facts/office.md" in listing and "conversations" not in listing
    # both sessions at once: the versions of one, the items of the other
    d2 = finished(
        w,
        w.beta.dreams.create(inputs=inputs(sid, [SESSION, CHAT]), model="m", output_behavior=update(sid)).id,
    )
    assert d2.status == "completed", d2.error
    first = model.requests[-4]["messages"][0]["content"]
    assert "Lisbon" in first and "I now live in Porto" in first


def test_reserved_paths_are_refused_to_the_model_and_nothing_reaches_them(env: dict[str, Any]) -> None:
    w, sid, model, home = env["writer"], env["sid"], env["model"], env["home"]
    o = openai.OpenAI(base_url=env["url"] + "/v1", api_key=env["chat"])
    o.conversations.create(
        extra_body={"memory_store": {"name": "notes"}}, items=[{"role": "user", "content": "hi"}]
    )
    with gitmem.open_store("notes", home) as s:
        records = sorted(m.path for m in s.list("/conversations/"))
        assert records
    target = "/memories" + records[0]
    model.turns[:] = [
        [
            text("Trying the reserved places."),
            memory(1, command="view", path=target),
            memory(2, command="create", path="/memories/conversations/x.md", file_text="x"),
            memory(3, command="str_replace", path=target, old_str="hi", new_str="bye"),
            memory(4, command="delete", path="/memories/checkpoints"),
            memory(5, command="create", path="/memories/.anthropic-memory-store", file_text="x"),
            memory(6, command="create", path="/memories/.Anthropic-Memory-Store/a.md", file_text="x"),
            memory(
                7,
                command="rename",
                old_path="/memories/facts/office.md",
                new_path="/memories/conversations/o.md",
            ),
            memory(
                8, command="rename", old_path="/memories/facts", new_path="/memories/.anthropic-memory-store"
            ),
            memory(9, command="view", path="/memories/../.gitmem/x"),
        ],
        [text("Done.")],
    ]
    before = contents(home)
    d = finished(
        w,
        w.beta.dreams.create(
            inputs=inputs(sid),
            model="m",
            output_behavior=update(sid),
            extra_body={"gitmem": {"review": False}},
        ).id,
    )
    assert d.status == "completed" and d.model_extra["gitmem"]["changes"] == []
    results = model.requests[1]["messages"][-1]["content"]
    assert len(results) == 9 and all(r["is_error"] for r in results)
    assert all("reserved" in r["content"] for r in results[:8])
    assert len(d.model_extra["gitmem"]["refused"]) == 7  # the writes among them
    assert contents(home) == before
    with gitmem.open_store("notes", home) as s:
        assert sorted(m.path for m in s.list("/conversations/")) == records


def test_a_cancel_while_the_model_call_hangs_stops_the_dream_and_a_hang_times_out(
    env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import gitmem.server.dreamer as dreamer
    from gitmem.server.dream_jobs import DreamJobs
    from gitmem.server.dream_runs import new_dream

    home, model = env["home"], env["model"]
    jobs = DreamJobs(home)
    model.gate_turn = 0  # the first model call never answers until released
    monkeypatch.setenv("GITMEM_DREAM_TIMEOUT", "1")
    runner = dreamer.DreamRunner(home, workers=1)
    try:
        d = new_dream(jobs, home, "notes", sessions=[SESSION], model="m", behavior="update_existing")
        runner.run(d.id)  # in this thread: it returns only once the dream has ended
        got = jobs.get(d.id)
        assert got.status == "failed" and got.error is not None and got.error["type"] == "timeout"
        assert got.worker_stopped and got.changes == []
    finally:
        runner.close()
    assert not model.release.is_set()


def test_huge_or_broken_model_answers_fail_or_are_bounded(env: dict[str, Any]) -> None:
    w, sid, model, home = env["writer"], env["sid"], env["model"], env["home"]
    model.turns[:] = [
        [text("why " * 50_000)]
        + [memory(n, command="view", path="/memories") for n in range(1, 61)]
        + [memory(99, command="create", path="/memories/new.md", file_text="a new insight\n")],
        [text("Done.")],
    ]
    d = finished(w, w.beta.dreams.create(inputs=inputs(sid), model="m", output_behavior=update(sid)).id)
    assert d.status == "completed", d.error
    results = model.requests[1]["messages"][-1]["content"]
    assert len(results) == 61
    assert not any(r["is_error"] for r in results[:50]) and all(r["is_error"] for r in results[50:])
    assert d.model_extra["gitmem"]["changes"] == []  # the create was the 61st call: not run
    assert len((home / "dreams" / f"{d.id}.json").read_text()) < 100_000
    # garbage from the model server: the dream fails, the server goes on
    for raw in (b"not json at all", b'{"type": "message", "content": "no blocks"}', b"[]"):
        model.raw = raw
        bad = finished(w, w.beta.dreams.create(inputs=inputs(sid), model="m", output_behavior=update(sid)).id)
        assert bad.status == "failed" and bad.error is not None and bad.error.message, raw
    assert contents(home)["/facts/office.md"] == "The office is in Berlin.\n"


def test_control_characters_in_instructions_are_refused(env: dict[str, Any]) -> None:
    w, sid = env["writer"], env["sid"]
    for bad in ("a\x00b", "\x1b[31mred", "x\x7f", "\x85"):
        with pytest.raises(anthropic.BadRequestError):
            w.beta.dreams.create(inputs=inputs(sid), model="m", output_behavior=update(sid), instructions=bad)
    ok = w.beta.dreams.create(
        inputs=inputs(sid), model="m", output_behavior=update(sid), instructions="tabs\tand\nlines\r\n"
    )
    assert finished(w, ok.id).status == "completed"


def test_the_dreams_writes_carry_its_caller_and_its_proposal_is_its_own(env: dict[str, Any]) -> None:
    w, sid, home = env["writer"], env["sid"], env["home"]
    d = finished(w, w.beta.dreams.create(inputs=inputs(sid), model="m", output_behavior=update(sid)).id)
    with gitmem.open_store("notes", home) as s:
        p = proposals.get(s.core, d.model_extra["gitmem"]["proposal_id"])
        assert (p.owner, p.actor, p.session) == (d.session_id, "service:dreamer", d.session_id)
        # nothing was written by the requesting token's actor or session
        assert s.versions(actor="user:bob") == []


def test_a_create_new_dream_killed_mid_run_ends_failed_naming_its_output_and_the_input_is_untouched(
    workspace: Path, model: Script
) -> None:
    import os
    import signal

    from serverkit import free_port
    from test_server_dreams import _refs_and_objects, _retrieve, _serve, _store_id, wait_for

    seed(workspace)
    admin = token(workspace, actor="user:admin", admin=True)
    model.gate_turn = 2  # the merge is written in the copy, the stale fact not yet
    port = free_port()
    with gitmem.open_store("notes", workspace) as s:
        before = _refs_and_objects(s.path)
    server = _serve(workspace, port, os.environ["GITMEM_DREAM_BASE_URL"])
    try:
        c = client(f"http://127.0.0.1:{port}", admin, max_retries=8)
        # the waits for the server poll without the SDK's retries (their backoff grows to 8 s)
        probe = client(f"http://127.0.0.1:{port}", admin, max_retries=0)
        sid = wait_for(lambda: _store_id(probe), "the server to answer", timeout=180)
        d = c.beta.dreams.create(inputs=inputs(sid), model="m")
        wait_for(model.reached.is_set, "the model's third turn")
        server.send_signal(signal.SIGKILL)
        server.wait(30)
        server = _serve(workspace, port, os.environ["GITMEM_DREAM_BASE_URL"])
        got = wait_for(lambda: _retrieve(probe, d.id), "the restarted server", timeout=180)
        assert got.status == "failed" and got.error.type == "internal_error"
        name = got.model_extra["gitmem"]["output_store"]
        assert name and f"memory store {name}" in got.error.message
        out = contents(workspace, name)
        assert "/prefs/coffee-again.md" not in out and out["/facts/office.md"] == "The office is in Berlin.\n"
        with gitmem.open_store("notes", workspace) as s:
            assert _refs_and_objects(s.path) == before
    finally:
        model.release.set()
        server.terminate()
        server.wait(30)


def test_ctrl_c_during_a_foreground_run_ends_the_dream_failed(env: dict[str, Any]) -> None:
    import _thread
    import threading

    import gitmem.server.dreamer as dreamer
    from gitmem.server.dream_jobs import DreamJobs
    from gitmem.server.dream_runs import new_dream

    home, model = env["home"], env["model"]
    jobs = DreamJobs(home)
    model.gate_turn = 1  # the second model call hangs: Ctrl-C then
    runner = dreamer.DreamRunner(home, workers=1)
    d = new_dream(jobs, home, "notes", sessions=[SESSION], model="m", behavior="update_existing")

    def interrupt() -> None:
        if model.reached.wait(60):
            _thread.interrupt_main()

    threading.Thread(target=interrupt, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            runner.run(d.id)  # as `gitmem dream run` does, in the main thread
    finally:
        runner.close()
    got = jobs.get(d.id)
    assert got.status == "failed" and got.error == {
        "type": "internal_error",
        "message": "the dream was interrupted",
    }
    assert got.worker_stopped and jobs.stopped(got)


def test_in_review_mode_the_dream_reads_back_what_it_proposed(env: dict[str, Any]) -> None:
    w, sid, model, home = env["writer"], env["sid"], env["model"], env["home"]
    model.turns[:] = [
        [text("A new insight."), memory(1, command="create", path="/memories/insight.md", file_text="tea\n")],
        [
            text("Sharpen it."),
            memory(2, command="str_replace", path="/memories/insight.md", old_str="tea", new_str="green tea"),
        ],
        [text("Check."), memory(3, command="view", path="/memories")],
        [
            text("Move it."),
            memory(4, command="rename", old_path="/memories/insight.md", new_path="/memories/prefs/tea.md"),
        ],
        [text("Done.")],
    ]
    before = contents(home)
    d = finished(w, w.beta.dreams.create(inputs=inputs(sid), model="m", output_behavior=update(sid)).id)
    assert d.status == "completed", d.error
    results = [m["messages"][-1]["content"][0] for m in model.requests[1:]]
    assert not any(r["is_error"] for r in results), results
    assert "/memories/insight.md" in results[2]["content"]  # its own proposal, on top of the scope
    assert contents(home) == before
    with gitmem.open_store("notes", home) as s:
        p = d.model_extra["gitmem"]["proposal_id"]
        vs = proposals.versions(s.core, p)
        assert vs[-1].path == "/prefs/tea.md" and all(v.actor == "service:dreamer" for v in vs)
        tip = proposals.tip_of(s.core, proposals.get(s.core, p))
        assert proposals.text_at(s.core.tree_of(tip), "/prefs/tea.md") == "green tea\n"


def test_a_secret_in_a_path_the_model_makes_up_is_refused_and_not_kept_in_the_record(
    env: dict[str, Any],
) -> None:
    w, sid, model, home = env["writer"], env["sid"], env["model"], env["home"]
    secret = "AKIA" + "IOSFODNN7EXAMPLE"
    model.turns[:] = [
        [
            text("Filing it."),
            memory(1, command="create", path=f"/memories/{secret}.md", file_text="benign\n"),
        ],
        [text("Done.")],
    ]
    d = finished(w, w.beta.dreams.create(inputs=inputs(sid), model="m", output_behavior=update(sid)).id)
    refused = d.model_extra["gitmem"]["refused"]
    assert d.status == "completed" and len(refused) == 1 and "withheld" in refused[0]["path"]
    assert secret not in (home / "dreams" / f"{d.id}.json").read_text()
    assert not any(secret in p for p in contents(home))
