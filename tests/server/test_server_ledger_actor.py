"""An API write by a token whose actor holds a secret: the actor would go into the audit ledger,
which cannot be redacted, so the guard refuses it (400, ``invalid_request_error``, the rule and a
masked preview, never the secret) and nothing is written (docs/guard.md#text-in-the-audit-ledger)."""

from __future__ import annotations

import random
from pathlib import Path

import anthropic
import pytest
from serverkit import client, running, token

import gitmem
from gitmem.engine import ledger


def _aws_key(seed: int) -> str:
    """An AWS-access-key-shaped string made at run time (``AKIA`` + 16 base32 characters)."""
    rng = random.Random(seed)
    return "AKIA" + "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") for _ in range(16))


KEY = _aws_key(11)


def test_an_api_write_by_an_actor_holding_a_secret_is_refused(workspace: Path) -> None:
    with gitmem.create_store("notes", home=workspace) as s:
        sid, chain = s.id, len(ledger.entries(s.core))
    bad = token(workspace, actor=f"user:{KEY}", stores={"notes": "rw"})
    good = token(workspace, actor="user:alice", stores={"notes": "rw"})
    with running(workspace) as url:
        with pytest.raises(anthropic.BadRequestError) as got:
            client(url, bad).beta.memory_stores.memories.create(sid, path="/a.md", content="alpha")
        assert got.value.status_code == 400 and KEY not in str(got.value)
        assert "actor: refused by the store's guard: secret aws-access-key-id" in str(got.value)
        client(url, good).beta.memory_stores.memories.create(sid, path="/a.md", content="alpha")
    with gitmem.open_store("notes", workspace) as s:
        assert [v.actor for v in s.versions(scope="main")] == ["user:alice"]
        assert len(ledger.entries(s.core)) == chain
