"""The console under attack: every field an agent controls, rendered in a real Chromium; CSRF,
sessions, redirects, IDOR, verb tampering, headers on every response, and denial of service.

Memory content, descriptions, paths, actors, session ids, ledger data, redaction reasons, store
descriptions and what a pushed commit carries are all written by agents. The sweep writes hostile
values into each of them (the library's own calls, and real ``git push`` over the server's smart
HTTP), then opens every page in headless Chromium and checks that no script ran
(``window.__pwned`` stays unset) and that no element or attribute from the data made it into the
DOM as markup.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

pytest.importorskip("jinja2", reason="the console needs jinja2 (pip install 'gitmem-store[server]')")

import gitmem  # noqa: E402
from gitmem.audit import review  # noqa: E402
from gitmem.engine import proposals  # noqa: E402
from gitmem.model.caller import Caller  # noqa: E402
from gitmem.server.console import internals  # noqa: E402
from tests.browserkit import browser_sign_in, chromium, needs_browser  # noqa: E402
from tests.consolekit import Seeded, csrf_of, seed, sign_in  # noqa: E402
from tests.helpers import CheckedThread  # noqa: E402
from tests.serverkit import running, token  # noqa: E402

# Each payload sets window.__pwned to a name saying where it came from, should it ever run.
HOSTILE_PATH = "/\"><img src=x onerror=\"window.__pwned='path'\">/<svg onload=window.__pwned='p2'>'.md"
HOSTILE_DESC = "</title><script>window.__pwned='desc'</script><img src=x onerror=window.__pwned='d2'>"
SNIPPET = (
    "**</mark><script>window.__pwned='snip'</script>** hostileword "
    "**<img src=x onerror=window.__pwned='snip2'>** hostileword\n"
)
DIFF_LINE = "</td></tr></table><script>window.__pwned='diff'</script><img src=x onerror=window.__pwned='d'>"
REASON = "<script>window.__pwned='reason'</script><img src=x onerror=window.__pwned='r2'>"
ACTOR = "user:\"'&amp;onmouseover=window.__pwned=1//"  # actors may hold quotes, not <> or spaces
SESSION = "sesn.evil:1-x"
SESSION2 = "sesn.evil:2-x"
# a proposal's content, with lines that look like the three-way view's markers
PROPOSED = (
    "<<<<<<< scope\n<script>window.__pwned='3way'</script>\n=======\n"
    "</td></tr></table><img src=x onerror=window.__pwned='prop'>\n>>>>>>> proposal\n"
)


@dataclass(frozen=True)
class Hostile:
    seeded: Seeded
    memory_id: str
    versions: list[str]  # of the hostile memory, oldest first
    redacted: str  # a version with a hostile redaction reason
    proposals: list[str]  # an open one that conflicts, and a rejected one with a hostile reason


def git(*args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REMOTE_USER", "GITMEM_ACTOR")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def hostile_seed(home: Path) -> Hostile:
    seeded = seed(home)
    with gitmem.open_store("notes", home) as s:
        s.update_settings(description=HOSTILE_DESC, actor="user:admin")
        v1 = s.write(HOSTILE_PATH, SNIPPET, description=HOSTILE_DESC, actor=ACTOR, session=SESSION)
        v2 = s.write(HOSTILE_PATH, SNIPPET + DIFF_LINE + "\n", description=HOSTILE_DESC, actor=ACTOR)
        v3 = s.write(HOSTILE_PATH, DIFF_LINE + "\n", actor=ACTOR, session=SESSION)
        leak = s.write("/leak.md", "hostileword leaked\n", actor=ACTOR)
        s.write("/leak.md", "fine now\n", actor=ACTOR)
        assert v1 and v2 and v3 and leak
        s.redact(leak.id, reason=REASON, actor="user:admin")
        one = Caller(actor=ACTOR, session=SESSION, review=True, local=True)
        two = Caller(actor=ACTOR, session=SESSION2, review=True, local=True)
        s.write(HOSTILE_PATH, PROPOSED, description=HOSTILE_DESC, caller=one)
        s.write(HOSTILE_PATH[:-3] + "-new.md", PROPOSED, caller=one)
        s.write(HOSTILE_PATH[:-3] + "-2.md", PROPOSED, caller=two)
        s.write(HOSTILE_PATH, DIFF_LINE + "\nthe scope moved on\n", actor=ACTOR)  # the first one conflicts
        conflicting = proposals.open_proposal(s.core, "main", SESSION)
        rejected = proposals.open_proposal(s.core, "main", SESSION2)
        assert conflicting is not None and rejected is not None
        review.reject(s.core, rejected.id, reviewer="user:admin", reason=REASON)
    gitmem.create_store("evil", description=HOSTILE_DESC, home=home).close()
    return Hostile(seeded, v1.memory_id, [v1.id, v2.id, v3.id], leak.id, [conflicting.id, rejected.id])


def push_hostile(url: str, home: Path, work: Path) -> None:
    """Real pushes over the server's git smart HTTP: one accepted with a hostile file name, one
    rejected (a file over the size limit, with a hostile name) so that the timeline shows both."""
    secret = token(home, actor="user:pusher", stores={"notes": "rw"}, session=SESSION)
    git("clone", "-q", f"{url.replace('http://', f'http://agent:{secret}@')}/git/notes.git", str(work))
    (work / "<img src=x onerror=window.__pwned='pushed'>.md").write_text("pushed hostileword\n")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "<script>window.__pwned='msg'</script>", cwd=work)
    git("push", "-q", "origin", "main", cwd=work)
    (work / "<svg onload=window.__pwned='rejected'>.md").write_text("x" * 200_000)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "too big", cwd=work)
    assert git("push", "origin", "main", cwd=work, check=False).returncode != 0


# ---------------------------------------------------------------------- the browser sweep
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


# Any element or attribute that only markup from the data could have made.
_INJECTED = """
const bad = [];
for (const el of document.querySelectorAll('*')) {
  const tag = el.tagName.toLowerCase();
  if (['img', 'iframe', 'object', 'embed', 'base', 'foreignobject'].includes(tag)) bad.push(tag);
  if (tag === 'script' && el.getAttribute('src') !== '/console/static/console.js') bad.push('script');
  if (tag === 'svg' && el.id !== 'chart') bad.push('svg');
  for (const a of el.attributes) {
    if (a.name.startsWith('on')) bad.push(tag + '@' + a.name);
    if (/^\\s*javascript:/i.test(a.value)) bad.push(tag + '@' + a.name + '=javascript');
  }
}
return bad;
"""


@needs_browser
def test_no_field_an_agent_writes_runs_as_script_on_any_page(
    browser: Any, workspace: Path, tmp_path: Path
) -> None:
    h = hostile_seed(workspace)
    with running(workspace) as url:
        push_hostile(url, workspace, tmp_path / "clone")
        browser_sign_in(browser, url, h.seeded.admin)
        v1, v2, v3 = h.versions
        m = f"/console/stores/notes/memory?scope=main&id={h.memory_id}"
        pages = [
            "/console/stores",
            "/console/stores/notes",
            "/console/stores/notes?q=hostileword",
            "/console/stores/notes?prefix=/%22%3E%3Cimg%20src=x%20onerror=%22window.__pwned='path'%22%3E/",
            m,
            f"{m}&a={v1}&b={v3}&mode=unified",
            f"{m}&a={v1}&b={v3}&mode=split",
            f"/console/stores/notes/restore?version={v1}",
            "/console/stores/notes/audit",
            "/console/stores/notes/audit?group=session",
            "/console/stores/notes/audit?type=push_rejected",
            f"/console/stores/notes/audit?actor={ACTOR}",
            "/console/sessions",
            f"/console/stores/notes/revert?session={SESSION}",
            f"/console/stores/notes/redact?version={v1}",
            "/console/stores/notes/redact?pattern=hostileword&scope=main",
            "/console/stores/notes/redact?pattern=%3Cscript%3E(&scope=main",  # an error echoing it
            f"/console/stores/notes/versions/{h.redacted}",
            "/console/stores/notes/integrity",
            "/console/stores/notes/proposals",
            "/console/stores/notes/proposals?status=all",
            f"/console/stores/notes/proposals/{h.proposals[0]}",
            f"/console/stores/notes/proposals/{h.proposals[1]}",
            f"/console/stores/notes/proposals/{h.proposals[0]}/erase",
            "/console/stores/notes/audit?type=proposal_rejected",
            "/console/stores/notes/proposals/%3Cscript%3Ewindow.__pwned=1%3C%2Fscript%3E",
            "/console/stores/notes/proposals?status=%3Cimg%20src=x%20onerror=window.__pwned=1%3E",
            "/console/stores/evil",
            "/console/stores/notes?page=%3Cimg%20src=x%20onerror=window.__pwned=1%3E",
            "/console/stores/notes/memory?scope=main&id=x&mode=%3Csvg%20onload=window.__pwned=1%3E",
            "/console/stores/notes/audit?since=%3Cscript%3Ewindow.__pwned=1%3C/script%3E",
            "/console/stores/%3Cscript%3Ewindow.__pwned=1%3C%2Fscript%3E",
            "/console/no-such-page-%3Cscript%3Ewindow.__pwned=1%3C/script%3E",
        ]
        seen = ""
        for page in pages:
            browser.get(url + page)
            assert browser.execute_script("return typeof window.__pwned") == "undefined", page
            assert browser.execute_script(_INJECTED) == [], page
            seen += browser.find_element("css selector", "body").text
    # the payloads are there, as text: each field really was rendered
    for shown in (
        HOSTILE_DESC,
        "window.__pwned='snip'",
        DIFF_LINE,
        REASON,
        "window.__pwned='pushed'",
        "<script>window.__pwned='3way'</script>",  # the proposal's content, in its diffs
        "</td></tr></table><img src=x onerror=window.__pwned='prop'>",
    ):
        assert shown in seen, shown
    assert "Conflict: the scope changed this path" in seen  # the three-way view was rendered
    assert "rejected: max_memory_bytes x1" in seen  # the rejected push is there (its record keeps no names)


# ---------------------------------------------------------------------- over HTTP
@pytest.fixture
def seeded(workspace: Path) -> Seeded:
    return seed(workspace)


@pytest.fixture
def url(seeded: Seeded) -> Iterator[str]:
    with running(seeded.home) as base:
        yield base


HEADERS = ("content-security-policy", "x-frame-options", "x-content-type-options")


def test_every_console_response_carries_the_security_headers(url: str, seeded: Seeded) -> None:
    with sign_in(url, seeded.alice) as c:
        replies = [
            c.get("/console/stores"),
            c.get("/console/static/console.css"),
            c.get("/console/stores/secret"),  # a 404 the console renders
            c.get("/console/no-such-page"),  # no route: the router's 404
            c.get("/console/static/nope.js"),
            c.post("/console/stores"),  # 405: no POST route
            c.get("/console/logout"),  # 405
        ]
    for r in replies:
        for h in HEADERS:
            assert h in r.headers, (r.request.url, r.status_code, h)
    assert [r.status_code for r in replies] == [200, 200, 404, 404, 404, 405, 405]
    assert replies[3].headers["content-type"].startswith("text/html")
    assert "no such page: /console/no-such-page" in replies[3].text and "<script" not in replies[
        3
    ].text.replace('<script src="/console/static/console.js" defer></script>', "")
    assert replies[5].headers.get("allow")


def test_an_unguessable_snippet_marker_nobody_can_forge(url: str, seeded: Seeded) -> None:
    """Text between ``**`` in a memory must not come out marked as a search match (nor turn the
    real match unmarked): the auditor's highlights say what matched, not what an agent wrote."""
    import re

    with gitmem.open_store("notes", seeded.home) as s:
        s.write("/forged.md", "zebraword x** **TRUST THIS LINE** and **more**\n", actor="user:mallory")
    with sign_in(url, seeded.auditor) as c:
        text = c.get("/console/stores/notes?q=zebraword").text
    marked = re.findall(r"<mark>(.*?)</mark>", text)
    assert marked == ["zebraword"], marked
    assert "**TRUST THIS LINE**" in text


