"""Attacks on push identity and attribution (docs/identity.md): every pusher is an attacker.

Each test is a real push (file://, git daemon on 127.0.0.1, gitmem serve's git HTTP) that broke the
store's account of who changed what, and checks that it holds now: the versions a push brings are
the pusher's, their ids are the store's, and a rebuilt index gives every id to the same commit."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gitmem.engine import ledger
from gitmem.push import pushenv
from gitmem.store import Store
from tests.engine.test_identity import clone, commit, daemon, forged, git, gitmem_cli, ids, seeded

__all__ = ["daemon", "seeded"]  # fixtures


def rebuilt_ids(store: Store) -> dict[str, tuple[str, str, str]]:
    """Every version id -> (scope, commit, actor) after deleting the index and reindexing."""
    store.core.index.close()
    (store.path / "gitmem" / "index.sqlite").unlink()
    gitmem_cli("reindex", store.name)
    return ids(store)


def all_versions(store: Store) -> list[tuple[str, str, str, str]]:
    rows = store.core.index.version_rows()
    return sorted((r.scope, r.id, r.memory_id, r.actor) for r in rows)


# ---------------------------------------------------------------------- copies of existing commits
def test_another_users_versions_pushed_onto_a_new_scope_are_the_pushers(
    seeded: Store, tmp_path: Path
) -> None:
    """Before: ``git push origin main:copy`` by anyone made alice's versions appear on ``copy`` as
    hers, under her version ids (``show <id>`` then answered from the copy), and the push entry
    listed no version."""
    work = clone(seeded, tmp_path)
    originals = {v.id for v in seeded.versions(scope="main")}
    git("push", "-q", "origin", "main:aaa", cwd=work, env={"REMOTE_USER": "mallory"})
    copies = seeded.versions(scope="aaa")
    assert len(copies) == 2
    assert {v.actor for v in copies} == {"user:mallory"}
    assert not originals & {v.id for v in copies}  # no id the store already gave out
    assert {v.memory_id for v in copies}.isdisjoint({v.memory_id for v in seeded.versions(scope="main")})
    for vid in originals:
        assert seeded.version(vid).scope == "main"
    push = ledger.entries(seeded.core, kind="push")[-1]
    assert sorted(v["version"] for v in push.data["versions"]) == sorted(v.id for v in copies)
    assert push.data["commits"] == 2
    before = ids(seeded)
    assert rebuilt_ids(seeded) == before


def test_a_trusted_pushers_copy_of_existing_commits_is_not_trusted(seeded: Store, tmp_path: Path) -> None:
    """Trailers are believed on the commits a mirror brings into the store, not on commits the
    store already has: their ids are taken."""
    seeded.update_settings(acl={"trust_trailers": ["user:mirror"]}, actor="user:root")
    work = clone(seeded, tmp_path)
    git("push", "-q", "origin", "main:mirror-copy", cwd=work, env={"GITMEM_ACTOR": "user:mirror"})
    main = {v.id for v in seeded.versions(scope="main")}
    copies = seeded.versions(scope="mirror-copy")
    assert copies and not main & {v.id for v in copies}
    assert {v.actor for v in copies} == {"user:mirror"}
    before = ids(seeded)
    assert rebuilt_ids(seeded) == before


def test_a_commit_pushed_to_two_scopes_at_once_is_the_pushers_on_both(seeded: Store, tmp_path: Path) -> None:
    work = clone(seeded, tmp_path)
    git("checkout", "-q", "--orphan", "x", cwd=work)
    git("rm", "-q", "-rf", ".", cwd=work)
    (work / "n.md").write_text("new\n")
    commit(work, "n")
    git("push", "-q", "origin", "x:s1", "x:s2", cwd=work, env={"REMOTE_USER": "bob"})
    s1, s2 = seeded.versions(scope="s1"), seeded.versions(scope="s2")
    assert [v.actor for v in s1] == [v.actor for v in s2] == ["user:bob"]
    assert s1[0].id != s2[0].id
    # Later, someone else copies s1 onto s3: it is theirs, not bob's.
    git("push", "-q", "origin", "x:s3", cwd=work, env={"REMOTE_USER": "eve"})
    assert [v.actor for v in seeded.versions(scope="s3")] == ["user:eve"]
    before = ids(seeded)
    assert len(before) == 2 + 3
    assert rebuilt_ids(seeded) == before


def test_a_merge_of_another_scope_brings_its_versions_as_the_pushers(seeded: Store, tmp_path: Path) -> None:
    seeded.write("/t.md", "team\n", scope="team", actor="user:bob")
    work = clone(seeded, tmp_path)
    git("merge", "-q", "--allow-unrelated-histories", "-m", "merge", "origin/team", cwd=work)
    git("push", "-q", "origin", "main", cwd=work, env={"REMOTE_USER": "mallory"})
    on_main = [v for v in seeded.versions(scope="main") if v.path == "/t.md"]
    assert on_main and {v.actor for v in on_main} == {"user:mallory"}
    team_ids = {v.id for v in seeded.versions(scope="team")}
    assert team_ids.isdisjoint({v.id for v in on_main})
    before = ids(seeded)
    assert rebuilt_ids(seeded) == before


def test_forged_trailers_on_a_copy_over_git_daemon(seeded: Store, daemon: str, tmp_path: Path) -> None:
    """The daemon's GITEA_PUSHER_NAME names carol; a forged commit on top of a copy of main takes
    no id and no actor from its trailers."""
    first = seeded.versions(path="/secret.md")[-1]
    work = tmp_path / "work"
    git("clone", "-q", f"{daemon}/{seeded.id}.git", str(work))
    git("checkout", "-q", "-b", "evil", cwd=work)
    (work / "secret.md").write_text("decoy\n")
    cid = commit(work, forged(first.id, first.memory_id, actor="user:alice"))
    git("push", "-q", "origin", "evil", cwd=work, env={"GITMEM_ACTOR": "user:alice"})
    evil = seeded.versions(scope="evil")
    assert len(evil) == 3 and {v.actor for v in evil} == {"user:carol"}
    assert first.id not in {v.id for v in evil} and any(v.commit == cid for v in evil)
    assert seeded.version(first.id).scope == "main"
    before = ids(seeded)
    assert rebuilt_ids(seeded) == before


# ---------------------------------------------------------------------- malformed identities
@pytest.mark.parametrize(
    ("value", "actor"),
    [
        ("bob", "user:bob"),
        ("user:bob", "user:bob"),
        ("api:key_1", "api:key_1"),
        ("cn:bob", "user:cn:bob"),  # not a kind gitmem knows: the whole value is the name
        (":bob", "user::bob"),
        ("evil\nx:y", "user:evil_x:y"),  # a newline never reaches a TSV row or the audit table
        ("ser vice:gitmem", "user:ser_vice:gitmem"),
        ("al\u202eice", "user:al_ice"),  # a right-to-left override is a format character
        ("bøb", "user:bøb"),
        ("  bob  ", "user:bob"),
        ("user:", None),
        (" ", None),
        ("\t\n", None),
        ("", None),
    ],
)
def test_identity_values_become_valid_actors_or_nobody(value: str, actor: str | None) -> None:
    from gitmem.model.versions import validate_actor

    got = pushenv.pusher({"REMOTE_USER": value}, [], False)
    assert got == actor
    if got is not None:
        assert validate_actor(got) == got


def test_a_blank_server_identity_falls_to_the_next_and_options_need_trust() -> None:
    assert pushenv.pusher({"REMOTE_USER": " ", "GL_USERNAME": "gl"}, [], False) == "user:gl"
    assert pushenv.pusher({"REMOTE_USER": "", "GITMEM_ACTOR": "user:me"}, [], False) == "user:me"
    assert pushenv.pusher({}, ["actor=user:root"], False) is None
    assert pushenv.pusher({}, ["actor=root\nx"], True) == "user:root_x"
    assert pushenv.pusher({}, ["actor=user:"], True) is None
    assert pushenv.identity_source({"REMOTE_USER": " ", "GL_USER": "g"}) == "GL_USER"


def test_a_pushed_identity_with_a_newline_is_recorded_as_a_valid_actor(seeded: Store, tmp_path: Path) -> None:
    work = clone(seeded, tmp_path)
    (work / "n.md").write_text("n\n")
    cid = commit(work, "n")
    git("push", "-q", "origin", "main", cwd=work, env={"REMOTE_USER": "evil\n2026\tcreated\tuser:alice"})
    (v,) = [v for v in seeded.versions() if v.commit == cid]
    assert v.actor == "user:evil_2026_created_user:alice"
    out = gitmem_cli("log", "notes").stdout
    assert all(len(line.split("\t")) == 7 for line in out.splitlines())


# ---------------------------------------------------------------------- tampering with the server's logs
def _pushed(store: Store, tmp_path: Path) -> tuple[Path, str]:
    work = clone(store, tmp_path)
    (work / "b.md").write_text("bob's\n")
    commit(work, "b")
    git("push", "-q", "-o", "session=sesn_bob", "origin", "main", cwd=work, env={"REMOTE_USER": "bob"})
    (work / "c.md").write_text("bob's too\n")
    commit(work, forged("memver_01JAAAAAAAAAAAAAAAAAAAAAAA", "mem_01JAAAAAAAAAAAAAAAAAAAAAAA"))
    git("push", "-q", "origin", "main", cwd=work, env={"REMOTE_USER": "bob"})
    return work, (store.path / "gitmem" / "receipts.jsonl").read_text()


def _verify_detail(store: Store, name: str) -> tuple[bool, str]:
    from gitmem.audit.verify import verify

    store.core.index.close()
    report = verify(store.core, raise_on_failure=False)
    check = next(c for c in report.checks if c.name == name)
    return check.ok, check.detail or ""


def test_verify_finds_an_edited_or_truncated_receipts_file(seeded: Store, tmp_path: Path) -> None:
    """Before: editing the pusher in receipts.jsonl, or deleting a receipt (so the rebuilt index
    believed the forged ``Gitmem-Version``), changed the audit and ``verify`` said ok."""
    _work, text = _pushed(seeded, tmp_path)
    assert _verify_detail(seeded, "receipts") == (True, "")
    path = seeded.path / "gitmem" / "receipts.jsonl"
    first, second = text.splitlines()
    path.write_text(first.replace('"user:bob"', '"user:alice"') + "\n" + second + "\n")
    rebuilt_ids(seeded)
    ok, detail = _verify_detail(seeded, "receipts")
    assert not ok and "says user:alice" in detail and "receipts.jsonl was edited" in detail
    path.write_text(first + "\n")
    rebuilt_ids(seeded)
    assert "memver_01JAAAAAAAAAAAAAAAAAAAAAAA" in ids(seeded)  # the forgery wins without its receipt...
    ok, detail = _verify_detail(seeded, "receipts")
    assert not ok and "which the index no longer has" in detail  # ...and verify says so
    path.write_text(text)
    rebuilt_ids(seeded)
    assert _verify_detail(seeded, "receipts") == (True, "")


def test_receipts_check_holds_through_redaction_and_compaction(seeded: Store, tmp_path: Path) -> None:
    import gitmem

    work, _text = _pushed(seeded, tmp_path)
    (work / "b.md").write_text("bob's, edited\n")
    commit(work, "b2")
    git("push", "-q", "origin", "main", cwd=work, env={"REMOTE_USER": "bob"})
    old = next(v for v in seeded.versions(path="/b.md") if v.operation == "created")
    seeded.redact(old.id, reason="test", actor="user:sec")
    seeded.update_settings(retention=gitmem.config.Retention(min_days=0, max_days=1, keep_recent=0))
    from gitmem.audit.retention import prune

    result = prune(seeded.core, actor="user:root", now=int(time.time()) + 3 * 86400)
    assert result.compactions and result.compactions[0].dropped
    assert _verify_detail(seeded, "receipts") == (True, "")
    before = ids(seeded)
    assert rebuilt_ids(seeded) == before


# ---------------------------------------------------------------------- settings: odd YAML and hand edits
def _settings_text(store: Store) -> str:
    return (store.path / "gitmem.yaml").read_text()


def test_a_key_given_twice_in_gitmem_yaml_is_refused(store: Store) -> None:
    """Before: PyYAML kept the last of two keys silently, so a file that reads
    ``trust_push_actor: false`` at a glance trusted every ``-o actor=``."""
    import gitmem
    from gitmem.errors import ConfigError

    path = store.path / "gitmem.yaml"
    original = _settings_text(store)
    body = original.replace("acl: {}\n", "")
    assert body != original
    path.write_text(
        body + "acl:\n  trust_push_actor: false\n  require_identity: false\n  trust_push_actor: true\n"
    )
    with pytest.raises(ConfigError, match=r"key 'trust_push_actor' is given twice \(line \d+\)") as exc:
        gitmem.open_store("notes").settings  # noqa: B018
    assert str(path) in exc.value.message
    proc = gitmem_cli("store", "show", "notes", check=False)
    assert proc.returncode != 0 and "given twice" in proc.stderr and "Traceback" not in proc.stderr
    # Anchors, aliases and merge keys are still YAML: explicit keys override merged ones.
    path.write_text(
        body + "acl:\n  write:\n    main: &w [user:a, user:b]\n    team: *w\n    <<: {x: [user:c]}\n"
    )
    assert gitmem.open_store("notes").settings.acl["write"] == {
        "main": ["user:a", "user:b"],
        "team": ["user:a", "user:b"],
        "x": ["user:c"],
    }


@pytest.mark.parametrize("value", ["garbage", "", "2026-13-01T00:00:00Z", "x" * 100])
def test_archived_at_must_be_a_timestamp(store: Store, value: str) -> None:
    """Before: ``archived_at: garbage`` made the store read-only, "archived at garbage"."""
    import gitmem
    from gitmem.errors import ConfigError

    path = store.path / "gitmem.yaml"
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**data, "archived_at": value}))
    with pytest.raises(ConfigError, match="archived_at"):
        gitmem.open_store("notes").settings  # noqa: B018


def test_huge_numbers_and_strings_for_booleans_in_settings(store: Store) -> None:
    import gitmem
    from gitmem.errors import ConfigError

    path = store.path / "gitmem.yaml"
    data = yaml.safe_load(path.read_text())
    for bad, key in (
        ({"require_trailers": "true"}, "require_trailers"),
        ({"acl": {"require_identity": "yes"}}, "acl.require_identity"),
        ({"acl": {"trust_trailers": "user:*"}}, "acl.trust_trailers"),
        ({"acl": {"write": {"main": [["user:a"]]}}}, "acl.write.main"),
        ({"retention": {"min_days": 1.5}}, "retention.min_days"),
        ({"limits": {"max_memories": True}}, "limits.max_memories"),
    ):
        path.write_text(yaml.safe_dump({**data, **bad}))
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            gitmem.open_store("notes").settings  # noqa: B018
    path.write_text(yaml.safe_dump({**data, "retention": {"min_days": 10**30, "max_days": 10**31}}))
    s = gitmem.open_store("notes")
    s.write("/a.md", "a\n")
    assert gitmem_cli("prune", "notes").returncode == 0  # no overflow


def test_a_hand_edit_is_recorded_exactly_once(store: Store) -> None:
    import gitmem

    path = store.path / "gitmem.yaml"
    path.write_text(_settings_text(store).replace("min_days: 30", "min_days: 5"))
    procs = [
        subprocess.Popen([sys.executable, "-m", "gitmem", *args], stdout=subprocess.DEVNULL)
        for args in (("store", "show", "notes"), ("verify", "notes"), ("ls", "notes"), ("verify", "notes"))
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    with gitmem.open_store("notes") as s:
        s.write("/a.md", "a\n")
    hand = [e for e in ledger.entries(store.core) if e.actor == "unknown"]
    assert len(hand) == 1
    assert hand[0].data["diff"] == [{"key": "retention.min_days", "old": 30, "new": 5}]
    path.write_text(_settings_text(store).replace("min_days: 5", "min_days: 30"))
    gitmem_cli("verify", "notes")
    gitmem_cli("verify", "notes")
    hand = [e for e in ledger.entries(store.core) if e.actor == "unknown"]
    assert [h.data["diff"][0]["new"] for h in hand] == [5, 30]


# ---------------------------------------------------------------------- gitmem serve's git HTTP
def test_http_push_is_the_tokens_whatever_the_client_says(
    store: Store, workspace: Path, tmp_path: Path
) -> None:
    """The token names the pusher and its session; ``-o actor=``/``-o session=`` and the client's
    GITMEM_ACTOR do not, and a copy of another user's versions onto a new scope is the token's."""
    pytest.importorskip("uvicorn")
    from tests.serverkit import running, token

    store.write("/a.md", "alice's\n", actor="user:alice")
    with running(workspace) as url:
        secret = token(workspace, actor="user:agent", stores={"notes": "rw"}, session="sesn_tok")
        repo_url = url.replace("http://", f"http://agent:{secret}@") + "/git/notes.git"
        work = tmp_path / "w"
        git("clone", "-q", repo_url, str(work))
        (work / "b.md").write_text("b\n")
        cid = commit(work, forged("memver_01JAAAAAAAAAAAAAAAAAAAAAAA", "mem_01JAAAAAAAAAAAAAAAAAAAAAAA"))
        opts = ["-o", "actor=user:root", "-o", "session=sesn_client"]
        env = {"GITMEM_ACTOR": "user:root", "REMOTE_USER": "root"}
        git("push", "-q", *opts, "origin", "main", "main:aaa", cwd=work, env=env)
    (v,) = [v for v in store.versions(scope="main") if v.commit == cid]
    assert (v.actor, v.session) == ("user:agent", "sesn_tok") and v.id != "memver_01JAAAAAAAAAAAAAAAAAAAAAAA"
    copies = store.versions(scope="aaa")
    assert len(copies) == 2 and {(c.actor, c.session) for c in copies} == {("user:agent", "sesn_tok")}
    alice = store.versions(scope="main", path="/a.md")[0]
    assert alice.actor == "user:alice" and alice.id not in {c.id for c in copies}
    before = ids(store)
    assert rebuilt_ids(store) == before
