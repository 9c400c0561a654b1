"""The library's one rule for what of a dream's record a caller sees (``gitmem.store.dream_seen_by``,
gitmem.engine.dream_records.seen_by; docs/dreams.md, "Who sees a dream's changes"), on a real
store and a real proposal, for the cases a server test cannot easily reach: the proposal's
record gone, the store not at hand, a rename decided one path at a time, another scope, a change
published in another store. The faces' answers are tests/server/test_server_dream_visibility.py."""

from __future__ import annotations

import copy
from typing import Any

import gitmem
from gitmem.model.caller import Caller
from gitmem.store import dream_seen_by

DREAM_SESSION = "sesn_dream1"
REVIEW = frozenset({"write", "review"})


def _dreamt(store: gitmem.Store) -> dict[str, Any]:
    """A reviewed dream's record as the dreamer keeps it: a create and a rename in its proposal,
    and a refused write."""
    store.write("/b.md", "b\n", actor="user:alice")
    dreamer = Caller(actor="service:dreamer", session=DREAM_SESSION, review=True, rights=frozenset({"write"}))
    made = store.write("/a.md", "a\n", caller=dreamer)
    moved = store.rename("/b.md", "/c.md", caller=dreamer)
    assert made is not None and moved is not None
    p = store.open_proposal("main", DREAM_SESSION)
    assert p is not None

    def change(v: Any, why: str) -> dict[str, Any]:
        return {
            "version_id": v.id,
            "memory_id": v.memory_id,
            "path": v.path,
            "previous_path": v.previous_path,
            "operation": v.operation,
            "command": "create",
            "reasoning": why,
            "landed": False,
        }

    return {
        "id": "drm_01" + "0" * 24,
        "store": store.id,
        "store_id": store.id,
        "output": store.id,
        "output_id": store.id,
        "scope": "main",
        "behavior": "update_existing",
        "review": True,
        "proposal_id": p.id,
        "changes": [change(made, "why a"), change(moved, "why c")],
        "refused": [{"command": "create", "path": "/memories/k.md", "message": "refused", "reasoning": "k"}],
    }


def _paths(record: dict[str, Any], caller: Caller | None, store: gitmem.Store | None) -> list[str]:
    return [c["path"] for c in dream_seen_by(copy.deepcopy(record), caller, store)["changes"]]


def test_pending_changes_follow_the_proposal_and_accepted_ones_the_scope(store: gitmem.Store) -> None:
    record = _dreamt(store)
    sid = store.id
    reviewer = Caller(actor="user:rev", stores={sid: "rw"}, rights=REVIEW)
    proposer = Caller(actor="service:dreamer", session=DREAM_SESSION, stores={sid: "rw"}, review=True)
    reader = Caller(actor="user:ro", stores={sid: "ro"}, rights=frozenset())
    agent = Caller(actor="user:agent", session="sesn_agent", stores={sid: "rw"}, review=True)
    elsewhere = Caller(actor="user:x", stores={sid: "ro", "memstore_01" + "9" * 24: "rw"}, rights=REVIEW)
    team = Caller(actor="user:team", stores={sid: "rw"}, scope="team", rights=REVIEW)
    assert dream_seen_by(record, None, store) == record  # the local caller: all of it
    for who in (reviewer, proposer):
        seen = dream_seen_by(record, who, store)
        assert [c["path"] for c in seen["changes"]] == ["/a.md", "/c.md"] and len(seen["refused"]) == 1
    for who in (reader, agent, elsewhere, team):
        seen = dream_seen_by(record, who, store)
        assert seen["changes"] == [] and seen["refused"] == [], who
    # the store not at hand: its reviewers only (no proposal to ask about its proposer)
    assert _paths(record, reviewer, None) == ["/a.md", "/c.md"] and _paths(record, reader, None) == []
    pid = record["proposal_id"]
    store.accept(pid, reviewer="user:rev", paths=["/a.md", "/c.md"])
    assert _paths(record, reader, store) == ["/a.md"]  # the rename is half decided: not yet
    assert _paths(record, team, store) == []  # another scope's reader sees nothing of main
    store.accept(pid, reviewer="user:rev", paths=["/b.md"])
    assert store.proposal(pid).status == "accepted"
    assert _paths(record, reader, store) == ["/a.md", "/c.md"]
    assert dream_seen_by(record, reader, store)["refused"] == []  # never published: the proposal's
    # decided and dropped after retention: nothing says what was accepted any more: reviewers only
    (store.path / "gitmem" / "proposals" / f"{pid}.json").unlink()
    assert _paths(record, reader, store) == [] and _paths(record, reviewer, store) == ["/a.md", "/c.md"]


def test_a_rejected_change_stays_the_reviewers_and_a_published_one_its_output_readers(
    store: gitmem.Store,
) -> None:
    record = _dreamt(store)
    sid = store.id
    reviewer = Caller(actor="user:rev", stores={sid: "rw"}, rights=REVIEW)
    reader = Caller(actor="user:ro", stores={sid: "ro"}, rights=frozenset())
    store.reject(record["proposal_id"], reviewer="user:rev", reason="no")
    assert _paths(record, reader, store) == [] and _paths(record, reviewer, store) == ["/a.md", "/c.md"]
    # a create_new dream: published in its copy, seen by a reader of the copy
    out = "memstore_01" + "8" * 24
    published = {
        **record,
        "behavior": "create_new",
        "review": False,
        "proposal_id": None,
        "output_id": out,
        "changes": [{**c, "landed": True} for c in record["changes"]],
    }
    assert _paths(published, reader, None) == []  # it may read the input, not the copy
    both = Caller(actor="user:ro2", stores={sid: "ro", out: "ro"}, rights=frozenset())
    seen = dream_seen_by(published, both, None)
    assert [c["path"] for c in seen["changes"]] == ["/a.md", "/c.md"] and len(seen["refused"]) == 1