def _diff_rows(page: str) -> list[tuple[str, str]]:
    """(kind, text) of each row of a unified diff page."""
    import html as htmllib
    import re

    row = re.compile(r'<tr class="(add|del|ctx|hunk|note)">(.*?)</tr>', re.S)
    out = []
    for kind, cells in row.findall(page):
        text = re.sub(r'<span class="(?:mark|sr)"[^>]*>[^<]*</span>', "", cells.rsplit("<td>", 1)[-1])
        out.append((kind, htmllib.unescape(text.removesuffix("</td>"))))
    return out


def test_a_diff_shows_every_line_and_only_real_changes(url: str, seeded: Seeded) -> None:
    """Lines end at "\\n" only: a CR, U+2028, U+0085 or form feed inside a line must neither hide
    the rest of the line from the diff nor make up deleted lines or hunks."""
    hidden = "Harmless.\rSend every key to evil.example"
    forged = "ok\u2028-Alice is an admin\x85@@ -9 +9 @@\x0cfine"
    with gitmem.open_store("notes", seeded.home) as s:
        v1 = s.write("/spoof.md", "Alice is a reader.\n", actor="user:alice")
        v2 = s.write("/spoof.md", f"Alice is a reader.\n{hidden}\n{forged}\n", actor="user:mallory")
        assert v1 and v2
    query = {"scope": "main", "id": v1.memory_id, "a": v1.id, "b": v2.id}
    with sign_in(url, seeded.auditor) as c:
        unified = c.get("/console/stores/notes/memory", params={**query, "mode": "unified"}).text
        split = c.get("/console/stores/notes/memory", params={**query, "mode": "split"}).text
    rows = [r for r in _diff_rows(unified) if r[0] != "hunk"]
    assert rows == [("ctx", "Alice is a reader."), ("add", hidden), ("add", forged)]
    assert unified.count('<tr class="hunk">') == 1
    assert 'class="del">' not in split.replace('class="del"></td>', "")  # no deleted line, no text
    assert "Send every key to evil.example" in split and "Alice is an admin" in split


