"""The server's fast read path: a retrieve answered on the event loop (no worker thread) checks
everything the ordinary path checks, and a change of a token, of its grants, of the store or of
the memory takes effect on the very next request."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest

import gitmem
from gitmem.server.tokens import TokenStore
from tests.helpers import edit_in_place
from tests.serverkit import running, token


def _inline(http: httpx.Client) -> int:
    m = re.search(r"^gitmem_inline_reads_total (\S+)$", http.get("/metrics").text, re.M)
    assert m is not None
    return int(float(m.group(1)))


@pytest.fixture
def served(workspace: Path) -> Iterator[tuple[Path, str, str, str, str]]:
    """A store ``notes`` with one memory, served; yields (home, url, store id, memory id, secret)."""
    with gitmem.create_store("notes", home=workspace) as s:
        store_id = s.settings.id
        mem = s.write("/a.md", "hello\n", actor="user:alice")
        assert mem is not None
    secret = token(workspace, stores={"notes": "rw"})
    with running(workspace) as url:
        yield workspace, url, store_id, mem.memory_id, secret


def _client(url: str, secret: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"authorization": f"Bearer {secret}"}, timeout=30)


def _get(http: httpx.Client, store_id: str, mid: str, **params: str) -> httpx.Response:
    return http.get(f"/v1/memory_stores/{store_id}/memories/{mid}", params=params)


def test_inline_retrieve_answers_as_the_threaded_one(served: tuple[Path, str, str, str, str]) -> None:
    _home, url, sid, mid, secret = served
    with _client(url, secret) as http:
        first = _get(http, sid, mid)  # opens the Store and brings its index up: a worker thread
        assert first.status_code == 200 and _inline(http) == 0
        second = _get(http, sid, mid)
        assert _inline(http) == 1  # now on the event loop
        assert second.json() == first.json() and second.json()["content"] == "hello\n"
        basic = _get(http, sid, mid, view="basic")
        assert basic.status_code == 200 and basic.json()["content"] is None
        # Every check still runs inline: a bad scope, an unknown memory, a bad id.
        assert _get(http, sid, mid, scope="Bad Scope!").status_code == 400
        missing = _get(http, sid, "mem_01JAAAAAAAAAAAAAAAAAAAAAAA")
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
        assert _get(http, sid, "not-an-id").status_code == 400
        assert _get(http, sid, mid, scope="other").status_code == 404  # nothing in that scope


def test_a_write_moves_the_tip_and_the_next_retrieve_sees_it(
    served: tuple[Path, str, str, str, str],
) -> None:
    home, url, sid, mid, secret = served
    with _client(url, secret) as http:
        _get(http, sid, mid)
        assert _get(http, sid, mid).json()["content"] == "hello\n"
        # Written by another process (the library here): the server's Store has not seen it.
        with gitmem.open_store("notes", home) as s:
            s.write("/a.md", "changed\n", actor="user:bob")
        assert _get(http, sid, mid).json()["content"] == "changed\n"
        # And through the server itself.
        r = http.post(f"/v1/memory_stores/{sid}/memories/{mid}", json={"content": "third\n"})
        assert r.status_code == 200
        assert _get(http, sid, mid).json()["content"] == "third\n"
        assert _get(http, sid, mid).json()["content"] == "third\n"


def test_a_revoked_token_is_refused_on_the_next_request(served: tuple[Path, str, str, str, str]) -> None:
    home, url, sid, mid, secret = served
    with _client(url, secret) as http:
        _get(http, sid, mid)
        assert _get(http, sid, mid).status_code == 200
        tokens = TokenStore(home)  # another process's view of the workspace (the CLI)
        (tok,) = tokens.list()
        tokens.revoke(tok.id)
        r = _get(http, sid, mid)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"


def test_a_changed_grant_takes_effect_on_the_next_request_even_with_the_same_size_and_time(
    served: tuple[Path, str, str, str, str],
) -> None:
    home, url, sid, mid, secret = served
    tokens_file = home / "tokens.json"
    with _client(url, secret) as http:
        _get(http, sid, mid)
        assert _get(http, sid, mid).status_code == 200
        grant = f'"{sid}": '.encode()  # grants hold store ids
        edit_in_place(tokens_file, grant + b'"rw"', grant + b'"ro"')
        assert _get(http, sid, mid).status_code == 200  # may still read
        w = http.post(f"/v1/memory_stores/{sid}/memories/{mid}", json={"content": "x"})
        assert w.status_code == 403
        other = f'"{sid[:-1]}{"A" if sid[-1] != "A" else "B"}": '.encode()  # another id: no grant at all
        edit_in_place(tokens_file, grant + b'"ro"', other + b'"ro"')
        r = _get(http, sid, mid)
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"  # no oracle
        # A replaced file (what `gitmem token` does), with a scope restriction now.
        data = json.loads(tokens_file.read_text())
        (record,) = data["tokens"].values()
        record["stores"], record["scope"] = {sid: "ro"}, "team"
        tmp = tokens_file.with_name("tokens.json.new")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, tokens_file)
        assert _get(http, sid, mid, scope="main").status_code == 403  # not the token's scope
        assert _get(http, sid, mid).status_code == 404  # its own scope, team: nothing there


def test_a_store_deleted_and_made_again_by_another_process_is_not_served_from_the_old_store(
    served: tuple[Path, str, str, str, str],
) -> None:
    home, url, sid, mid, secret = served
    with _client(url, secret) as http:
        _get(http, sid, mid)
        assert _get(http, sid, mid).status_code == 200
        gitmem.delete_store("notes", home)  # the CLI, while the server holds an open Store of it
        r = _get(http, sid, mid)
        assert r.status_code == 404
        with gitmem.create_store("notes", home=home) as s:
            s.write("/a.md", "new store\n", actor="user:alice")
            new_id = s.settings.id
        assert new_id != sid
        assert _get(http, sid, mid).status_code == 404
        # the token's grant named the old store's id: the new store of that name is not its, and
        # a store without a grant answers as one that does not exist (server/door.py)
        assert http.get(f"/v1/memory_stores/{new_id}/memories").status_code == 404
    with _client(url, token(home, stores={"notes": "rw"})) as http:
        listed = http.get(f"/v1/memory_stores/{new_id}/memories").json()["data"]
        new_mid = listed[0]["id"]
        assert _get(http, new_id, new_mid).json()["content"] == "new store\n"
        assert _get(http, new_id, new_mid).json()["content"] == "new store\n"


def test_an_archived_store_still_reads_and_refuses_writes(served: tuple[Path, str, str, str, str]) -> None:
    home, url, sid, mid, secret = served
    with _client(url, secret) as http:
        _get(http, sid, mid)
        assert _get(http, sid, mid).status_code == 200
        with gitmem.open_store("notes", home) as s:
            s.update_settings(actor="user:admin", archived_at="2026-01-01T00:00:00Z")
        assert _get(http, sid, mid).json()["content"] == "hello\n"
        w = http.post(f"/v1/memory_stores/{sid}/memories/{mid}", json={"content": "x"})
        assert w.status_code == 409
