"""Who acted goes into the audit ledger: an operation's actor, its session and scope
(docs/guard.md#text-in-the-audit-ledger). The ledger cannot be redacted, so the engine screens
them with the ledger-text screen before the operation writes anything: a secret in an actor is
refused with the guard's error (flag mode too), and ``ledger.append`` refuses it as a last line.
Legitimate actors (``user:alice``, sessions and token ids gitmem mints, an e-mail address under
``pii: flag``) pass."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import gitmem
from gitmem.engine import ledger
from gitmem.errors import GuardRejectedError, NotFoundError
from gitmem.ids import new_id
from gitmem.model.caller import Caller
from gitmem.store import Store, copy_store


def _aws_key(seed: int) -> str:
    """An AWS-access-key-shaped string made at run time (``AKIA`` + 16 base32 characters)."""
    rng = random.Random(seed)
    return "AKIA" + "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") for _ in range(16))


KEY = _aws_key(11)
BAD_ACTOR = f"user:{KEY}"


def _state(store: Store) -> tuple[int, object, int]:
    return len(ledger.entries(store.core)), store.core.tip("main"), len(store.versions(scope="main"))


@pytest.mark.parametrize("mode", ["reject", "flag"])
def test_a_write_by_an_actor_holding_a_secret_is_refused_and_writes_nothing(store: Store, mode: str) -> None:
    store.update_settings(actor="user:alice", guard={"secrets": mode})
    store.write("/a.md", "alpha\n", actor="user:alice")
    before = _state(store)
    with pytest.raises(GuardRejectedError) as got:
        store.write("/b.md", "beta\n", actor=BAD_ACTOR)
    assert got.value.message.startswith("actor: refused by the store's guard: secret aws-access-key-id")
    assert KEY not in got.value.message and "nothing was written" in got.value.message
    assert got.value.type_name == "guard_rejected"
    with pytest.raises(GuardRejectedError, match="^session: "):
        store.write("/b.md", "beta\n", actor="user:alice", session=f"s-{KEY}")
    with pytest.raises(GuardRejectedError, match="^scope: "):
        store.write("/b.md", "beta\n", actor="user:alice", scope=f"deploy-{KEY}")
    with pytest.raises(GuardRejectedError, match="^actor: "):
        store.batch([{"op": "write", "path": "/c.md", "content": "gamma\n"}], actor=BAD_ACTOR)
    assert _state(store) == before
    with pytest.raises(NotFoundError):
        store.read("/b.md")
    assert f"deploy-{KEY}" not in store.scopes()


def test_operations_that_record_their_actor_refuse_one_holding_a_secret(
    store: Store, workspace: Path
) -> None:
    old = store.write("/old.md", "stale\n", actor="user:alice")
    store.write("/old.md", "fresh\n", actor="user:alice")
    agent = Caller(actor="user:agent", session="sesn_agent1", review=True, rights=frozenset({"write"}))
    store.write("/draft.md", "draft\n", caller=agent)
    (p,) = store.proposals()
    before, description = _state(store), store.settings.description
    for refused in (
        lambda: store.reject(p.id, reviewer=BAD_ACTOR, reason="no"),
        lambda: store.accept(p.id, reviewer=BAD_ACTOR),
        lambda: store.redact(old.id, reason="stale", actor=BAD_ACTOR),
        lambda: store.update_settings(actor=BAD_ACTOR, description="new"),
        lambda: store.prune(actor=BAD_ACTOR),
    ):
        with pytest.raises(GuardRejectedError, match="^actor: refused by the store's guard: secret"):
            refused()
    assert _state(store) == before and store.settings.description == description
    assert [q.status for q in store.proposals()] == ["open"] and store.version(old.id).redaction is None
    with pytest.raises(GuardRejectedError, match="^actor: "):
        gitmem.create_store("other", home=workspace, actor=BAD_ACTOR)
    assert [s.name for s in gitmem.list_stores(home=workspace)] == ["notes"]
    with pytest.raises(GuardRejectedError, match="^actor: "):
        copy_store(store, "copy", home=workspace, actor=BAD_ACTOR)
    assert [s.name for s in gitmem.list_stores(home=workspace)] == ["notes"]


def test_legitimate_actors_pass(store: Store) -> None:
    store.update_settings(actor="user:alice", guard={"secrets": "reject", "pii": "flag"})
    sesn, token = new_id("sesn"), new_id("apikey")
    for actor, session in (
        ("user:alice", None),
        (f"session:{sesn}", sesn),
        (f"api:{token}", None),
        ("user:alice@example.com", "sesn_user_alice_0123456789.work"),
        ("service:gitmem-dreamer", None),
    ):
        v = store.write("/n.md", f"by {actor}\n", actor=actor, session=session)
        assert (v.actor, v.session) == (actor, session)
    assert (
        store.write("/n.md", "hers\n", actor="user:alice", scope="alice@example.com").scope
        == "alice@example.com"
    )
    store.update_settings(actor="user:alice@example.com", description="kept by alice")
    assert ledger.entries(store.core)[-1].actor == "user:alice@example.com"


def test_secrets_off_screens_no_actor(store: Store) -> None:
    store.update_settings(actor="user:alice", guard={"secrets": "off"})
    assert store.write("/a.md", "alpha\n", actor=BAD_ACTOR).actor == BAD_ACTOR  # the store's choice


def test_the_ledger_itself_refuses_an_actor_or_author_holding_a_secret(store: Store) -> None:
    """The last line: an append whose actor, or a push entry's author e-mails, session or ref
    names, the guard finds anything in is refused, whatever the caller screened."""
    before = len(ledger.entries(store.core))
    with pytest.raises(GuardRejectedError, match="^the settings_changed entry's actor: "):
        ledger.append(store.core, "settings_changed", {"changes": {}, "diff": []}, actor=BAD_ACTOR)
    push = {"updates": [{"ref": "refs/heads/main"}], "authors": ["alice@example.com"], "push_options": []}
    for key, value, field in (
        ("authors", ["alice@example.com", f"{KEY}@example.com"], "authors"),
        ("session", f"s-{KEY}", "session"),
        ("updates", [{"ref": f"refs/heads/deploy-{KEY}"}], "updates\\[\\].ref"),
        ("push_options", [f"x-{KEY}"], "push_options"),
    ):
        with pytest.raises(GuardRejectedError, match=f"^the push entry's {field}: "):
            ledger.append(store.core, "push", {**push, key: value}, actor="user:alice")
    assert len(ledger.entries(store.core)) == before
    ledger.append(store.core, "push", push, actor="user:alice")  # a clean one is appended
    assert len(ledger.entries(store.core)) == before + 1
