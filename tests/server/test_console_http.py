"""The console over plain HTTP (httpx against a real uvicorn): sign-in, permissions, CSRF, headers."""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("jinja2", reason="the console needs jinja2 (pip install 'gitmem-store[server]')")

import gitmem
from tests.consolekit import XSS, Seeded, csrf_of, seed, sign_in
from tests.serverkit import running


@pytest.fixture
def seeded(workspace: Path) -> Seeded:
    return seed(workspace)


@pytest.fixture
def url(seeded: Seeded) -> Iterator[str]:
    with running(seeded.home) as base:
        yield base


def test_pages_need_a_sign_in(url: str) -> None:
    import httpx2 as httpx

    reply = httpx.get(url + "/console/stores/notes", follow_redirects=False)
    assert reply.status_code == 303
    assert reply.headers["location"].startswith("/console/login?next=")


def test_a_wrong_token_is_refused(url: str) -> None:
    import httpx2 as httpx

    with httpx.Client(base_url=url) as c:
        page = c.get("/console/login")
        reply = c.post("/console/login", data={"csrf": csrf_of(page.text), "token": "gitmem_nope"})
    assert reply.status_code == 401
    assert "invalid API token" in reply.text


def test_session_cookie_flags_and_security_headers(url: str, seeded: Seeded) -> None:
    import httpx2 as httpx

    with httpx.Client(base_url=url) as c:
        page = c.get("/console/login")
        reply = c.post("/console/login", data={"csrf": csrf_of(page.text), "token": seeded.alice})
    cookie = next(v for k, v in reply.headers.multi_items() if k == "set-cookie" and "gitmem_console=" in v)
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console/" in cookie
    assert "Secure" not in cookie  # plain http on 127.0.0.1
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert page.headers["x-content-type-options"] == "nosniff"


def test_the_cookie_is_secure_behind_https(url: str, seeded: Seeded) -> None:
    import httpx2 as httpx

    with httpx.Client(base_url=url, headers={"x-forwarded-proto": "https"}) as c:
        page = c.get("/console/login")
        assert "Secure" in page.headers["set-cookie"]
        pre = page.headers["set-cookie"].split(";")[0]  # a Secure cookie httpx keeps for https only
        reply = c.post(
            "/console/login",
            data={"csrf": csrf_of(page.text), "token": seeded.alice},
            headers={"cookie": pre},
        )
    assert reply.status_code == 303
    assert "Secure" in reply.headers["set-cookie"]


def test_stores_show_only_what_the_token_may_read(url: str, seeded: Seeded) -> None:
    with sign_in(url, seeded.alice) as c:
        text = c.get("/console/stores").text
    assert "notes" in text and "What our agents remember" in text
    assert "secret" not in text


def test_a_store_the_token_lacks_is_404_like_a_missing_one(url: str, seeded: Seeded) -> None:
    with sign_in(url, seeded.outsider) as c:
        lacked = c.get("/console/stores/notes")
        missing = c.get("/console/stores/nosuchstore")
        audit = c.get("/console/stores/notes/audit")
        path = c.get("/console/stores/..%2F..%2Fetc")
    assert lacked.status_code == missing.status_code == audit.status_code == path.status_code == 404
    assert "does not exist" in lacked.text and "What our agents remember" not in lacked.text


def test_a_scope_bound_token_sees_only_its_scope(url: str, seeded: Seeded) -> None:
    from gitmem.server.tokens import TokenStore

    _t, secret = TokenStore(seeded.home).create(actor="user:team", stores={"notes": "ro"}, scope="team")
    with sign_in(url, secret) as c:
        page = c.get("/console/stores/notes")
        other = c.get("/console/stores/notes?scope=main")
    assert "/handbook.md"[1:] in page.text and "prefs/" not in page.text
    assert other.status_code == 404


def test_a_read_only_token_gets_no_write_controls_and_403_on_posts(url: str, seeded: Seeded) -> None:
    with sign_in(url, seeded.auditor) as c:
        memory = c.get(f"/console/stores/notes/memory?scope=main&id={seeded.editor_id}")
        sessions = c.get("/console/sessions")
        csrf = csrf_of(memory.text)
        posts = [
            c.post(
                "/console/stores/notes/restore",
                data={"csrf": csrf, "version": seeded.first_version, "confirm": "yes"},
            ),
            c.post(
                "/console/stores/notes/revert",
                data={"csrf": csrf, "session": "sesn_agent1", "confirm": "yes"},
            ),
            c.post(
                "/console/stores/notes/redact",
                data={"csrf": csrf, "version": seeded.secret_version, "reason": "x", "confirm": "yes"},
            ),
        ]
        preview = c.get("/console/stores/notes/revert?session=sesn_agent1")
    assert memory.status_code == 200 and "Restore…" not in memory.text and "Redact…" not in memory.text
    assert "Revert…" not in sessions.text and "sesn_agent1" in sessions.text
    assert [p.status_code for p in posts] == [403, 403, 403]
    assert preview.status_code == 403
    with gitmem.open_store("notes", seeded.home) as s:
        assert len(s.versions("/prefs/editor.md")) == 4  # nothing was written
        assert s.version(seeded.secret_version).redaction is None


