"""Stores as the SDK sees them (docs/stores.md): free-text names that repeat, renames, ids as the
handles of grants, git URLs and sessions, and a workspace of the old layout opened by this code."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import anthropic
import httpx2 as httpx
import pytest
from anthropic.lib.tools import _memories
from anthropic.types.beta import BetaManagedAgentsSession
from anthropic.types.beta.sessions import BetaManagedAgentsMemoryStoreResource
from serverkit import client, running, token

import gitmem
from gitmem import sessions
from gitmem.audit.verify import verify
from gitmem.engine import ledger
from gitmem.errors import AmbiguousStoreError
from gitmem.model.paths import mount_slug
from gitmem.server.tokens import TokenStore

NAME = "Customer Support Memory (EU)"


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_sdk_two_stores_of_one_name_list_rename_and_mounts_follow_the_slug(
    workspace: Path, tmp_path: Path
) -> None:
    admin_secret = token(workspace, admin=True, actor="user:admin")
    with running(workspace) as url:
        c = client(url, admin_secret)
        a = c.beta.memory_stores.create(name=NAME, description="first")
        b = c.beta.memory_stores.create(name=NAME, description="second")
        assert a.id != b.id and a.name == b.name == NAME
        listed = {s.id: s.name for s in c.beta.memory_stores.list()}
        assert listed == {a.id: NAME, b.id: NAME}
        c.beta.memory_stores.memories.create(a.id, path="/a.md", content="for a")
        c.beta.memory_stores.memories.create(b.id, path="/b.md", content="for b")
        # both attached: one slug, so each gets the last six characters of its id
        both = sessions.start_session([a.id, b.id], root=tmp_path / "before", home=workspace)
        slugs = sorted(m.slug for m in both.mounts)
        assert slugs == sorted(f"customer-support-memory-eu-{s[-6:].lower()}" for s in (a.id, b.id))
        sessions.end_session(both.id, home=workspace)
        renamed = c.beta.memory_stores.update(b.id, name="Billing Memory (US)")
        assert renamed.name == "Billing Memory (US)" and renamed.id == b.id
        assert c.beta.memory_stores.retrieve(b.id).name == "Billing Memory (US)"
        assert c.beta.memory_stores.memories.list(b.id).data[0].path == "/b.md"  # same store, same data
        after = sessions.start_session([a.id, b.id], root=tmp_path / "after", home=workspace)
        assert {m.slug: m.store for m in after.mounts} == {
            "customer-support-memory-eu": a.id,
            "billing-memory-us": b.id,
        }
        assert (tmp_path / "after" / "billing-memory-us" / "b.md").read_text() == "for b"
        prompt = (tmp_path / "after" / "SYSTEM_PROMPT.md").read_text()
        assert "## Billing Memory (US)" in prompt and str(tmp_path / "after" / "billing-memory-us") in prompt
        sessions.end_session(after.id, home=workspace)
        # The SDK's own sync engine, mounted at the slug of the name the listing shows now.
        workdir = tmp_path / "sdk"
        current = {s.id: s.name for s in c.beta.memory_stores.list()}
        mount = workdir / "memory" / mount_slug(current[b.id])
        resource = BetaManagedAgentsMemoryStoreResource.model_construct(
            type="memory_store",
            memory_store_id=b.id,
            access="read_write",
            name=current[b.id],
            mount_path=str(mount),
        )
        session = BetaManagedAgentsSession.model_construct(resources=[resource])

        async def run() -> None:
            stores = _memories.SessionMemoryStores(
                anthropic.AsyncAnthropic(base_url=url, api_key=admin_secret), workdir=workdir
            )
            await stores.download(session)
            assert (mount / "b.md").read_text() == "for b"
            (mount / "synced.md").write_text("written in the mount")
            await stores.finish()
            await stores.dispose()

        asyncio.run(run())
        assert mount.name == "billing-memory-us"
        got = [m.path for m in c.beta.memory_stores.memories.list(b.id)]
        assert sorted(got) == ["/b.md", "/synced.md"]
    with gitmem.open_store(b.id, workspace) as store:
        renames = [e for e in ledger.entries(store.core) if "name" in e.data.get("changes", {})]
        assert len(renames) == 1 and renames[0].data["changes"]["name"] == "Billing Memory (US)"
        assert renames[0].actor == "user:admin"


def test_a_grant_follows_the_store_id_across_renames(workspace: Path) -> None:
    with gitmem.create_store("alpha", home=workspace) as a, gitmem.create_store("beta", home=workspace) as b:
        a_id, b_id = a.id, b.id
        a.write("/secret-a.md", "A's")
        b.write("/secret-b.md", "B's")
    secret = token(workspace, stores={"alpha": "rw"}, actor="user:holder")
    admin = token(workspace, admin=True, actor="user:admin")
    with running(workspace) as url:
        c, boss = client(url, secret), client(url, admin)
        boss.beta.memory_stores.update(a_id, name="renamed away")
        boss.beta.memory_stores.update(b_id, name="alpha")  # B takes A's old name
        assert [m.path for m in c.beta.memory_stores.memories.list(a_id)] == ["/secret-a.md"]
        with pytest.raises(anthropic.NotFoundError):  # no grant: the same 404 as no store (door)
            c.beta.memory_stores.memories.list(b_id)
        assert [s.id for s in c.beta.memory_stores.list()] == [a_id]
        # a name resolves to the store that carries it now: the token may not read that one
        http = httpx.Client(base_url=url, timeout=30)
        refs = http.get("/git/alpha.git/info/refs?service=git-upload-pack", auth=("x", secret))
        assert refs.status_code == 404
        own = http.get(f"/git/{a_id}.git/info/refs?service=git-upload-pack", auth=("x", secret))
        assert own.status_code == 200
    # A store created with a name another store held gains nothing either.
    with gitmem.create_store("renamed away", home=workspace) as newcomer:
        assert not TokenStore(workspace).authenticate(secret).may_read(newcomer.id)


def test_clone_and_push_over_the_id_url_and_a_rename_keeps_the_clone_working(
    workspace: Path, tmp_path: Path
) -> None:
    with gitmem.create_store("Team Notes", home=workspace) as s:
        sid = s.id
        s.write("/first.md", "one\n")
    secret = token(workspace, stores={sid: "rw"}, actor="user:pusher")
    with running(workspace) as url:
        base = url.replace("http://", f"http://x:{secret}@")
        work = tmp_path / "work"
        assert _git("clone", "-q", f"{base}/git/{sid}.git", str(work)).returncode == 0
        assert (work / "first.md").read_text() == "one\n"
        for who in ("user.name=t", "user.email=t@example.com"):
            _git("config", *who.split("="), cwd=work)
        (work / "second.md").write_text("two\n")
        _git("add", "-A", cwd=work)
        _git("commit", "-qm", "second", cwd=work)
        pushed = _git("push", "-q", "origin", "HEAD:main", cwd=work)
        assert pushed.returncode == 0, pushed.stderr
        with gitmem.open_store(sid, workspace) as s:
            s.update_settings(name="Renamed Team Notes", actor="user:admin")
        (work / "third.md").write_text("three\n")
        _git("add", "-A", cwd=work)
        _git("commit", "-qm", "third", cwd=work)
        again = _git("push", "-q", "origin", "HEAD:main", cwd=work)
        assert again.returncode == 0, again.stderr
        # the unique name is a URL too; the old name now names nothing
        by_name = tmp_path / "by-name"
        assert _git("clone", "-q", f"{base}/git/Renamed%20Team%20Notes.git", str(by_name)).returncode == 0
        assert (by_name / "third.md").read_text() == "three\n"
        assert _git("clone", "-q", f"{base}/git/Team%20Notes.git", str(tmp_path / "x")).returncode != 0
        # an ambiguous name is refused, naming the candidates by id
        with gitmem.create_store("Renamed Team Notes", home=workspace) as twin:
            twin_id = twin.id
        all_secret = token(workspace, stores={sid: "ro", twin_id: "ro"})
        http = httpx.Client(base_url=url, timeout=30)
        amb = http.get(
            "/git/Renamed Team Notes.git/info/refs?service=git-upload-pack", auth=("x", all_secret)
        )
        assert amb.status_code == 409 and sid in amb.text and twin_id in amb.text
    with gitmem.open_store(sid, workspace) as s:
        assert sorted(m.path for m in s.list()) == ["/first.md", "/second.md", "/third.md"]
        assert verify(s.core).ok


def _old_layout_workspace(home: Path) -> tuple[str, str]:
    """A workspace as the previous release laid it out: ``stores/notes.git`` (the store's name is
    its directory) and ``tokens.json`` granting by name. Built with the library, then moved into
    the old place and the old token file written by hand; returns (store id, token secret)."""
    with gitmem.create_store("notes", description="old", home=home) as s:
        s.write("/kept.md", "from the old release\n", actor="user:old")
        sid, path = s.id, s.path
    path.rename(home / "stores" / "notes.git")
    secret = token(home, stores={sid: "rw"}, actor="user:old-token")
    data = json.loads((home / "tokens.json").read_text())
    for record in data["tokens"].values():
        record["stores"] = {"notes": "rw", "gone": "ro"}  # "gone": a store deleted long ago
    (home / "tokens.json").write_text(json.dumps(data))
    (home / "tokens.json").chmod(0o600)
    return sid, secret


def test_a_workspace_of_the_old_layout_keeps_working(workspace: Path) -> None:
    sid, secret = _old_layout_workspace(workspace)
    with gitmem.open_store("notes", workspace) as s:  # by its old name, which is its directory
        assert s.id == sid and s.read("/kept.md").content == "from the old release\n"
        s.write("/new.md", "written by the new release\n")
        assert verify(s.core).ok
    assert gitmem.open_store(sid, workspace).path == workspace / "stores" / "notes.git"
    tok = TokenStore(workspace).authenticate(secret)  # still valid, its grant now by id
    assert dict(tok.stores) == {sid: "rw"}
    migrated = json.loads((workspace / "tokens.json").read_text())
    (record,) = migrated["tokens"].values()
    assert record["stores"] == {sid: "rw"} and record["legacy_grants"] == {"gone": "ro"}
    with running(workspace) as url:
        c = client(url, secret)
        assert sorted(m.path for m in c.beta.memory_stores.memories.list(sid)) == ["/kept.md", "/new.md"]
        c.beta.memory_stores.memories.create(sid, path="/api.md", content="api")
        http = httpx.Client(base_url=url, timeout=30)
        ok = http.get("/git/notes.git/info/refs?service=git-upload-pack", auth=("x", secret))
        assert ok.status_code == 200  # an old clone's URL
        # a rename keeps the old directory (and so old clones' URLs); a new "notes" gains nothing
        with gitmem.open_store(sid, workspace) as s:
            s.update_settings(name="Notes (legacy)")
        with gitmem.create_store("notes", home=workspace) as newer:
            newer_id = newer.id
        assert (
            http.get("/git/notes.git/info/refs?service=git-upload-pack", auth=("x", secret)).status_code
            == 200
        )
        with pytest.raises(anthropic.NotFoundError):  # no grant: the same 404 as no store (door)
            c.beta.memory_stores.memories.list(newer_id)
    with gitmem.open_store("notes", workspace) as s:  # the old directory name is a handle: first
        assert s.id == sid
    assert gitmem.open_store(newer_id, workspace).name == "notes"
    assert sorted(s.name for s in gitmem.list_stores(workspace)) == ["Notes (legacy)", "notes"]


def test_an_ambiguous_name_lists_the_candidates_and_an_id_like_name_never_shadows(workspace: Path) -> None:
    with (
        gitmem.create_store("twin", home=workspace) as one,
        gitmem.create_store("twin", home=workspace) as two,
    ):
        ids = sorted([one.id, two.id])
    with pytest.raises(AmbiguousStoreError) as caught:
        gitmem.open_store("twin", workspace)
    assert sorted(caught.value.candidates) == ids and caught.value.exit_code == 4
    # a store named like another's id, or like a path: the id and the path win
    with gitmem.create_store(ids[0], home=workspace) as impostor:
        impostor_id = impostor.id
    assert gitmem.open_store(ids[0], workspace).id == ids[0]
    with gitmem.create_store("./stores", home=workspace):
        pass
    assert gitmem.open_store(impostor_id, workspace).name == ids[0]


def test_the_small_semantics_the_sdk_documents_hold_through_the_sdk(workspace: Path) -> None:
    admin = token(workspace, admin=True, actor="user:admin")
    with running(workspace) as url:
        c = client(url, admin)
        store = c.beta.memory_stores.create(name="Semantics Store", description="d")
        sid = store.id
        mems, versions = c.beta.memory_stores.memories, c.beta.memory_stores.memory_versions
        # an update that changes nothing creates no version (and a no-op store update changes nothing)
        m = mems.create(sid, path="/a.md", content="one")
        mems.update(m.id, memory_store_id=sid, content="one")
        assert len(list(versions.list(sid))) == 1
        same = c.beta.memory_stores.update(sid, name="Semantics Store", description="d")
        assert same.updated_at == store.updated_at
        # memory writes do not advance the store's updated_at
        mems.update(m.id, memory_store_id=sid, content="two")
        assert c.beta.memory_stores.retrieve(sid).updated_at == store.updated_at
        # the memory_id filter still lists a memory's versions after it is deleted, the deleted one too
        mems.delete(m.id, memory_store_id=sid)
        ops = [v.operation for v in versions.list(sid, memory_id=m.id)]
        assert ops == ["deleted", "modified", "created"]
        # a version's path is null exactly when it is redacted
        first = list(versions.list(sid, memory_id=m.id))[-1]
        versions.redact(first.id, memory_store_id=sid)
        paths = {v.id: v.path for v in versions.list(sid, memory_id=m.id)}
        assert paths[first.id] is None and all(p == "/a.md" for k, p in paths.items() if k != first.id)
        # archiving advances updated_at (RFC 3339 to the second: wait for the next one)
        before = c.beta.memory_stores.retrieve(sid).updated_at
        import time

        time.sleep(1.1)
        archived = c.beta.memory_stores.archive(sid)
        assert archived.archived_at is not None and archived.updated_at > before


def test_databricks_full_names_are_unique_renamed_through_the_api_and_separate_from_names(
    workspace: Path,
) -> None:
    from test_server_databricks import curl

    admin = token(workspace, actor="user:admin", admin=True)
    base = "/api/2.1/unity-catalog/memory-stores"
    with running(workspace) as host:
        body = {"name": "prefs", "catalog_name": "main", "schema_name": "agents"}
        status, made = curl(host, admin, "POST", base, body)
        assert status == 200 and made["full_name"] == "main.agents.prefs"
        sid = made["memory_store_id"]
        assert curl(host, admin, "POST", base, body)[0] == 409  # the full name is unique
        # a store of another face named like the full name takes nothing of it
        with gitmem.create_store("main.agents.prefs", home=workspace) as lookalike:
            lookalike_id = lookalike.id
        status, got = curl(host, admin, "GET", f"{base}/main.agents.prefs")
        assert status == 200 and got["memory_store_id"] == sid
        # rename within catalog and schema; the old full name is free, the id stays
        status, renamed = curl(host, admin, "PATCH", f"{base}/main.agents.prefs", {"new_name": "settings"})
        assert status == 200 and renamed["full_name"] == "main.agents.settings"
        assert renamed["memory_store_id"] == sid and renamed["display_name"] == "main.agents.settings"
        assert curl(host, admin, "GET", f"{base}/main.agents.prefs")[0] == 404
        assert curl(host, admin, "GET", f"{base}/{sid}")[1]["full_name"] == "main.agents.settings"
        other = {"name": "other", "catalog_name": "main", "schema_name": "agents"}
        assert curl(host, admin, "POST", base, other)[0] == 200
        clash = curl(host, admin, "PATCH", f"{base}/main.agents.other", {"new_name": "settings"})
        assert clash[0] == 409
        listed = [s["full_name"] for s in curl(host, admin, "GET", base)[1]["memory_stores"]]
        assert listed == ["main.agents.other", "main.agents.settings"]
    assert gitmem.open_store(lookalike_id, workspace).settings.full_name is None
    with gitmem.open_store(sid, workspace) as s:
        assert s.settings.full_name == "main.agents.settings"


def test_attacks_on_names_urls_and_the_grant_migration(workspace: Path) -> None:
    import threading

    sid, secret = _old_layout_workspace(workspace)
    # many processes' worth of readers meet the old token file at once: all authenticate, one rewrite
    errors: list[BaseException] = []

    def read() -> None:
        try:
            assert dict(TokenStore(workspace).authenticate(secret).stores) == {sid: "rw"}
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ro = token(workspace, stores={sid: "ro"}, actor="user:reader")
    admin = token(workspace, admin=True, actor="user:admin")
    with running(workspace) as url:
        boss, reader = client(url, admin), client(url, ro)
        before = boss.beta.memory_stores.retrieve(sid)
        for bad in ("", "x" * 256, "bell\x07", "line\nbreak"):
            with pytest.raises(anthropic.BadRequestError):
                boss.beta.memory_stores.update(sid, name=bad)
        with pytest.raises(anthropic.PermissionDeniedError):
            reader.beta.memory_stores.update(sid, name="taken over")
        assert boss.beta.memory_stores.retrieve(sid) == before  # nothing written
        http = httpx.Client(base_url=url, timeout=30)
        for path in (
            "/git/.full-names.lock.git/info/refs",
            "/git/..%2F..%2Ftokens.json.git/info/refs",
            "/git/memstore_00000000000000000000000000.git/info/refs",
            "/git/*.git/info/refs",
        ):
            r = http.get(path + "?service=git-upload-pack", auth=("x", admin))
            assert r.status_code == 404, (path, r.status_code, r.text)
    with gitmem.open_store(sid, workspace) as s:
        assert s.name == "notes" and verify(s.core).ok
