"""Attacks on the one door (docs/access.md): forged sessions and actors, cross-scope erasure, review
escapes, read-only writes, the guard on paths and descriptions, and MCP session claims. Every
refusal leaves the store exactly as it was."""

from __future__ import annotations

import random
import string
from pathlib import Path

import pytest

import gitmem
from gitmem.audit import review
from gitmem.engine import proposals as P
from gitmem.errors import AccessError, GuardRejectedError, NotFoundError
from gitmem.model.caller import DEFAULT_REVIEW_RIGHTS, DEFAULT_RW_RIGHTS, Caller
from gitmem.server.door import mcp_session
from gitmem.server.tokens import TokenStore
from gitmem.sessions import revert_session
from gitmem.store import BatchOp, Store


def fake_token(seed: int) -> str:
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    while True:
        body = "".join(rng.choice(alphabet) for _ in range(36))
        if (
            any(c.isdigit() for c in body)
            and any(c.isupper() for c in body)
            and any(c.islower() for c in body)
        ):
            return "ghp_" + body


def token_caller(store: Store, **kw: object) -> Caller:
    """A token's caller with ``rw`` on ``store`` (grants are keyed by store id)."""
    base: dict[str, object] = {
        "actor": "user:t",
        "token_id": "apikey_x",
        "stores": {store.id: "rw"},
        "rights": DEFAULT_RW_RIGHTS,
        "session_bound": True,
    }
    return Caller(**{**base, **kw})  # type: ignore[arg-type]


def tips(store: Store) -> dict[str, str]:
    repo = store.core.repo
    return {r: str(repo.references[r].target) for r in repo.references}


@pytest.fixture
def seeded(store: Store) -> Store:
    store.write("/a.md", "alpha\n", actor="user:seed")
    store.write("/t.md", "team\n", scope="team", actor="user:seed")
    return store


def test_a_bound_session_or_actor_cannot_be_claimed(seeded: Store) -> None:
    c = token_caller(seeded, session="sesn_mine")
    before = tips(seeded)
    with pytest.raises(AccessError, match="may not claim 'sesn_theirs'"):
        seeded.write("/x.md", "x\n", session="sesn_theirs", caller=c)
    with pytest.raises(AccessError, match="may not claim 'user:admin'"):
        seeded.write("/x.md", "x\n", actor="user:admin", caller=c)
    with pytest.raises(AccessError):
        seeded.batch([BatchOp("write", "/x.md", "x\n")], session="sesn_theirs", caller=c)
    assert tips(seeded) == before
    v = seeded.write("/x.md", "x\n", caller=c)
    assert v is not None and (v.actor, v.session) == ("user:t", "sesn_mine")


def test_read_only_and_other_store_callers_write_nothing(seeded: Store) -> None:
    before = tips(seeded)
    ro = token_caller(seeded, stores={seeded.id: "ro"}, rights=frozenset())
    elsewhere = token_caller(seeded, stores={"memstore_other": "rw"})
    old = seeded.versions("/a.md")[0].id
    for c in (ro, elsewhere):
        with pytest.raises(AccessError):
            seeded.write("/a.md", "changed\n", caller=c)
        with pytest.raises(AccessError):
            seeded.batch([BatchOp("delete", "/a.md")], caller=c)
        with pytest.raises(AccessError):
            seeded.restore(old, caller=c)
    with pytest.raises(AccessError):
        seeded.read("/a.md", caller=elsewhere)
    assert tips(seeded) == before


def test_a_scope_confined_caller_cannot_erase_or_restore_another_scope(seeded: Store) -> None:
    seeded.write("/s.md", "shared words\n", scope="team", actor="user:seed")
    seeded.write("/s.md", "later\n", scope="team", actor="user:seed")
    seeded.write("/s.md", "shared words\n", actor="user:seed")
    seeded.write("/s.md", "later\n", actor="user:seed")
    team_v = [v for v in seeded.versions("/s.md", scope="team") if v.operation == "created"][0]
    main_v = [v for v in seeded.versions("/s.md", scope="main") if v.operation == "created"][0]
    c = token_caller(seeded, scope="team", rights=frozenset({"write", "redact"}))
    before = tips(seeded)
    with pytest.raises(AccessError, match="scope 'main'"):
        seeded.redact(team_v.id, reason="x", caller=c)
    with pytest.raises(gitmem.ForbiddenError):  # the pattern is in main's history too
        seeded.redact_pattern("shared", reason="x", caller=c)
    with pytest.raises(NotFoundError):  # main's version is not one it can see
        seeded.restore(main_v.id, caller=c)
    with pytest.raises(AccessError):
        seeded.redact_pattern("shared", reason="x", scope="main", caller=c)
    assert tips(seeded) == before


