"""The console's search picks a mode (docs/search.md): lexical by default, semantic, hybrid or auto
from the form, says which mode answered, and refuses an unknown one; with the real bundled model."""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("jinja2", reason="the console needs jinja2 (pip install 'gitmem-store[server]')")

import gitmem
from gitmem.engine import vectors
from tests.consolekit import Seeded, seed, sign_in
from tests.serverkit import running

pytestmark = pytest.mark.skipif(
    not vectors.available(), reason="optional: the extra 'semantic' is not installed"
)


@pytest.fixture
def seeded(workspace: Path) -> Seeded:
    s = seed(workspace)
    with gitmem.open_store("notes", s.home) as store:
        store.write("/people/bob.md", "Bob cannot eat peanuts or shellfish; he carries an epipen.\n")
        store.write("/people/dave.md", "Dave plays the violin in an orchestra on weekends.\n")
    return s


@pytest.fixture
def url(seeded: Seeded) -> Iterator[str]:
    with running(seeded.home) as base:
        yield base


def _hits(page: str) -> list[str]:
    section = page.split('id="hits"', 1)[1].split("</ol>", 1)[0]
    return [html.unescape(p.split("</a>", 1)[0].rsplit(">", 1)[1]) for p in section.split("<li>")[1:]]


def _answered(page: str) -> str:
    return page.split('id="answered-mode">', 1)[1].split("<", 1)[0]


def test_the_console_searches_by_meaning_when_asked(url: str, seeded: Seeded) -> None:
    with sign_in(url, seeded.admin) as c:
        lexical = c.get("/console/stores/notes", params={"q": "any food allergies?"})
        assert lexical.status_code == 200
        assert _answered(lexical.text) == "lexical" and _hits(lexical.text) == []
        assert '<option value="lexical" selected>' in lexical.text
        for mode in ("semantic", "hybrid"):
            page = c.get("/console/stores/notes", params={"q": "any food allergies?", "mode": mode})
            assert page.status_code == 200, page.text
            assert _answered(page.text) == mode, mode
            assert _hits(page.text)[0] == "/people/bob.md", mode
            assert f'<option value="{mode}" selected>' in page.text
        words = c.get("/console/stores/notes", params={"q": "violin", "mode": "hybrid"})
        assert _hits(words.text)[0] == "/people/dave.md" and "<mark>violin</mark>" in words.text
        auto = c.get("/console/stores/notes", params={"q": "musical hobbies", "mode": "auto"})
        assert _answered(auto.text) == "hybrid" and _hits(auto.text)[0] == "/people/dave.md"
        bad = c.get("/console/stores/notes", params={"q": "x", "mode": "vector<script>"})
        assert bad.status_code == 400 and "<script>" not in bad.text