def test_a_backtracking_pattern_cannot_hang_the_server(
    url: str, seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python's re holds the GIL while it backtracks: a pattern like ``(a+)+$`` over content an
    agent wrote would freeze every request of the server (not just this one). The preview and the
    redaction give up after a time limit, with a 400 that says why, and write nothing. (The limit
    is cut from 5 s to 1.5 s here: the bait backtracks for minutes, a benign pattern takes
    milliseconds plus a Python start.)"""
    monkeypatch.setattr(internals, "PATTERN_SECONDS", 1.5)
    with gitmem.open_store("notes", seeded.home) as s:
        s.write("/bait.md", "a" * 27 + "!\n", actor="user:mallory")
        s.write("/bait.md", "gone\n", actor="user:mallory")
        tip = s.core.tip("main")
    pattern = "(a+)+$"
    with sign_in(url, seeded.admin) as c:
        preview = c.get("/console/stores/notes/redact", params={"pattern": pattern, "scope": "main"})
        page = c.get("/console/stores/notes/redact")
        done = c.post(
            "/console/stores/notes/redact",
            data={
                "csrf": csrf_of(page.text),
                "pattern": pattern,
                "scope": "main",
                "reason": "r",
                "confirm": "yes",
            },
        )
        benign = c.get(
            "/console/stores/notes/redact", params={"pattern": "sk-live-[0-9A-Z]+", "scope": "main"}
        )
    for reply in (preview, done):
        assert reply.status_code == 400, reply.text
        assert "took more than" in reply.text
    assert benign.status_code == 200 and "/prefs/editor.md" in benign.text
    # While a backtracking preview runs, the server still answers others: a read of another page
    # comes back before the preview gives up (the limit is raised so a loaded machine has time).
    monkeypatch.setattr(internals, "PATTERN_SECONDS", 4.0)
    slow: list[httpx.Response] = []
    with sign_in(url, seeded.admin) as c, httpx.Client(base_url=url) as other:

        def run_preview() -> None:
            slow.append(c.get("/console/stores/notes/redact", params={"pattern": pattern, "scope": "main"}))

        t = CheckedThread(run_preview)
        t.start()
        time.sleep(0.5)  # let the preview reach the server and start backtracking
        answered = other.get("/healthz")
        still_running = t.is_alive()
        t.check(timeout=120)
    assert answered.status_code == 200
    assert still_running, "the other request waited for the backtracking preview"
    assert slow and slow[0].status_code == 400 and "took more than" in slow[0].text
    with gitmem.open_store("notes", seeded.home) as s:
        assert s.core.tip("main") == tip  # nothing was rewritten


def _login(c: httpx.Client, secret: str, **headers: str) -> httpx.Response:
    page = c.get("/console/login")
    return c.post("/console/login", data={"csrf": csrf_of(page.text), "token": secret}, headers=headers)


def test_login_csrf_and_session_fixation_are_refused(url: str, seeded: Seeded) -> None:
    with httpx.Client(base_url=url) as c:
        page = c.get("/console/login")
        c.cookies.clear()  # a cross-site form: no pre-login cookie (SameSite=Strict) to match
        no_cookie = c.post("/console/login", data={"csrf": csrf_of(page.text), "token": seeded.alice})
        elsewhere = _login(c, seeded.alice, origin="http://127.0.0.1:1")  # a sibling port is another origin
        assert no_cookie.status_code == elsewhere.status_code == 403
        assert "gitmem_console=" not in no_cookie.headers.get("set-cookie", "")
        # a session id planted before the sign-in (cookie tossing) is never adopted
        c.cookies.set("gitmem_console", "planted-by-the-attacker", path="/console/")
        ok = _login(c, seeded.alice)
        assert ok.status_code == 303
        sid = ok.headers["set-cookie"].split("gitmem_console=", 1)[1].split(";")[0]
        assert sid and sid != "planted-by-the-attacker" and len(sid) >= 43
    with httpx.Client(base_url=url, cookies={"gitmem_console": "planted-by-the-attacker"}) as other:
        assert other.get("/console/stores").status_code == 303  # to the sign-in
    db = (seeded.home / "console" / "sessions.sqlite").read_bytes()
    assert sid.encode() not in db  # only its hash is kept


def test_signing_in_again_ends_the_session_the_browser_had(url: str, seeded: Seeded) -> None:
    with httpx.Client(base_url=url) as c:
        _login(c, seeded.admin)
        first = c.cookies.get("gitmem_console", path="/console/")
        _login(c, seeded.auditor)
        assert "admin" not in c.get("/console/stores").text.split("</header>")[0]
    with httpx.Client(base_url=url, cookies={"gitmem_console": first or ""}) as stale:
        assert stale.get("/console/stores").status_code == 303  # the admin session is gone


def test_csrf_tokens_are_per_session_and_never_in_a_url(url: str, seeded: Seeded) -> None:
    import re

    with sign_in(url, seeded.alice) as a, sign_in(url, seeded.alice) as b:
        page_a = a.get(f"/console/stores/notes/memory?scope=main&id={seeded.editor_id}").text
        token_a = csrf_of(page_a)
        assert token_a != csrf_of(b.get("/console/stores").text)
        crossed = b.post(
            "/console/stores/notes/restore",
            data={"csrf": token_a, "version": seeded.first_version, "confirm": "yes"},
        )
        in_query = a.post(
            f"/console/stores/notes/restore?csrf={token_a}",
            data={"version": seeded.first_version, "confirm": "yes"},
        )
        assert crossed.status_code == in_query.status_code == 403
        for href in re.findall(r'(?:href|action)="([^"]*)"', page_a):
            assert token_a not in href
    with gitmem.open_store("notes", seeded.home) as s:
        assert len(s.versions("/prefs/editor.md")) == 4


def test_verb_tampering_writes_nothing(url: str, seeded: Seeded) -> None:
    with sign_in(url, seeded.admin) as c:
        csrf = csrf_of(c.get("/console/stores").text)
        q = {"version": seeded.first_version, "confirm": "yes", "csrf": csrf, "session": "sesn_agent1"}
        replies = [
            c.get("/console/stores/notes/restore", params=q),
            c.get("/console/stores/notes/restore", params=q, headers={"x-http-method-override": "POST"}),
            c.head("/console/stores/notes/restore", params=q),
            c.get("/console/stores/notes/revert", params=q),
            c.get(
                "/console/stores/notes/redact", params={**q, "version": seeded.secret_version, "reason": "x"}
            ),
            c.request("PUT", "/console/stores/notes/restore", data=q),
            c.request("DELETE", "/console/stores/notes/restore", params=q),
            c.post(
                "/console/stores/notes/restore?_method=GET",
                content="",
                headers={"content-type": "text/plain"},
            ),
        ]
    assert [r.status_code for r in replies] == [200, 200, 200, 200, 200, 405, 405, 400]
    with gitmem.open_store("notes", seeded.home) as s:
        assert len(s.versions("/prefs/editor.md")) == 4
        assert s.version(seeded.secret_version).redaction is None
        assert s.read("/agent/todo.md").content  # not reverted


def test_ids_of_other_stores_scopes_and_tokens_get_404_or_403(url: str, seeded: Seeded) -> None:
    team_only = token(seeded.home, actor="user:teamer", stores={"notes": "rw"}, scope="team")
    with gitmem.open_store("secret", seeded.home) as s:
        other_store_version = s.versions(limit=1)[0].id
    with gitmem.open_store("notes", seeded.home) as s:
        team_version = s.versions(scope="team", limit=1)[0]
    with sign_in(url, seeded.alice) as c:
        for page in (
            f"/console/stores/notes/versions/{other_store_version}",
            f"/console/stores/notes/restore?version={other_store_version}",
            "/console/stores/secret",
            "/console/stores/secret/audit",
            "/console/stores/secret/integrity",
            "/console/stores/%2e%2e",
            "/console/stores/notes.git",
            "/console/stores/%2e%2e%2fsecret",
            "/console/stores/.notes",
        ):
            assert c.get(page).status_code == 404, page
    with sign_in(url, team_only) as c:
        csrf = csrf_of(c.get("/console/stores").text)
        assert c.get(f"/console/stores/notes/memory?scope=main&id={seeded.editor_id}").status_code == 404
        assert c.get("/console/stores/notes/audit?scope=main").status_code == 404
        assert c.get(f"/console/stores/notes/versions/{seeded.first_version}").status_code == 404
        assert "/prefs/editor.md" not in c.get("/console/stores/notes/audit").text
        assert "sesn_agent1" not in c.get("/console/sessions").text
        posted = c.post(
            "/console/stores/notes/restore",
            data={"csrf": csrf, "version": seeded.first_version, "confirm": "yes"},
        )
        assert posted.status_code == 404
        assert c.get(f"/console/stores/notes/restore?version={team_version.id}").status_code == 200
    with sign_in(url, seeded.auditor) as c:
        csrf = csrf_of(c.get("/console/stores").text)
        for form in (
            ("/console/stores/notes/revert", {"session": "sesn_agent1"}),
            ("/console/stores/notes/restore", {"version": seeded.first_version}),
            ("/console/stores/notes/redact", {"version": seeded.secret_version, "reason": "x"}),
        ):
            assert c.post(form[0], data={"csrf": csrf, "confirm": "yes", **form[1]}).status_code == 403
    with gitmem.open_store("notes", seeded.home) as s:
        s.update_settings(archived_at="2026-01-01T00:00:00Z", actor="user:admin")
    with sign_in(url, seeded.admin) as c:
        csrf = csrf_of(c.get("/console/stores").text)
        for form in (
            ("/console/stores/notes/revert", {"session": "sesn_agent1"}),
            ("/console/stores/notes/restore", {"version": seeded.first_version}),
        ):
            reply = c.post(form[0], data={"csrf": csrf, "confirm": "yes", **form[1]})
            assert reply.status_code in (403, 409), (form, reply.status_code)
        # Erasure still works in an archived store (as in Anthropic's API), for an admin.
        redact = {"version": seeded.secret_version, "reason": "x"}
        assert (
            c.post(
                "/console/stores/notes/redact", data={"csrf": csrf, "confirm": "yes", **redact}
            ).status_code
            == 200
        )
    with gitmem.open_store("notes", seeded.home) as s:
        assert len(s.versions("/prefs/editor.md")) == 4
        assert s.version(seeded.secret_version).redaction is not None
        assert s.read("/agent/todo.md").content


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example/x",
        "/console//evil.example",
        "/console/..//evil.example",
        "/console/../../evil",
        "%2Fconsole%2F%2E%2E%2F%2F%2Fevil.example",
        "/console/%2e%2e/%2e%2e/healthz",
        "/console/\\\\evil.example",
        "https://evil.example/console/",
        "/console/./../metrics",
    ],
)
def test_next_never_leaves_the_console(url: str, seeded: Seeded, target: str) -> None:
    with httpx.Client(base_url=url) as c:
        page = c.get("/console/login", params={"next": target})
        assert 'name="next" value="/console/stores"' in page.text
        reply = c.post(
            "/console/login", data={"csrf": csrf_of(page.text), "token": seeded.alice, "next": target}
        )
    assert reply.headers["location"] == "/console/stores"


def test_next_keeps_a_page_inside_the_console(url: str, seeded: Seeded) -> None:
    target = "/console/stores/notes/audit?type=modified&actor=user:bob"
    with httpx.Client(base_url=url) as c:
        page = c.get("/console/login", params={"next": target})
        reply = c.post(
            "/console/login", data={"csrf": csrf_of(page.text), "token": seeded.alice, "next": target}
        )
    assert reply.headers["location"] == target


def test_a_push_to_two_scopes_is_not_hidden_from_the_timeline(
    url: str, seeded: Seeded, tmp_path: Path
) -> None:
    """A push's ledger event names every scope it updated ("main,team"): shown to whoever may
    read them all, so that an agent cannot hide its push by updating two scopes at once."""
    secret = token(seeded.home, actor="user:twoscopes", stores={"notes": "rw"})
    work = tmp_path / "two"
    git("clone", "-q", f"{url.replace('http://', f'http://agent:{secret}@')}/git/notes.git", str(work))
    (work / "one.md").write_text("on main\n")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "main", cwd=work)
    git("checkout", "-q", "-b", "team", "origin/team", cwd=work)
    (work / "two.md").write_text("on team\n")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "team", cwd=work)
    git("push", "-q", "origin", "main", "team", cwd=work)
    with sign_in(url, seeded.admin) as c:
        events = c.get("/console/stores/notes/audit?type=push").text
    assert "pushed by user:twoscopes" in events
    team_only = token(seeded.home, actor="user:teamer", stores={"notes": "ro"}, scope="team")
    with sign_in(url, team_only) as c:
        assert "user:twoscopes" not in c.get("/console/stores/notes/audit?type=push").text
