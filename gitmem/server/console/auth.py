"""Console sign-in: opaque server-side sessions, cookies and CSRF tokens.

A session id is 256 random bits; the browser holds it in an ``HttpOnly``, ``SameSite=Strict``
cookie (``Secure`` behind https). The workspace keeps only its SHA-256, with the token id and the
session's CSRF token, in ``<home>/console/sessions.sqlite``, so every worker of ``gitmem serve``
sees the same sessions and a sign-out ends a session everywhere. The token is looked up again on
every request: revoking it, or its expiry, ends its console sessions at once.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from gitmem.errors import AuthenticationError, NotFoundError
from gitmem.server.tokens import Token, TokenStore

COOKIE = "gitmem_console"
PRE_COOKIE = "gitmem_console_login"  # the login form's CSRF value, before there is a session
SESSION_SECONDS = 12 * 3600
_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions(
    id_sha256 TEXT PRIMARY KEY, token_id TEXT NOT NULL, csrf TEXT NOT NULL,
    created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL)
"""


@dataclass(frozen=True)
class SignedIn:
    """A signed-in browser: its token and the CSRF value every form must carry."""

    token: Token
    csrf: str


def _sha(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


class Sessions:
    def __init__(self, home: Path, tokens: TokenStore) -> None:
        self.dir = home / "console"
        self.path = self.dir / "sessions.sqlite"
        self.tokens = tokens

    def _db(self) -> sqlite3.Connection:
        if not self.path.exists():
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
            os.close(fd)
        db = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(_SCHEMA)
        return db

    def sign_in(self, secret: str) -> tuple[str, SignedIn]:
        """Check a token secret; a new session id (for the cookie) and the session."""
        token = self.tokens.authenticate(secret.strip())
        sid, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        now = int(time.time())
        expires = now + SESSION_SECONDS
        db = self._db()
        try:
            db.execute("DELETE FROM sessions WHERE expires_at <= ?", (now,))
            db.execute(
                "INSERT INTO sessions VALUES (?, ?, ?, ?, ?)", (_sha(sid), token.id, csrf, now, expires)
            )
        finally:
            db.close()
        return sid, SignedIn(token, csrf)

    def lookup(self, sid: str | None) -> SignedIn:
        """The session of this cookie; AuthenticationError when there is none (or it ended)."""
        if not sid:
            raise AuthenticationError("not signed in")
        db = self._db()
        try:
            row = db.execute(
                "SELECT token_id, csrf, expires_at FROM sessions WHERE id_sha256=?", (_sha(sid),)
            ).fetchone()
        finally:
            db.close()
        if row is None or int(row[2]) <= time.time():
            raise AuthenticationError("the console session ended: sign in again")
        try:
            token = self.tokens.get(str(row[0]))
        except NotFoundError:
            self.sign_out(sid)
            raise AuthenticationError("the token of this session was revoked: sign in again") from None
        if token.expired():
            self.sign_out(sid)
            raise AuthenticationError(f"token {token.id} expired at {token.expires_at}")
        return SignedIn(token, str(row[1]))

    def sign_out(self, sid: str | None) -> None:
        if not sid:
            return
        db = self._db()
        try:
            db.execute("DELETE FROM sessions WHERE id_sha256=?", (_sha(sid),))
        finally:
            db.close()


def csrf_ok(expected: str, sent: str | None) -> bool:
    return bool(sent) and hmac.compare_digest(expected.encode(), (sent or "").encode())
