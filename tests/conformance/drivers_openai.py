"""Drivers of the OpenAI-shaped faces and the dreams: conversations (``/v1/conversations``) and
the responses proxy (``/v1/responses``) through the official ``openai`` client, and Anthropic's
dreams (``/v1/dreams``) through httpx; and the n/a checks of the cluster proxy."""

from __future__ import annotations

import ast
import inspect
import json
import time
from typing import Any

import httpx2 as httpx
import openai
from kit import NAME, Got, World, owner_of
from matrix import Cell

from gitmem.engine import conversations as conv
from gitmem.engine import proposals as P
from tests.helpers import patience


def _client(w: World, caller: str) -> openai.OpenAI:
    key = w.secrets.get(caller, "no-token")
    return openai.OpenAI(base_url=f"{w.url}/v1", api_key=key, max_retries=0)


def _conversation(w: World, by: str = "rw") -> str:
    """A conversation of the store (for the cells that change one), made by the read-write token
    (or by ``by``)."""
    made = _client(w, by).conversations.create(
        items=[{"type": "message", "role": "user", "content": "seed"}],
        extra_body={"memory_store": {"name": NAME}, "scope": "main"},
    )
    return made.id


def _under(w: World, cid: str) -> tuple[str, int]:
    prefix = f"/conversations/{conv.parse_id(cid)[0]}/"
    return prefix, len([v for v in w.store.versions(limit=200) if v.path.startswith(prefix)])


def _change(w: World, cell: Cell, cid: str, before: int = 0) -> Got:
    """Where the cell's change landed: new versions under the conversation (published), or the
    caller's proposal touching it."""
    prefix, now = _under(w, cid)
    p = P.open_proposal(w.store.core, "main", owner_of(cell))
    if p is not None:
        mine = [v for v in P.versions(w.store.core, p.id) if v.path.startswith(prefix)]
        if mine:
            return Got("proposed", actor=mine[-1].actor, session=mine[-1].session)
    if now > before:
        v = next(v for v in w.store.versions(limit=200) if v.path.startswith(prefix))
        return Got("allowed", actor=v.actor, session=v.session)
    return Got("nothing", detail=f"no new version under {prefix}")


def conversations(w: World, cell: Cell) -> Got:
    c = _client(w, cell.caller)
    scope = "team" if cell.case == "other-scope" else "main"
    try:
        if cell.op == "create":
            made = c.conversations.create(
                items=[{"type": "message", "role": "user", "content": f"hello {cell.id}"}],
                extra_body={"memory_store": {"name": NAME}, "scope": scope},
            )
            return _change(w, cell, made.id)
        # published by the read-write token, for a review token after its proposal opened (its
        # proposal is rebased onto the scope: docs/review.md, "When the scope moves")
        cid = _conversation(w)
        before = _under(w, cid)[1]
        if cell.op == "update":
            c.conversations.update(cid, metadata={"topic": cell.id[:60]})
            return _change(w, cell, cid, before)
        if cell.op == "delete":
            c.conversations.delete(cid)
            return _change(w, cell, cid, before)
        if cell.op == "list":
            items = c.conversations.items.list(cid)
            return Got("allowed" if any(i.type == "message" for i in items.data) else "nothing")
    except openai.APIStatusError as exc:
        return Got("refused", exc.status_code, str(exc))
    raise AssertionError(f"no conversations driver for {cell.op}")


def responses(w: World, cell: Cell) -> Got:
    """A turn through the proxy: the scripted upstream answers, the turn is appended."""
    c = _client(w, cell.caller)
    cid = _conversation(w)
    before = _under(w, cid)[1]
    try:
        r = c.responses.create(model="scripted", input=f"hi {cell.id}", extra_body={"conversation": cid})
    except openai.APIStatusError as exc:
        return Got("refused", exc.status_code, str(exc))
    assert r.output_text == "Noted."
    return _change(w, cell, cid, before)


def dreams(w: World, cell: Cell) -> Got:
    """Starting a dream over the store (its changes land later as a proposal: tests/server's
    dream tests drive the run), listing the dreams a token may see, and (case=pending) what of a
    reviewed dream's pending change a token is served: its proposal's readers only."""
    h = {} if cell.caller == "none" else {"authorization": f"Bearer {w.secrets[cell.caller]}"}
    h["anthropic-beta"] = "dreams-2026-04-21"
    sid = {"unknown-store": "memstore_01" + "0" * 24, "acl-write": w.extra.get("shut", "")}.get(
        cell.case, w.sid
    )
    if cell.op == "create":
        r = _start_dream(w, h, sid)
        if r.status_code != 200:
            return Got("refused", r.status_code, r.text)
        return Got("proposed" if r.json()["gitmem"]["review"] else "allowed", detail=r.text)
    if cell.op == "list" and cell.case == "pending":
        dream_id = pending_dream(w)
        listed = httpx.get(f"{w.url}/v1/dreams", headers=h, timeout=30)
        one = httpx.get(f"{w.url}/v1/dreams/{dream_id}", headers=h, timeout=30)
        if listed.status_code != 200 or one.status_code != 200:
            return Got("refused", listed.status_code, f"{listed.text[:300]} {one.text[:300]}")
        return judge_pending(dream_id, listed.text, [listed.text, one.text])
    if cell.op == "list":
        _start_dream(w, {**h, "authorization": f"Bearer {w.secrets['rw']}"}, w.sid)  # one to list
        r = httpx.get(f"{w.url}/v1/dreams", headers=h, timeout=30)
        if r.status_code != 200:
            return Got("refused", r.status_code, r.text)
        mine = [d for d in r.json()["data"] if d["inputs"][0]["memory_store_id"] == w.sid]
        return Got("allowed" if mine else "hidden", detail=r.text[:500])
    raise AssertionError(f"no dreams driver for {cell.op}")


