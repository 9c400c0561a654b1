"""A seeded workspace, its tokens, and sign-in helpers for the console tests."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2 as httpx

import gitmem
from gitmem.server.tokens import TokenStore

XSS = (
    "---\ndescription: <img src=x onerror=\"window.__pwned='desc'\">\n---\n"
    "<script>window.__pwned='script'</script>\n"
    "<img src=x onerror=\"window.__pwned='img'\">\n"
    "[click me](javascript:window.__pwned='md') <a href=\"javascript:window.__pwned='a'\">link</a>\n"
    "</textarea><script>window.__pwned='textarea'</script>\n"
    "</pre><svg onload=\"window.__pwned='svg'\"></svg> pwnedword\n"
)


@dataclass(frozen=True)
class Seeded:
    home: Path
    admin: str
    alice: str  # notes:rw
    auditor: str  # notes:ro
    outsider: str  # only the "secret" store
    secret_version: str  # a non-head version of /prefs/editor.md holding a secret
    first_version: str  # the first version of /prefs/editor.md
    editor_id: str


def seed(home: Path) -> Seeded:
    with gitmem.create_store("notes", description="What our agents remember", home=home) as s:
        v1 = s.write(
            "/prefs/editor.md", "Alice uses vim.\n", description="Editor preferences", actor="user:alice"
        )
        s.write("/prefs/editor.md", "Alice uses helix.\nShe likes modal editing.\n", actor="user:alice")
        v3 = s.write("/prefs/editor.md", "Alice uses helix.\napi key: sk-live-0000SECRET\n", actor="user:bob")
        s.write(
            "/prefs/editor.md",
            "Alice uses helix.\nShe likes modal editing.\nKeys are in the vault.\n",
            description="Editor preferences",
            actor="user:bob",
        )
        s.write("/projects/alpha/plan.md", "Ship the alpha by Friday.\n", actor="user:carol")
        s.write("/projects/beta/notes.md", "Beta waits for the alpha.\n", actor="user:carol")
        s.write("/projects/beta/risks.md", "The beta risks slipping.\n", actor="user:carol")
        s.write(
            "/agent/todo.md",
            "Call the vendor about the deploy.\n",
            actor="session:sesn_agent1",
            session="sesn_agent1",
        )
        s.str_replace(
            "/projects/alpha/plan.md", "Friday", "Monday", actor="session:sesn_agent1", session="sesn_agent1"
        )
        s.write("/xss.md", XSS, actor="user:mallory")
        s.write("/handbook.md", "Deploys happen on Tuesdays.\n", scope="team", actor="user:carol")
        assert v1 is not None and v3 is not None
        editor_id = v1.memory_id
    with gitmem.create_store("secret", description="Not for everyone", home=home) as s:
        s.write("/plans.md", "The secret plan.\n", actor="user:admin")
    tokens = TokenStore(home)
    return Seeded(
        home,
        tokens.create(actor="user:admin", admin=True)[1],
        tokens.create(actor="user:alice", stores={"notes": "rw"})[1],
        tokens.create(actor="user:auditor", stores={"notes": "ro"})[1],
        tokens.create(actor="user:outsider", stores={"secret": "rw"})[1],
        v3.id,
        v1.id,
        editor_id,
    )


_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    m = _CSRF.search(html)
    assert m, "the page has no form with a CSRF token"
    return m.group(1)


@contextmanager
def sign_in(url: str, secret: str) -> Iterator[httpx.Client]:
    """An httpx client signed in to the console with ``secret`` (cookies kept)."""
    with httpx.Client(base_url=url, follow_redirects=False, timeout=30) as client:
        page = client.get("/console/login")
        assert page.status_code == 200
        reply = client.post(
            "/console/login", data={"csrf": csrf_of(page.text), "token": secret, "next": "/console/stores"}
        )
        assert reply.status_code == 303, reply.text
        yield client
