"""The SDK's own self-hosted sync engine (``SessionMemoryStores``) against `gitmem serve`.

Its clock is monkeypatched (the module's ``monotonic``), so the 5 s sync interval and the 30 s delete
corroboration pass without waiting; nothing in gitmem changes for it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import anthropic
import pytest
from anthropic.lib.tools import _memories
from anthropic.types.beta import BetaManagedAgentsSession
from anthropic.types.beta.sessions import BetaManagedAgentsMemoryStoreResource
from serverkit import client, running, token

import gitmem


def _session(resources: list[tuple[str, str, str]]) -> BetaManagedAgentsSession:
    return BetaManagedAgentsSession.model_construct(
        resources=[
            BetaManagedAgentsMemoryStoreResource.model_construct(
                type="memory_store", memory_store_id=sid, access=access, name=name, mount_path=None
            )
            for sid, access, name in resources
        ]
    )


def test_session_memory_stores_round_trip(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(_memories, "monotonic", lambda: clock[0])
    for name in ("notes", "refs"):
        gitmem.create_store(name, home=workspace).close()
    admin_secret = token(workspace, admin=True, actor="user:admin")
    agent_secret = token(
        workspace, stores={"notes": "rw", "refs": "ro"}, session="sesn_sync", actor="user:agent"
    )
    workdir = tmp_path / "work"
    with running(workspace) as url:
        admin = client(url, admin_secret)
        ids = {s.name: s.id for s in admin.beta.memory_stores.list()}
        api = admin.beta.memory_stores.memories
        a = api.create(ids["notes"], path="/a.md", content="a0")
        for path in ("/b.md", "/e.md", "/dir/c.md"):
            api.create(ids["notes"], path=path, content=path)
        api.create(ids["refs"], path="/r.md", content="reference")

        async def run() -> None:
            stores = _memories.SessionMemoryStores(
                anthropic.AsyncAnthropic(base_url=url, api_key=agent_secret), workdir=workdir
            )
            await stores.download(
                _session([(ids["notes"], "read_write", "notes"), (ids["refs"], "read_only", "refs")])
            )
            notes, refs = workdir / "memory" / "notes", workdir / "memory" / "refs"
            assert (notes / "dir" / "c.md").read_text() == "/dir/c.md" and (
                refs / "r.md"
            ).read_text() == "reference"
            (notes / "new.md").write_text("created locally")
            (notes / "e.md").write_text("edited locally")
            (notes / "a.md").write_text("edited locally, loses")
            (notes / "b.md").rename(notes / "b2.md")
            (notes / "dir" / "c.md").unlink()
            (refs / "r.md").write_text("read-only: never pushed")
            # A concurrent edit through the API: the server side wins over the local edit of /a.md.
            api.update(a.id, memory_store_id=ids["notes"], content="a1 from the api")
            api.create(ids["notes"], path="/remote.md", content="pulled")
            clock[0] += 20
            await stores.sync_if_due()
            assert (notes / "a.md").read_text() == "a1 from the api"
            assert (notes / "remote.md").read_text() == "pulled"
            clock[0] += 40
            await stores.finish()
            await stores.dispose()

        asyncio.run(run())

        with gitmem.open_store("notes", workspace) as store:
            heads = {m.path: m.content for m in store.list("/", with_content=True)}  # type: ignore[union-attr]
            assert heads == {
                "/a.md": "a1 from the api",
                "/b2.md": "/b.md",
                "/e.md": "edited locally",
                "/new.md": "created locally",
                "/remote.md": "pulled",
            }
            mine = {(v.operation, v.path) for v in store.versions(scope="main", session="sesn_sync")}
            assert mine == {
                ("created", "/new.md"),
                ("modified", "/e.md"),
                ("created", "/b2.md"),
                ("deleted", "/b.md"),
                ("deleted", "/dir/c.md"),
            }
            assert all(v.actor == "user:agent" for v in store.versions(scope="main", session="sesn_sync"))
        with gitmem.open_store("refs", workspace) as store:
            assert store.read("/r.md").content == "reference"
            assert len(store.versions(scope="main")) == 1
        assert not workdir.joinpath("memory", "notes").exists()  # disposed
