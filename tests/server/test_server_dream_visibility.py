"""Who sees a dream's changes (docs/dreams.md, "Who sees a dream's changes"), on a real ``gitmem
serve`` with the official SDK's ``beta.dreams``. A reviewed dream's changes wait in its proposal,
which only its proposer and the store's reviewers may read (``gitmem.engine.access.may_see_proposal``,
docs/access.md "Who receives which refs"); the dream's record must not be a side door around that:
a read-only token, a ``--review`` token and a token that holds ``review`` through another store's
grant see the dream but none of its pending changes (paths, version ids, reasoning) or refused
writes, by id, in the listing, or in an archive's answer. A reviewer sees them all; once a reviewer
accepts a change it is an ordinary version, and every reader of the scope sees it; a rejected one
stays the reviewers'. A dream that publishes shows its changes to every reader (the control)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from dreamkit import MERGE_REASON, STALE_REASON, Script, memory, text
from serverkit import client, running, token
from test_server_dreams import finished, inputs, seed

import gitmem

SECRET = "AKIA" + "IOSFODNN7EXAMPLE"  # an AWS-key-shaped string: the guard refuses the write
REFUSED_REASON = "Keep the deploy key in keysvault."
OFFICE, COFFEE, KEYS = "/facts/office.md", "/prefs/coffee-again.md", "keys-of-deploy.md"
# What a caller that may not read the proposal must find nowhere in what it is served.
PENDING = (OFFICE, COFFEE, KEYS, MERGE_REASON, STALE_REASON, "keysvault")


@pytest.fixture
def env(workspace: Path, model: Script) -> Iterator[dict[str, Any]]:
    seed(workspace)
    with gitmem.create_store("other", home=workspace) as s:
        s.write("/o.md", "other\n")
    model.turns[:] = [
        [text(MERGE_REASON), memory(1, command="delete", path="/memories" + COFFEE)],
        [
            text(STALE_REASON),
            memory(2, command="str_replace", path="/memories" + OFFICE, old_str="Berlin", new_str="Lisbon"),
        ],
        [
            text(f"{REFUSED_REASON} {SECRET}"),
            memory(3, command="create", path=f"/memories/{KEYS}", file_text=f"aws {SECRET}\n"),
        ],
        [text("The store is consolidated.")],
    ]
    secrets = {
        "writer": token(workspace, actor="user:bob", stores={"notes": "rw"}),  # a reviewer of notes
        "admin": token(workspace, actor="user:admin", admin=True),
        "reader": token(workspace, actor="user:carol", stores={"notes": "ro"}),
        "agent": token(workspace, actor="user:agent", stores={"notes": "rw"}, review=True),
        # review through its read-write grant on another store: no reviewer of notes
        "elsewhere": token(workspace, actor="user:dan", stores={"notes": "ro", "other": "rw"}),
    }
    with running(workspace) as url:
        clients = {k: client(url, v, max_retries=0) for k, v in secrets.items()}
        sid = next(s for s in clients["writer"].beta.memory_stores.list() if s.name == "notes").id
        yield {"home": workspace, "sid": sid, **clients}


def _dream(env: dict[str, Any], *, review: bool) -> Any:
    w, sid = env["writer"], env["sid"]
    d = w.beta.dreams.create(
        inputs=inputs(sid),
        model="m",
        output_behavior={"type": "update_existing", "memory_store_id": sid},
        extra_body={"gitmem": {"review": review}},
    )
    d = finished(w, d.id)
    assert d.status == "completed", d.error
    return d


def _served(c: anthropic.Anthropic, dream_id: str) -> tuple[dict[str, Any], str]:
    """The dream's ``gitmem`` extension as ``c`` is served it, by id and in the listing (the same),
    and everything both answers said."""
    one = c.beta.dreams.retrieve(dream_id)
    listed = [d for d in c.beta.dreams.list(include_archived=True) if d.id == dream_id]
    assert len(listed) == 1, "the dream itself is listed to every reader of its store"
    assert listed[0].model_dump()["gitmem"] == one.model_dump()["gitmem"]
    return one.model_dump()["gitmem"], one.model_dump_json() + listed[0].model_dump_json()


def _paths(ext: dict[str, Any]) -> list[str]:
    return [c["path"] for c in ext["changes"]]


def _nothing_pending(c: anthropic.Anthropic, dream_id: str) -> dict[str, Any]:
    ext, said = _served(c, dream_id)
    assert ext["changes"] == [] and ext["refused"] == [], ext
    for word in PENDING:
        assert word not in said, (
            f"{word!r} of the dream's proposal was served to a caller that may not read it"
        )
    return ext


def test_a_reviewed_dreams_pending_changes_are_only_its_proposals_readers(env: dict[str, Any]) -> None:
    d = _dream(env, review=True)
    pid = d.model_dump()["gitmem"]["proposal_id"]
    assert pid
    for who in ("writer", "admin"):  # reviewers of the store: everything, with the model's reasoning
        ext, _ = _served(env[who], d.id)
        assert _paths(ext) == [COFFEE, OFFICE]
        assert [c["reasoning"] for c in ext["changes"]] == [MERGE_REASON, STALE_REASON]
        assert all(c["version_id"] and not c["landed"] for c in ext["changes"])
        assert [r["path"] for r in ext["refused"]] == [f"/memories/{KEYS}"]
    for who in ("reader", "agent", "elsewhere"):
        ext = _nothing_pending(env[who], d.id)
        assert ext["proposal_id"] == pid and ext["review"] is True  # the record itself is theirs
        with pytest.raises(anthropic.NotFoundError):  # as the proposal is not: the same rule
            env[who].get(f"/v1/gitmem/stores/notes/proposals/{pid}", cast_to=object)
    archived = env["agent"].beta.dreams.archive(d.id)  # a writer's answer is the same record
    assert archived.archived_at is not None
    ext = archived.model_dump()["gitmem"]
    assert ext["changes"] == [] and ext["refused"] == []
    assert not any(word in archived.model_dump_json() for word in PENDING)
    _nothing_pending(env["agent"], d.id)


def test_an_accepted_change_is_every_readers_and_a_rejected_one_stays_the_reviewers(
    env: dict[str, Any],
) -> None:
    d = _dream(env, review=True)
    pid = d.model_dump()["gitmem"]["proposal_id"]
    accepted = env["admin"].post(
        f"/v1/gitmem/stores/notes/proposals/{pid}/accept", body={"paths": [OFFICE]}, cast_to=object
    )
    assert accepted["proposal"]["status"] == "open"  # type: ignore[index]
    with gitmem.open_store("notes", env["home"]) as s:
        assert s.read(OFFICE).content == "The office is in Lisbon.\n"  # an ordinary version now
    for who in ("reader", "agent", "elsewhere"):
        ext, said = _served(env[who], d.id)
        assert _paths(ext) == [OFFICE] and ext["changes"][0]["reasoning"] == STALE_REASON
        assert ext["refused"] == []  # never published: still the proposal's
        assert COFFEE not in said and MERGE_REASON not in said and "keysvault" not in said
    env["admin"].post(
        f"/v1/gitmem/stores/notes/proposals/{pid}/reject",
        body={"paths": [COFFEE], "reason": "keep both"},
        cast_to=object,
    )
    ext, said = _served(env["reader"], d.id)
    assert _paths(ext) == [OFFICE] and COFFEE not in said and MERGE_REASON not in said
    ext, _ = _served(env["writer"], d.id)  # the reviewers still read the whole of it
    assert _paths(ext) == [COFFEE, OFFICE] and len(ext["refused"]) == 1


def test_a_dream_that_publishes_shows_its_changes_to_every_reader(env: dict[str, Any]) -> None:
    d = _dream(env, review=False)
    assert d.model_dump()["gitmem"]["proposal_id"] is None
    for who in ("reader", "agent", "elsewhere", "writer"):
        ext, _ = _served(env[who], d.id)
        assert _paths(ext) == [COFFEE, OFFICE] and all(c["landed"] for c in ext["changes"])
        assert [c["reasoning"] for c in ext["changes"]] == [MERGE_REASON, STALE_REASON]
        assert [r["path"] for r in ext["refused"]] == [f"/memories/{KEYS}"]
