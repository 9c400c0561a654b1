"""``?at=`` on the memory API's list and retrieve (gitmem's documented extension, docs/point-in-time.md),
over a real server on 127.0.0.1, with an admin and a read-only token."""

from __future__ import annotations

from pathlib import Path

import httpx2 as httpx
from serverkit import client, running, token

import gitmem


def test_list_and_retrieve_at_a_past_moment(workspace: Path) -> None:
    s = gitmem.create_store("notes", home=workspace)
    s.write("/a.md", "first words")
    first = s.versions()[0]
    s.write("/a.md", "second words")
    s.write("/b.md", "later memory")
    s.close()
    admin = token(workspace, admin=True)
    reader = token(workspace, stores={"notes": "ro"})
    with running(workspace) as url:
        sid = client(url, admin).beta.memory_stores.list().data[0].id
        base = f"{url}/v1/memory_stores/{sid}/memories"
        for secret in (admin, reader):
            h = {"x-api-key": secret}
            now = httpx.get(base, params={"view": "full"}, headers=h, timeout=30).json()["data"]
            assert sorted(m["path"] for m in now) == ["/a.md", "/b.md"]
            then = httpx.get(base, params={"view": "full", "at": first.id}, headers=h, timeout=30)
            assert then.status_code == 200, then.text
            rows = then.json()["data"]
            assert [(m["path"], m["content"]) for m in rows] == [("/a.md", "first words")]
            assert rows[0]["memory_version_id"] == first.id
            one = httpx.get(f"{base}/{first.memory_id}", params={"at": first.id}, headers=h, timeout=30)
            assert one.status_code == 200 and one.json()["content"] == "first words"
            assert (
                httpx.get(f"{base}/{first.memory_id}", headers=h, timeout=30).json()["content"]
                == "second words"
            )
            bad = httpx.get(base, params={"at": "whenever"}, headers=h, timeout=30)
            assert bad.status_code == 400
            before = httpx.get(f"{base}/{first.memory_id}", params={"at": "@0"}, headers=h, timeout=30)
            assert before.status_code == 404