# case=pending: a reviewed dream whose one change waits in its proposal (the scripted model makes
# it when the instructions carry the mark), read by callers that may or may not read the proposal.
PENDING_MARK = "conformance-pending-dream"
PENDING_PATH = "/l/dream-pending/m.md"
PENDING_REASON = "zqpendingreason: only the proposal's readers see this"


def pending_reply() -> dict[str, Any]:
    """The scripted model's answer to such a dream's first turn: one memory tool call."""
    args = {"command": "create", "path": "/memories" + PENDING_PATH, "file_text": "pending\n"}
    call = {"id": "call_1", "type": "function", "function": {"name": "memory", "arguments": json.dumps(args)}}
    return {
        "id": "chatcmpl-pending",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "scripted",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": PENDING_REASON, "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def pending_dream(w: World) -> str:
    """The module's reviewed dream with a pending change, asked for once by the read-write token."""
    if "pending_dream" not in w.extra:
        h = {"authorization": f"Bearer {w.secrets['rw']}", "anthropic-beta": "dreams-2026-04-21"}
        r = _start_dream(w, h, w.sid, review=True, instructions=PENDING_MARK)
        assert r.status_code == 200, r.text
        d = httpx.get(f"{w.url}/v1/dreams/{r.json()['id']}", headers=h, timeout=30).json()
        ext = d["gitmem"]
        assert d["status"] == "completed" and ext["proposal_id"], d
        assert [(c["path"], c["reasoning"], c["landed"]) for c in ext["changes"]] == [
            (PENDING_PATH, PENDING_REASON, False)
        ], d
        w.extra["pending_dream"] = d["id"]
    return str(w.extra["pending_dream"])


def judge_pending(dream_id: str, listed: str, records: list[str]) -> Got:
    """``allowed``: every record shown says the pending change's path and reasoning; ``hidden``:
    the dream is listed, and nothing served names either (docs/dreams.md, "Who sees a dream's
    changes"); else ``leaked`` (or ``nothing`` when the dream itself is not listed)."""
    if dream_id not in listed:
        return Got("nothing", detail=f"{dream_id} not listed: {listed[:300]}")
    if all(PENDING_PATH in t and PENDING_REASON in t for t in records):
        return Got("allowed")
    if not any(PENDING_PATH in t or PENDING_REASON in t for t in records):
        return Got("hidden")
    return Got("leaked", detail=" | ".join(t[:300] for t in records))


def _start_dream(
    w: World, h: dict[str, str], sid: str, *, review: bool = False, instructions: str | None = None
) -> httpx.Response:
    """A dream over the store, waited for: one update_existing dream per store runs at a time."""
    body: dict[str, Any] = {
        "inputs": [
            {"type": "memory_store", "memory_store_id": sid},
            {"type": "sessions", "session_ids": ["sesn_rw"]},
        ],
        "model": "scripted",
        "output_behavior": {"type": "update_existing", "memory_store_id": sid},
        "gitmem": {"review": review},
    }
    if instructions is not None:
        body["instructions"] = instructions
    r = httpx.post(f"{w.url}/v1/dreams", headers=h, json=body, timeout=30)
    if r.status_code == 200:
        d = r.json()
        deadline = patience(120)
        while d["status"] in ("pending", "running") and time.monotonic() < deadline:
            time.sleep(0.1)
            d = httpx.get(f"{w.url}/v1/dreams/{d['id']}", headers=h, timeout=30).json()
        assert d["status"] not in ("pending", "running"), "the dream did not end"
    return r


def _cluster_proxy_decides_nothing(cell: Cell) -> None:
    """The cluster proxy forwards a request, unchanged, to the node that homes the store, whose
    faces decide: it imports no store, engine or door module, so it cannot read, write or admit
    anything itself (tests/cluster drive it end to end)."""
    from gitmem.cluster import proxy

    tree = ast.parse(inspect.getsource(proxy))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    bad = {
        m
        for m in imported
        if m.startswith(("gitmem.store", "gitmem.engine", "gitmem.server", "gitmem.audit"))
    }
    assert not bad, f"the cluster proxy imports {bad}: it would decide, so it needs rows"
    assert "cluster proxy" in cell.reason or "forwards" in cell.reason


def _library_has_no_token(cell: Cell) -> None:
    """The library opens a repository: no operation of Store takes a token."""
    from gitmem.store import Store

    for name in ("write", "create", "read", "list", "search", "redact", "restore", "delete", "rename"):
        assert "token" not in inspect.signature(getattr(Store, name)).parameters


DRIVERS = {"conversations": conversations, "responses": responses, "dreams": dreams}
NA_CHECKS = {"cluster-proxy": _cluster_proxy_decides_nothing, "library": _library_has_no_token}
