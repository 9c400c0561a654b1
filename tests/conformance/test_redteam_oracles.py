"""Existence oracles (issue 25's adversarial review, docs/access.md "the same rule for stores"): a
store a token has no grant for answers exactly as a store that does not exist (404, never 403),
on every face that names a store in its URL, and the answer never names what the token may not
see (the store's id when it was asked by name). Each test failed before its fix."""

from __future__ import annotations

from pathlib import Path

import httpx2 as httpx
import pytest
from serverkit import running, token

import gitmem

UNKNOWN_ID = "memstore_01ZZZZZZZZZZZZZZZZZZZZZZZZ"


@pytest.fixture
def world(workspace: Path) -> tuple[str, str]:
    """A store the caller may not see (by name and id) and a token granted another store only."""
    with gitmem.create_store("cat.s.hidden", home=workspace, full_name="cat.s.hidden") as hidden:
        hidden_id = hidden.settings.id
    gitmem.create_store("mine", home=workspace).close()
    return hidden_id, token(workspace, actor="user:outsider", stores={"mine": "rw"})


def _same(known: httpx.Response, unknown: httpx.Response, secret_id: str) -> None:
    assert known.status_code == unknown.status_code == 404, (known.text, unknown.text)
    assert secret_id not in known.text  # asked by name: the id is what the token may not learn


@pytest.mark.parametrize(
    "path",
    [
        "/v1/gitmem/stores/{}/proposals",  # the review API
        "/v1/gitmem/stores/{}/proposals/prop_01ZZZZZZZZZZZZZZZZZZZZZZZZ",
        "/v1/gitmem/stores/{}/dream_pipeline",  # the dreams API's pipelines
    ],
)
def test_gitmem_store_routes_are_no_existence_oracle(
    workspace: Path, world: tuple[str, str], path: str
) -> None:
    hidden_id, secret = world
    h = {"authorization": f"Bearer {secret}"}
    with running(workspace) as url, httpx.Client(base_url=url, timeout=30) as http:
        by_name = http.get(path.format("cat.s.hidden"), headers=h)
        unknown_name = http.get(path.format("cat.s.nosuch"), headers=h)
        _same(by_name, unknown_name, hidden_id)
        by_id = http.get(path.format(hidden_id), headers=h)
        unknown_id = http.get(path.format(UNKNOWN_ID), headers=h)
        assert by_id.status_code == unknown_id.status_code == 404
        assert by_id.json()["error"]["type"] == unknown_id.json()["error"]["type"]


def test_databricks_store_by_full_name_is_no_existence_oracle(
    workspace: Path, world: tuple[str, str]
) -> None:
    hidden_id, secret = world
    h = {"authorization": f"Bearer {secret}"}
    base = "/api/2.1/unity-catalog/memory-stores"
    with running(workspace) as url, httpx.Client(base_url=url, timeout=30) as http:
        for suffix, method in (
            ("", "GET"),
            ("/entries?scope=main", "GET"),
            ("/entries:get?scope=main&path=/a.md", "GET"),
        ):
            known = http.request(method, f"{base}/cat.s.hidden{suffix}", headers=h)
            unknown = http.request(method, f"{base}/cat.s.nosuch{suffix}", headers=h)
            _same(known, unknown, hidden_id)
            assert known.text.replace("hidden", "X") == unknown.text.replace("nosuch", "X")