def test_review_mode_covers_every_change_and_decides_nothing(seeded: Store) -> None:
    c = token_caller(seeded, session="sesn_rev", review=True, rights=DEFAULT_REVIEW_RIGHTS)
    main = seeded.core.tip("main")
    seeded.batch([BatchOp("write", "/b.md", "b\n")], caller=c)
    seeded.write("/a.md", "alpha, proposed\n", caller=c)
    old = seeded.versions("/a.md")[-1].id
    seeded.restore(old, caller=c)
    seeded.write("/bad.md", "bad\n", actor="session:sesn_bad", session="sesn_bad")
    main = seeded.core.tip("main")
    revert_session(seeded, "sesn_bad", caller=c)
    assert seeded.core.tip("main") == main  # all of it on the proposal
    p = P.open_proposal(seeded.core, "main", "sesn_rev")
    assert p is not None and "/b.md" in P.touched(seeded.core, p)
    with pytest.raises(AccessError, match="review mode"):
        seeded.redact(old, reason="x", caller=dataclasses_replace(c, rights=frozenset({"write", "redact"})))
    other = Caller(actor="user:o", session="sesn_o", review=True)
    seeded.write("/o.md", "o\n", caller=other)
    theirs = P.open_proposal(seeded.core, "main", "sesn_o")
    assert theirs is not None
    for decide in (review.accept, review.reject):
        with pytest.raises(AccessError):
            decide(seeded.core, theirs.id, reviewer="user:t", caller=c)  # type: ignore[operator]
    with pytest.raises(AccessError):
        review.erase(seeded.core, theirs.id, reviewer="user:t", reason="x", caller=c)
    assert P.get(seeded.core, theirs.id).status == "open"


def dataclasses_replace(c: Caller, **kw: object) -> Caller:
    import dataclasses

    return dataclasses.replace(c, **kw)  # type: ignore[arg-type]


def test_redaction_needs_the_right_not_just_write(seeded: Store) -> None:
    old = seeded.write("/r.md", "old\n", actor="user:seed")
    seeded.write("/r.md", "new\n", actor="user:seed")
    assert old is not None
    with pytest.raises(AccessError, match="'redact' right"):
        seeded.redact(old.id, reason="x", caller=token_caller(seeded))
    done = seeded.redact(
        old.id, reason="x", caller=token_caller(seeded, rights=frozenset({"write", "redact"}))
    )
    assert done.actor == "user:t"


def test_the_guard_reads_paths_and_descriptions(seeded: Store) -> None:
    before = tips(seeded)
    with pytest.raises(GuardRejectedError, match="the path"):
        seeded.create(f"/keys/{fake_token(1)}.md", "harmless\n")
    with pytest.raises(GuardRejectedError, match="the path"):
        seeded.rename("/a.md", f"/{fake_token(2)}.md")
    with pytest.raises(GuardRejectedError):
        seeded.write("/d.md", "harmless\n", description=f"key {fake_token(3)}")
    with pytest.raises(GuardRejectedError):
        seeded.batch([BatchOp("write", f"/{fake_token(4)}.md", "x\n")])
    assert tips(seeded) == before


def test_an_mcp_client_cannot_claim_another_tokens_session(workspace: Path) -> None:
    gitmem.create_store("notes", home=workspace)  # a grant names a store that exists
    tokens = TokenStore(workspace)
    mine, _ = tokens.create(stores={"notes": "rw"})
    theirs, _ = tokens.create(stores={"notes": "rw"})
    bound, _ = tokens.create(stores={"notes": "rw"}, session="sesn_bound")
    own = "sesn_mcp_" + mine.id.removeprefix("apikey_")
    assert mcp_session(mine, None) == own
    assert mcp_session(mine, "chat1") == f"{own}.chat1"
    assert mcp_session(mine, f"{own}.chat1") == f"{own}.chat1"
    with pytest.raises(AccessError):
        mcp_session(mine, "sesn_mcp_" + theirs.id.removeprefix("apikey_"))
    with pytest.raises(AccessError):
        mcp_session(bound, "sesn_other")
    assert mcp_session(bound, "sesn_bound") == "sesn_bound"
    assert mcp_session(theirs, "sesn_bound") != "sesn_bound"  # a sub-session of its own, never bound's


def test_unknown_rights_are_refused(workspace: Path) -> None:
    gitmem.create_store("notes", home=workspace)
    with pytest.raises(gitmem.InvalidInputError, match="unknown right"):
        TokenStore(workspace).create(stores={"notes": "rw"}, rights=("write", "root"))


def test_the_cli_grants_an_explicit_right(workspace: Path) -> None:
    import json

    from typer.testing import CliRunner

    from gitmem.cli.app import app

    gitmem.create_store("notes", home=workspace)
    args = ["--json", "token", "create", "--store", "notes", "--right", "redact", "--home", str(workspace)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rights = json.loads(result.stdout)["token"]["rights"]
    assert rights == ["redact", "review", "write"]
    bad = CliRunner().invoke(app, [*args[:-2], "--right", "root", "--home", str(workspace)])
    assert bad.exit_code == 2
