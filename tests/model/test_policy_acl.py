"""The store's acl binds library writes as it binds pushes (docs/architecture.md#hooks)."""

from __future__ import annotations

import pytest

from gitmem.engine.batch import BatchOp, apply_batch
from gitmem.errors import ForbiddenError
from gitmem.store import Store


@pytest.fixture
def guarded(store: Store) -> Store:
    store.update_settings(acl={"write": {"team": ["user:alice", "session:*"], "*": ["*"]}})
    return store


def test_acl_lets_listed_actors_write_a_scope(guarded: Store) -> None:
    assert guarded.write("/plan.md", "ship it", scope="team", actor="user:alice") is not None
    assert guarded.write("/plan.md", "ship it today", scope="team", session="sesn_1") is not None
    assert guarded.write("/mine.md", "x", actor="user:bob") is not None  # "*" covers other scopes


def test_acl_refuses_other_actors_and_writes_nothing(guarded: Store) -> None:
    with pytest.raises(ForbiddenError, match="user:bob may not write scope 'team'"):
        guarded.write("/plan.md", "sneaky", scope="team", actor="user:bob")
    with pytest.raises(ForbiddenError):
        apply_batch(guarded.core, [BatchOp("write", "/a.md", "a")], scope="team", actor="user:bob")
    assert guarded.core.tip("team") is None