def test_posts_without_the_csrf_token_are_refused(url: str, seeded: Seeded) -> None:
    with sign_in(url, seeded.admin) as c:
        missing = c.post(
            "/console/stores/notes/restore", data={"version": seeded.first_version, "confirm": "yes"}
        )
        wrong = c.post(
            "/console/stores/notes/restore",
            data={"csrf": "x" * 43, "version": seeded.first_version, "confirm": "yes"},
        )
        page = c.get("/console/stores")
        elsewhere = c.post(
            "/console/stores/notes/restore",
            data={"csrf": csrf_of(page.text), "version": seeded.first_version, "confirm": "yes"},
            headers={"origin": "https://evil.example"},
        )
    assert missing.status_code == wrong.status_code == elsewhere.status_code == 403
    with gitmem.open_store("notes", seeded.home) as s:
        assert len(s.versions("/prefs/editor.md")) == 4


def test_a_restore_writes_as_the_signed_in_token(url: str, seeded: Seeded) -> None:
    with sign_in(url, seeded.alice) as c:
        page = c.get(f"/console/stores/notes/restore?version={seeded.first_version}")
        unconfirmed = c.post(
            "/console/stores/notes/restore",
            data={"csrf": csrf_of(page.text), "version": seeded.first_version},
        )
        done = c.post(
            "/console/stores/notes/restore",
            data={"csrf": csrf_of(page.text), "version": seeded.first_version, "confirm": "yes"},
        )
    assert unconfirmed.status_code == 200 and "I want to restore" in unconfirmed.text
    assert done.status_code == 303 and "done=restored" in done.headers["location"]
    with gitmem.open_store("notes", seeded.home) as s:
        newest = s.versions("/prefs/editor.md")[0]
        assert newest.actor == "user:alice"
        assert s.read("/prefs/editor.md").content.endswith("---\nAlice uses vim.\n")


def test_sign_out_ends_the_session(url: str, seeded: Seeded) -> None:
    with sign_in(url, seeded.alice) as c:
        page = c.get("/console/stores")
        cookie = c.cookies.get("gitmem_console")
        out = c.post("/console/logout", data={"csrf": csrf_of(page.text)})
        c.cookies.set("gitmem_console", cookie or "", path="/console/")
        after = c.get("/console/stores")
    assert out.status_code == 303
    assert after.status_code == 303 and "/console/login" in after.headers["location"]


def test_a_revoked_token_ends_its_console_sessions(url: str, seeded: Seeded) -> None:
    from gitmem.server.tokens import TokenStore

    with sign_in(url, seeded.auditor) as c:
        assert c.get("/console/stores").status_code == 200
        tokens = TokenStore(seeded.home)
        victim = next(t for t in tokens.list() if t.actor == "user:auditor")
        tokens.revoke(victim.id)
        assert c.get("/console/stores").status_code == 303


def test_content_is_escaped_in_every_page(url: str, seeded: Seeded) -> None:
    with sign_in(url, seeded.admin) as c:
        with gitmem.open_store("notes", seeded.home) as s:
            xss = s.read("/xss.md")
        pages = [
            c.get(f"/console/stores/notes/memory?scope=main&id={xss.memory_id}").text,
            c.get("/console/stores/notes?q=pwnedword").text,
            c.get("/console/stores/notes").text,
        ]
    assert html.escape("<script>window.__pwned='script'</script>", quote=False) in pages[0].replace(
        "&#39;", "'"
    )
    for text in pages:
        assert "<script>window" not in text and "<img src=x" not in text and "<svg onload" not in text
        assert 'href="javascript:' not in text
    assert "pwnedword" in pages[1]
    assert XSS.count("\n") > 3


def test_the_login_never_redirects_off_site(url: str, seeded: Seeded) -> None:
    import httpx2 as httpx

    with httpx.Client(base_url=url) as c:
        page = c.get("/console/login")
        reply = c.post(
            "/console/login",
            data={"csrf": csrf_of(page.text), "token": seeded.alice, "next": "//evil.example/x"},
        )
    assert reply.headers["location"] == "/console/stores"
