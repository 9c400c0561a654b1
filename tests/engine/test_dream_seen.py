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
        "changes": [_change(made, "why a"), _change(moved, "why c")],
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


LATER = "second thoughts: the client's pager code is 4471"


def _change(v: Any, why: str, **more: Any) -> dict[str, Any]:
    return {
        "version_id": v.id,
        "memory_id": v.memory_id,
        "path": v.path,
        "previous_path": v.previous_path,
        "operation": v.operation,
        "command": "create",
        "reasoning": why,
        "landed": False,
        **more,
    }


def _record(store: gitmem.Store, proposal_id: str, changes: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "drm_01" + "0" * 24,
        "store": store.id,
        "store_id": store.id,
        "output": store.id,
        "output_id": store.id,
        "scope": "main",
        "behavior": "update_existing",
        "review": True,
        "proposal_id": proposal_id,
        "changes": changes,
        "refused": [],
    }


def _after_accept(store: gitmem.Store) -> dict[str, Any]:
    """A reviewed dream: /a.md and /b.md in its proposal; a reviewer accepts /a.md (the proposal
    stays open for /b.md); then the dream writes /a.md again, into the same proposal."""
    dreamer = Caller(actor="service:dreamer", session=DREAM_SESSION, review=True, rights=frozenset({"write"}))
    a = store.write("/a.md", "a\n", caller=dreamer)
    b = store.write("/b.md", "b\n", caller=dreamer)
    p = store.open_proposal("main", DREAM_SESSION)
    assert a is not None and b is not None and p is not None
    store.accept(p.id, reviewer="user:rev", paths=["/a.md"])
    later = store.write("/a.md", f"{LATER}\n", caller=dreamer)
    assert later is not None
    still = store.open_proposal("main", DREAM_SESSION)
    assert still is not None and still.id == p.id  # the same proposal, still open
    return _record(store, p.id, [_change(a, "why a"), _change(b, "why b"), _change(later, LATER)])


def _seen(store: gitmem.Store, record: dict[str, Any]) -> list[str]:
    reader = Caller(actor="user:ro", stores={store.id: "ro"}, rights=frozenset())
    return [c["reasoning"] for c in dream_seen_by(copy.deepcopy(record), reader, store)["changes"]]


def test_control_the_accepted_change_is_the_readers_and_the_later_one_unpublished(
    store: gitmem.Store,
) -> None:
    record = _after_accept(store)
    assert "why a" in _seen(store, record) and "why b" not in _seen(store, record)
    assert store.read("/a.md").content == "a\n"  # the later change was not published


def test_a_change_made_after_its_path_was_accepted_stays_the_proposals(store: gitmem.Store) -> None:
    record = _after_accept(store)
    assert LATER not in _seen(store, record)
    reviewer = Caller(actor="user:rev", stores={store.id: "rw"}, rights=REVIEW)
    shown = [c["reasoning"] for c in dream_seen_by(copy.deepcopy(record), reviewer, store)["changes"]]
    assert shown == ["why a", "why b", LATER]  # the proposal's readers still see all of it


def test_a_rejected_change_of_an_earlier_proposal_stays_hidden_when_a_later_one_accepts_its_path(
    store: gitmem.Store,
) -> None:
    """The dream's first proposal is rejected, so its next write starts a second one (the record's
    proposal_id replaced); the reviewer accepts the same path there: only the second change is
    published, the first stays the first proposal's, whether or not the change names its proposal."""
    dreamer = Caller(actor="service:dreamer", session=DREAM_SESSION, review=True, rights=frozenset({"write"}))
    first = store.write("/a.md", f"{LATER}\n", caller=dreamer)
    p1 = store.open_proposal("main", DREAM_SESSION)
    assert first is not None and p1 is not None
    store.reject(p1.id, reviewer="user:rev", reason="no")
    second = store.write("/a.md", "a\n", caller=dreamer)
    p2 = store.open_proposal("main", DREAM_SESSION)
    assert second is not None and p2 is not None and p2.id != p1.id
    store.accept(p2.id, reviewer="user:rev", paths=["/a.md"])
    named = _record(
        store, p2.id, [_change(first, LATER, proposal_id=p1.id), _change(second, "why a", proposal_id=p2.id)]
    )
    unnamed = _record(store, p2.id, [_change(first, LATER), _change(second, "why a")])  # an older record
    for record in (named, unnamed):
        assert _seen(store, record) == ["why a"]
    # a change accepted in the first proposal stays the readers' once the record names a second one
    third = store.write("/c.md", "c\n", caller=dreamer)
    p3 = store.open_proposal("main", DREAM_SESSION)
    assert third is not None and p3 is not None and p3.id not in (p1.id, p2.id)
    moved = _record(
        store,
        p3.id,
        [_change(second, "why a", proposal_id=p2.id), _change(third, "why c", proposal_id=p3.id)],
    )
    assert _seen(store, moved) == ["why a"]
