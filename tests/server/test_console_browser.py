"""The console in a real headless Chromium (Debian's chromium + chromium-driver, driven by selenium)
against a real ``gitmem serve`` on 127.0.0.1 with a seeded store. The run saves screenshots of the
main pages (shown in docs/console.md) into docs/screenshots/ when GITMEM_SCREENSHOTS=1 (``make
screenshots``), so an ordinary test run leaves the work tree as it was."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jinja2", reason="the console needs jinja2 (pip install 'gitmem-store[server]')")
webdriver = pytest.importorskip("selenium.webdriver", reason="install selenium (pip install selenium)")

import gitmem  # noqa: E402
from tests.browserkit import browser_sign_in, by, chromium, follow  # noqa: E402
from tests.consolekit import Seeded, seed  # noqa: E402
from tests.serverkit import running  # noqa: E402

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = [
    pytest.mark.skipif(
        CHROMIUM is None, reason="Debian package chromium is not installed (apt-get install chromium)"
    ),
    pytest.mark.skipif(
        DRIVER is None,
        reason="Debian package chromium-driver is not installed (apt-get install chromium-driver)",
    ),
]
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium("--window-size=1280,900") as driver:
        yield driver


@pytest.fixture
def site(workspace: Path, browser: Any) -> Iterator[tuple[str, Seeded]]:
    seeded = seed(workspace)
    with running(seeded.home) as url:
        browser.delete_all_cookies()
        yield url, seeded


def sign_in(browser: Any, url: str, secret: str) -> None:
    browser_sign_in(browser, url, secret)


def shot(browser: Any, name: str, width: int = 1280) -> None:
    if os.environ.get("GITMEM_SCREENSHOTS") != "1":
        return
    SHOTS.mkdir(parents=True, exist_ok=True)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(width, min(max(int(height) + 120, 600), 2000))
    browser.save_screenshot(str(SHOTS / f"{name}.png"))
    browser.set_window_size(1280, 900)


def test_browse_history_diff_and_restore(browser: Any, site: tuple[str, Seeded]) -> None:
    url, seeded = site
    sign_in(browser, url, seeded.alice)
    rows = browser.find_elements(*by("#stores tbody tr"))
    assert [r.find_element(*by("td a")).text for r in rows] == ["notes"]  # not "secret"
    shot(browser, "stores")
    follow(browser, browser.find_element(*by("#stores td a")))
    tree = browser.find_element(*by("#tree")).text
    assert "prefs/" in tree and "projects/" in tree and "3 memories" in tree and "xss.md" in tree
    shot(browser, "store")
    follow(browser, browser.find_element(*by("a.dir[href*='prefs']")))
    follow(browser, browser.find_element(*by("#tree a[href*='memory']")))
    assert browser.find_element(*by("h1")).text == "/prefs/editor.md"
    assert browser.find_element(*by("#description")).text == "Editor preferences"
    history = browser.find_elements(*by("#history tbody tr"))
    assert len(history) == 4 and "user:bob" in history[0].text
    history[3].find_element(*by("input[name=a]")).click()
    history[0].find_element(*by("input[name=b]")).click()
    follow(browser, browser.find_element(*by("#compare")))
    diff = browser.find_element(*by("#diff"))
    assert "Alice uses vim." in diff.find_element(*by("tr.del")).text
    assert any("Keys are in the vault." in r.text for r in diff.find_elements(*by("tr.add")))
    shot(browser, "memory")
    follow(browser, browser.find_element(*by("a[href*='mode=split']")))
    assert browser.find_element(*by("#diff.split td.del")).text == "Alice uses vim."
    shot(browser, "diff-split")
    shot(browser, "memory-phone", width=390)
    # restore the first version, with its confirmation
    follow(browser, browser.find_element(*by(f"a[href*='restore?version={seeded.first_version}']")))
    assert browser.find_element(*by("h1")).text.startswith("Restore /prefs/editor.md")
    browser.find_element(*by("#restore-form input[name=confirm]")).click()
    follow(browser, browser.find_element(*by("#restore-form button")))
    assert "Restored as version" in browser.find_element(*by("#done")).text
    assert browser.find_element(*by("#content")).text.endswith("Alice uses vim.")
    assert len(browser.find_elements(*by("#history tbody tr"))) == 5
    assert "user:alice" in browser.find_elements(*by("#history tbody tr"))[0].text


def test_search_shows_ranked_snippets(browser: Any, site: tuple[str, Seeded]) -> None:
    url, seeded = site
    sign_in(browser, url, seeded.auditor)
    browser.get(url + "/console/stores/notes")
    box = browser.find_element(*by("#q"))
    box.send_keys("alpha")
    follow(browser, browser.find_element(*by("form[role=search] button")))
    hits = browser.find_elements(*by("#hits li"))
    assert hits and "alpha" in hits[0].find_element(*by("mark")).text.lower()
    assert {h.find_element(*by("a")).text for h in hits} >= {
        "/projects/alpha/plan.md",
        "/projects/beta/notes.md",
    }


def test_session_revert_preview_then_confirm(browser: Any, site: tuple[str, Seeded]) -> None:
    url, seeded = site
    sign_in(browser, url, seeded.alice)
    browser.get(url + "/console/sessions")
    row = browser.find_element(*by("#sesn_agent1"))
    assert "notes@main: 2 versions" in row.text
    shot(browser, "sessions")
    follow(browser, row.find_element(*by("a.action")))
    preview = browser.find_element(*by("#preview")).text
    assert "/agent/todo.md" in preview and "delete" in preview and "restore" in preview
    shot(browser, "revert-preview")
    with gitmem.open_store("notes", seeded.home) as s:
        assert s.read("/agent/todo.md").content  # the preview wrote nothing
    browser.find_element(*by("#revert-form input[name=confirm]")).click()
    follow(browser, browser.find_element(*by("#revert-form button")))
    assert "2 new versions written as user:alice" in browser.find_element(*by("#done")).text
    with gitmem.open_store("notes", seeded.home) as s:
        assert "/agent/todo.md" not in [m.path for m in s.list()]
        assert "Friday" in (s.read("/projects/alpha/plan.md").content or "")


def test_redact_a_version_as_admin_and_see_it_marked(browser: Any, site: tuple[str, Seeded]) -> None:
    url, seeded = site
    sign_in(browser, url, seeded.admin)
    browser.get(url + f"/console/stores/notes/memory?scope=main&id={seeded.editor_id}")
    follow(browser, browser.find_element(*by(f"a[href*='redact?version={seeded.secret_version}']")))
    assert "1 version" in browser.find_element(*by("#preview")).text
    assert not browser.find_elements(*by("#blocking"))
    browser.find_element(*by("#reason")).send_keys("an API key was pasted")
    shot(browser, "redact-preview")
    browser.find_element(*by("#redact-form input[name=confirm]")).click()
    follow(browser, browser.find_element(*by("#redact-form button")))
    assert "1 version of scope main redacted by user:admin" in browser.find_element(*by("#done")).text
    checks = browser.find_elements(*by("#checks tbody tr"))
    statuses = [c.find_elements(*by("td"))[1].text for c in checks]
    assert len(statuses) >= 5 and set(statuses) == {"ok"}
    shot(browser, "redacted-proof")
    follow(browser, browser.find_element(*by("li a[href*='/versions/']")))
    marked = browser.find_element(*by(f"tr[id='{seeded.secret_version}']"))
    assert "redacted by user:admin" in marked.text and "an API key was pasted" in marked.text
    # the head cannot be redacted: the preview says why, and offers no form
    head = browser.find_element(*by("#history tbody tr")).get_attribute("id")
    browser.get(url + f"/console/stores/notes/redact?version={head}")
    assert "currently holds this content" in browser.find_element(*by("#blocking")).text
    assert not browser.find_elements(*by("#redact-form"))
    browser.get(url + "/console/stores/notes/integrity")
    assert browser.find_element(*by("#verdict")).text == "all checks passed"
    shot(browser, "integrity")


def test_filter_the_audit_timeline(browser: Any, site: tuple[str, Seeded]) -> None:
    url, seeded = site
    sign_in(browser, url, seeded.auditor)
    browser.get(url + "/console/stores/notes/audit")
    assert browser.find_elements(*by("#chart rect"))
    legend = browser.find_element(*by("#legend")).text
    assert "user:carol" in legend and "user:bob" in legend
    shot(browser, "audit")
    follow(browser, browser.find_element(*by("#by-session")))
    assert "sesn_agent1 (2)" in browser.find_element(*by("#legend")).text
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element(*by("#filters select[name=type]"))).select_by_visible_text("modified")
    browser.find_element(*by("#filters input[name=actor]")).send_keys("user:bob")
    follow(browser, browser.find_element(*by("#filters button")))
    rows = browser.find_elements(*by("#events tbody tr"))
    assert len(rows) == 2 and all("modified" in r.text and "user:bob" in r.text for r in rows)
    follow(browser, rows[0].find_element(*by("a")))
    assert browser.find_element(*by("h1")).text == "/prefs/editor.md"


def test_content_is_text_and_no_script_runs(browser: Any, site: tuple[str, Seeded]) -> None:
    url, seeded = site
    sign_in(browser, url, seeded.admin)
    with gitmem.open_store("notes", seeded.home) as s:
        xss = s.read("/xss.md")
    pages = [
        f"/console/stores/notes/memory?scope=main&id={xss.memory_id}",
        "/console/stores/notes?q=pwnedword",
        "/console/stores/notes",
        "/console/stores/notes/audit",
        "/console/stores/notes/redact?pattern=pwnedword&scope=main",
    ]
    for page in pages:
        browser.get(url + page)
        assert browser.execute_script("return typeof window.__pwned") == "undefined", page
        assert not browser.find_elements(*by("main img")) and not browser.find_elements(
            *by("main a[href^=javascript]")
        )
    browser.get(url + pages[0])
    text = browser.find_element(*by("#content")).text
    assert "<script>window.__pwned='script'</script>" in text and "</textarea>" in text
    assert "<img src=x onerror=\"window.__pwned='desc'\">" in browser.find_element(*by("#description")).text
    # even a script that got in could not run: the CSP refuses inline script
    browser.execute_script(
        "var s = document.createElement('script'); s.textContent = 'window.__pwned = 1'; document.body.appendChild(s);"
    )
    assert browser.execute_script("return typeof window.__pwned") == "undefined"
