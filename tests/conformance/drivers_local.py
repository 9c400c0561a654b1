"""Drivers of the faces that run in the caller's own process: the library, the CLI (typer's
CliRunner on gitmem's real app), Claude's memory tool (the SDK's ``call`` dispatch), session sync
(mounted directories edited as files, then synced), the OpenAI Agents session (the SDK's
``Runner`` against a scripted chat-completions server) and the LangGraph store (a real graph)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

from kit import (
    ACL_REVIEWED,
    NAME,
    Got,
    World,
    fake_token,
    list_prefix,
    needle_of,
    outcome,
    owner_of,
    path_of,
    sid_of,
)
from matrix import Cell
from typer.testing import CliRunner

from gitmem.engine import proposals as P
from gitmem.errors import GitmemError, GuardRejectedError
from gitmem.model.caller import Caller


def _proposal_to_review(w: World, cell: Cell) -> tuple[str, str, Caller]:
    """A proposal by a review-mode caller, for a reviewer to accept; (proposal id, path, proposer)."""
    path = path_of(cell)
    proposer = Caller(actor="user:prop", session=sid_of(cell, "prop"), review=True)
    w.store.create(path, "to review\n", caller=proposer)
    p = P.open_proposal(w.store.core, "main", proposer.session or "")
    assert p is not None
    return p.id, path, proposer


def reason_of(cell: Cell) -> str:
    """A redaction's or a decision's reason: a credential in it for ``case=secret-reason``."""
    return f"it held {fake_token(8)}" if cell.case == "secret-reason" else "conformance"


# ---------------------------------------------------------------------- library
def library(w: World, cell: Cell) -> Got:
    c = w.caller(cell.caller)
    actor = "user:lib" if c is None else None
    path = path_of(cell)
    owner = owner_of(cell)
    try:
        if cell.op == "create":
            if cell.case == "secret-path":
                path = f"/m/{fake_token(1)}.md"
            w.store.create(path, f"made {cell.id}\n", actor=actor, caller=c)
            return outcome(w, path, cell.id, owner=owner)
        if cell.op == "update":
            w.store.write(path, f"changed {cell.id}\n", actor=actor, caller=c)
            return outcome(w, path, "changed", owner=owner)
        if cell.op == "rename":
            new = f"/m/{fake_token(2)}.md" if cell.case == "secret-path" else path_of(cell, "-new")
            w.store.rename(path, new, actor=actor, caller=c)
            return outcome(w, new, None, owner=owner)
        if cell.op == "delete":
            w.store.delete(path, actor=actor, caller=c)
            return outcome(w, path, None, owner=owner, gone=True)
        if cell.op == "redact":
            w.store.redact(w.prep[cell.id]["version"], reason=reason_of(cell), actor=actor, caller=c)
            return Got("allowed")
        if cell.op == "restore":
            w.store.restore(w.prep[cell.id]["version"], actor=actor, caller=c)
            return outcome(w, path, "old", owner=owner)
        if cell.op == "revert-session":
            from gitmem.sessions import revert_session

            revert_session(w.store, w.prep[cell.id]["session"], actor=actor, caller=c)
            return outcome(w, path, None, owner=owner, gone=True)
        if cell.op == "search":
            hits = w.store.search(needle_of(cell), caller=c)
            return Got("allowed" if any(h.path == path for h in hits) else "nothing")
        if cell.op == "list":
            found = [m.path for m in w.store.list(list_prefix(cell), caller=c)]
            return Got("allowed" if path in found else "nothing")
        if cell.op == "review-accept":
            from gitmem.audit import review

            pid, path, _ = _proposal_to_review(w, cell)
            review.accept(w.store.core, pid, reviewer="user:lib", reason=reason_of(cell), caller=c)
            return outcome(w, path, "to review", owner="-", want_actor="user:prop", want_session=_.session)
    except GuardRejectedError as exc:
        return Got("guard", detail=exc.message)
    except GitmemError as exc:
        return Got("refused", exc.exit_code, exc.message)
    raise AssertionError(f"no library driver for {cell.op}")


# ---------------------------------------------------------------------- CLI (typer's CliRunner)
def cli(w: World, cell: Cell) -> Got:
    from gitmem.cli.app import app

    path = path_of(cell)
    actor = ACL_REVIEWED if cell.caller == "review" else "user:lib"
    session = sid_of(cell, "cli")
    want = {"want_actor": actor, "want_session": session}

    def gm(*args: str) -> Any:
        return CliRunner().invoke(
            app, ["--home", str(w.home), "--actor", actor, "--session", session, *args], env={}
        )

    def done(r: Any) -> Got | None:
        if r.exit_code == 0:
            return None
        out = (r.stderr or "") + (r.stdout or "")
        return Got(
            "guard" if "guard" in out.lower() else "refused",
            None if "guard" in out.lower() else r.exit_code,
            out,
        )

    if cell.op == "create":
        if cell.case == "secret-path":
            path = f"/m/{fake_token(6)}.md"
        return done(gm("create", NAME, path, f"made {cell.id}\n")) or outcome(
            w, path, cell.id, owner=session, **want
        )
    if cell.op == "update":
        return done(gm("write", NAME, path, f"changed {cell.id}\n")) or outcome(
            w, path, "changed", owner=session, **want
        )
    if cell.op == "rename":
        new = path_of(cell, "-new")
        return done(gm("mv", NAME, path, new)) or outcome(w, new, None, owner=session, **want)
    if cell.op == "delete":
        return done(gm("rm", NAME, path)) or outcome(w, path, None, owner=session, gone=True, **want)
    if cell.op == "restore":
        return done(gm("restore", NAME, w.prep[cell.id]["version"])) or outcome(
            w, path, "old", owner=session, **want
        )
    if cell.op == "revert-session":
        return done(gm("revert-session", NAME, w.prep[cell.id]["session"])) or outcome(
            w, path, None, owner=session, gone=True, **want
        )
    if cell.op == "redact":
        vid = w.prep[cell.id]["version"]
        r = gm("redact", NAME, vid, "--reason", reason_of(cell))
        if (failed := done(r)) is not None:
            return failed
        v = w.store.version(vid)
        return Got("allowed" if v.redaction is not None else "nothing", detail=r.stdout)
    if cell.op == "review-accept":
        pid, path, proposer = _proposal_to_review(w, cell)
        r = gm("review", "accept", NAME, pid)
        return done(r) or outcome(
            w, path, "to review", owner="-", want_actor="user:prop", want_session=proposer.session
        )
    if cell.op == "search":
        r = gm("--json", "search", NAME, needle_of(cell))
        return done(r) or Got("allowed" if path in r.stdout else "nothing", detail=r.stdout)
    if cell.op == "list":
        r = gm("ls", NAME, list_prefix(cell))
        return done(r) or Got("allowed" if path in r.stdout else "nothing", detail=r.stdout)
    if cell.op == "clone":
        dest = w.home.parent / f"cli-clone-{abs(hash(cell.id))}"
        r = gm("clone", NAME, str(dest))
        if (failed := done(r)) is not None:
            return failed
        from kit import git

        refs = git("for-each-ref", "--format=%(refname)", cwd=dest).stdout
        ok = "refs/gitmem/proposals/" in refs or "refs/remotes/" in refs
        return Got("allowed" if ok and (dest / "seed.md").exists() else "nothing", detail=refs)
    raise AssertionError(f"no cli driver for {cell.op}")


# ---------------------------------------------------------------------- Claude's memory tool
def memory_tool(w: World, cell: Cell) -> Got:
    """The tool as the SDK's tool runner calls it: ``tool.call(input)`` with the model's command."""
    from anthropic.tools import ToolError

    from gitmem.integrations.anthropic_tool import GitmemMemoryTool

    session = sid_of(cell, "tool")
    if cell.op == "search":
        return _memory_search(w, cell)
    tool = GitmemMemoryTool(w.store, session=session, actor="user:lib")
    path = path_of(cell)
    at = "/memories" + path
    want = {"want_actor": "user:lib", "want_session": session}
    commands = {
        "create": {"command": "create", "path": at, "file_text": f"made {cell.id}\n"},
        "update": {"command": "str_replace", "path": at, "old_str": "seed", "new_str": f"changed {cell.id}"},
        "rename": {"command": "rename", "old_path": at, "new_path": "/memories" + path_of(cell, "-new")},
        "delete": {"command": "delete", "path": at},
        "list": {"command": "view", "path": "/memories" + list_prefix(cell).rstrip("/")},
    }
    if cell.case == "secret-path":
        commands["create"]["path"] = f"/memories/m/{fake_token(7)}.md"
    try:
        result = tool.call(commands[cell.op])
    except ToolError as exc:
        text = str(exc)
        return Got(
            "guard" if "guard" in text.lower() else "refused",
            None if "guard" in text.lower() else "tool",
            text,
        )
    if cell.op == "list":
        return Got("allowed" if path.removeprefix("/") in str(result) else "nothing", detail=str(result))
    if cell.op == "rename":
        return outcome(w, path_of(cell, "-new"), None, owner=session, **want)
    return outcome(
        w, path, None if cell.op == "delete" else cell.id, owner=session, gone=cell.op == "delete", **want
    )


def _memory_search(w: World, cell: Cell) -> Got:
    """The ``memory_search`` extension as the tool runner calls it, on the tool's scope and with
    the caller's access (a reader's token Caller on the backend): the hits are the scope's, the
    answer names the mode that answered."""
    from anthropic.tools import ToolError

    from gitmem.integrations.anthropic_tool import GitmemMemoryTool

    needle = needle_of(cell)
    scope = "team" if cell.caller == "scoped" and not cell.case else "main"
    if scope == "team":  # the same needle in team; main's copy (prepare) must not be found
        w.store.write(path_of(cell, "-team"), f"team needle {needle}\n", scope="team", actor="user:seed")
    tool = GitmemMemoryTool(w.store, scope=scope, actor="user:lib")
    tool.backend.caller = w.caller(cell.caller)
    try:
        answer = json.loads(tool.search_tool().call({"query": needle, "limit": 5}))
    except ToolError as exc:
        return Got("refused", "tool", str(exc))
    want = "/memories" + path_of(cell, "-team" if scope == "team" else "")
    paths = [h["path"] for h in answer["hits"]]
    if answer["mode"] not in ("lexical", "semantic", "hybrid"):
        return Got("nothing", detail=f"no answering mode reported: {answer}")
    leaked = scope == "team" and "/memories" + path_of(cell) in paths  # main's copy
    ok = bool(paths) and paths[0] == want and not leaked
    return Got("allowed" if ok else "nothing", detail=f"{want} first, wanted; {answer['mode']}: {paths}")


# ---------------------------------------------------------------------- session sync
def session_sync(w: World, cell: Cell) -> Got:
    """A session mounts the store as a directory; the agent edits files; a sync makes versions."""
    from gitmem.sessions import end_session, revert_session, start_session, sync_session

    access = {"review": ":review", "ro": ":ro"}.get(cell.caller, "")
    sid = sid_of(cell, "sync")
    want = {"want_actor": "user:lib", "want_session": sid}
    path = path_of(cell)
    s = start_session([NAME + access], home=w.home, actor="user:lib", session_id=sid)
    mount = Path(s.mounts[0].path)
    file = mount / path.lstrip("/")
    try:
        if cell.op == "list":
            return Got("allowed" if file.exists() and "needle" in file.read_text() else "nothing")
        text: str | None = f"synced {cell.id}\n"
        gone = False
        if cell.op == "create":
            file.parent.mkdir(parents=True, exist_ok=True)
            _writable(file.parent)
            file.write_text(text)
        elif cell.op in ("update", "revert-session"):
            _writable(file)
            file.write_text(text)
        elif cell.op == "rename":
            new = mount / path_of(cell, "-new").lstrip("/")
            shutil.move(file, new)
            path, text = path_of(cell, "-new"), None
        elif cell.op == "delete":
            _writable(file.parent)
            file.unlink()
            gone, text = True, None
        report = sync_session(sid, home=w.home, actor="user:lib")
        refused = [i for m in report.mounts for i in m.refused]
        if refused:
            return Got("refused", "sync", "; ".join(f"{i.path}: {i.reason}" for i in refused))
        if cell.op == "revert-session":
            assert w.published(path, "synced"), "the session's write did not land"
            revert_session(w.store, sid, actor="user:lib", session=sid)
            text = "by a session"
        return outcome(w, path, text, owner=sid, gone=gone, **want)
    finally:
        end_session(sid, home=w.home, force=True)


def _writable(p: Path) -> None:
    if p.exists():
        os.chmod(p, 0o755 if p.is_dir() else 0o644)


# ---------------------------------------------------------------------- the OpenAI Agents session
def openai_agents(w: World, cell: Cell) -> Got:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    from gitmem.integrations.openai_agents import GitmemSession

    set_tracing_disabled(True)
    model = OpenAIChatCompletionsModel(
        model="scripted", openai_client=AsyncOpenAI(base_url=w.model_url, api_key="x")
    )
    agent = Agent(name="a", model=model)
    sid = sid_of(cell, "agents")
    session = GitmemSession(cell.id, w.store, actor="user:lib", session=sid)
    want = {"want_actor": "user:lib", "want_session": sid}
    text = f"my key is {fake_token(4)} keep it" if cell.case == "secret" else "I like tea"
    result = asyncio.run(Runner.run(agent, text, session=session))
    assert result.final_output == "Noted."
    stored = w.store.read(session.path).content or ""
    if cell.case == "secret":
        assert fake_token(4) not in stored and "keep it" in stored and "Noted." in stored
        v = w.latest(session.path)
        return Got(
            "flagged" if session.masked else "nothing",
            detail=stored,
            actor=v.actor,
            session=v.session,
            **want,
        )
    if cell.op == "create":
        return outcome(w, session.path, "I like tea", owner=sid, **want)
    if cell.op == "update":  # pop_item: the SDK's way to change a stored turn
        popped = asyncio.run(session.pop_item())
        assert popped is not None
        after = w.store.read(session.path).content or ""
        got = outcome(w, session.path, None, owner=sid, **want)
        return got if "Noted." not in after and "I like tea" in after else Got("nothing", detail=after)
    if cell.op == "delete":
        asyncio.run(session.clear_session())
        return outcome(w, session.path, None, owner=sid, gone=True, **want)
    if cell.op == "list":
        items = asyncio.run(GitmemSession(cell.id, w.store, actor="user:lib").get_items())
        return Got("allowed" if "I like tea" in json.dumps(items) else "nothing", detail=json.dumps(items))
    raise AssertionError(f"no openai-agents driver for {cell.op}")


# ---------------------------------------------------------------------- LangGraph
def langgraph(w: World, cell: Cell) -> Got:
    from typing import TypedDict

    from langgraph.config import get_store
    from langgraph.graph import END, START, StateGraph

    from gitmem.integrations.langgraph import MASKED_KEY, GitmemStore

    class State(TypedDict):
        msg: str

    sid = sid_of(cell, "lg")
    ns = ("users", sid)
    found: dict[str, Any] = {}

    def node(state: State) -> State:
        store = get_store()
        if cell.op in ("create", "update"):
            store.put(ns, cell.id, {"text": state["msg"]})
        elif cell.op == "delete":
            store.delete(ns, cell.id)
        elif cell.op == "search":
            found["hits"] = [i.key for i in store.search(("users",), query="needle")]
        elif cell.op == "list":
            found["hits"] = [i.key for i in store.search(ns)]
        return state

    g = StateGraph(State)
    g.add_node("node", node)
    g.add_edge(START, "node")
    g.add_edge("node", END)
    lg = GitmemStore(w.store, prefix="/lg/", actor="user:lib", session=sid)
    want = {"want_actor": "user:lib", "want_session": sid}
    if cell.op in ("update", "delete", "search", "list"):
        lg.put(ns, cell.id, {"text": "seed needle"})
    text = f"token {fake_token(5)} here" if cell.case == "secret" else f"plain {cell.op}"
    g.compile(store=lg).invoke({"msg": text})
    spot = lg.layout.path(ns, cell.id)
    if cell.op in ("search", "list"):
        return Got("allowed" if cell.id in found["hits"] else "nothing", detail=str(found))
    if cell.op == "delete":
        return outcome(w, spot, None, owner=sid, gone=True, **want)
    item = lg.get(ns, cell.id)
    assert item is not None
    if cell.case == "secret":
        assert fake_token(5) not in json.dumps(item.value)
        v = w.latest(spot)
        flagged = item.value.get(MASKED_KEY) and lg.masked
        return Got(
            "flagged" if flagged else "nothing",
            detail=str(item.value),
            actor=v.actor,
            session=v.session,
            **want,
        )
    return outcome(w, spot, text, owner=sid, **want)
