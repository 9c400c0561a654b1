"""API tokens: who a request is, which stores and scopes it may touch, and the actor it writes as.

Every face of the server (the Anthropic API, git over HTTP, remote MCP, the console) authenticates
with these. A token's secret is shown once, at creation; the workspace keeps only its SHA-256
(``<home>/tokens.json``, mode 0600). The secret is 256 random bits, so a plain hash is as strong as
a slow one, and it carries the token's public id so that a lookup needs no scan::

    gitmem_<ULID>_<43 characters of base64url>   ->   id apikey_<ULID>
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gitmem import config
from gitmem.errors import AuthenticationError, ConfigError, GitmemError, InvalidInputError, NotFoundError
from gitmem.ids import ULID_RE, is_id, new_ulid
from gitmem.model.paths import validate_scope
from gitmem.model.versions import validate_actor, validate_session

TOKENS_FILE = "tokens.json"
ALL_STORES = "*"
ACCESS = ("ro", "rw")
_SECRET_RE = re.compile(rf"^gitmem_({ULID_RE})_([A-Za-z0-9_-]{{43}})\Z")
_ID_RE = re.compile(rf"^apikey_{ULID_RE}\Z")
_DURATION_RE = re.compile(r"^(\d{1,6})([mhdw])\Z")
_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# A file changed this close to when it was read may change again with the same size and time
# stamp (file times tick coarsely): it is read again until it is older (git's "racy" rule).
RACY_NS = 2_000_000_000


@dataclass(frozen=True)
class Token:
    """One API token (never its secret).

    ``stores`` maps a store id (or ``*``: every store) to ``ro`` or ``rw`` (a name given at
    creation is resolved to its store's id then: docs/stores.md); an admin token may
    read and write every store and manage stores. ``scope`` None: any scope (``main`` by default).
    ``session``: writes are tagged with this session. ``review``: its writes land as a proposal
    (one per token, or per its session) that a reviewer accepts or rejects (docs/review.md).
    """

    id: str
    actor: str
    stores: Mapping[str, str] = field(default_factory=dict)
    scope: str | None = None
    session: str | None = None
    admin: bool = False
    expires_at: str | None = None
    created_at: str = ""
    review: bool = False
    #: Rights beyond the defaults (docs/access.md): e.g. ``("write", "redact")``; empty: defaults.
    rights: tuple[str, ...] = ()
    #: The workspace the token belongs to (set when it is read from there; never stored).
    home: str = field(default="", compare=False, repr=False)

    def _access(self, store: str) -> str | None:
        """``store`` is a store id, or a store's handle (docs/stores.md): an old-layout
        store's directory name means that store's id, never a display name."""
        if self.admin:
            return "rw"
        found = self.stores.get(ALL_STORES)
        key = store if store == ALL_STORES or is_id(store, "memstore") else _handle_id(self.home, store)
        return (self.stores.get(key) if key is not None else None) or found

    def may_read(self, store: str, scope: str | None = None) -> bool:
        """Whether this token may read ``store`` (in ``scope``, when given)."""
        return self._access(store) is not None and self._scope_ok(scope)

    def may_write(self, store: str, scope: str | None = None) -> bool:
        """Whether this token may write ``store`` (in ``scope``, when given)."""
        return self._access(store) == "rw" and self._scope_ok(scope)

    def _scope_ok(self, scope: str | None) -> bool:
        return scope is None or self.scope is None or scope == self.scope

    def default_scope(self) -> str:
        return self.scope or "main"

    def expired(self, now: dt.datetime | None = None) -> bool:
        if self.expires_at is None:
            return False
        now = now or dt.datetime.now(dt.UTC)
        return now >= parse_time(self.expires_at)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["stores"] = dict(self.stores)
        data["rights"] = list(self.rights)
        data.pop("home")
        return data


_HANDLE_IDS: dict[tuple[str, str], str] = {}  # (home, old-layout handle) -> store id; handles never move


def _handle_id(home: str, handle: str) -> str | None:
    """The id of the store whose directory is ``<handle>.git`` (None: no such store)."""
    cached = _HANDLE_IDS.get((home, handle))
    if cached is not None:
        return cached
    from gitmem.store import store_id_by_handle

    try:
        found = store_id_by_handle(handle, home) if home else None
    except GitmemError:
        return None
    if found is None:
        return None
    _HANDLE_IDS[(home, handle)] = found
    return found


def parse_time(text: str) -> dt.datetime:
    """An RFC 3339 time (``Z`` or an offset; a date alone is midnight UTC)."""
    try:
        value = dt.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise InvalidInputError(
            f"invalid time {text!r}: expected RFC 3339, e.g. 2026-01-31T12:00:00Z"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def expiry(text: str | None, now: dt.datetime | None = None) -> str | None:
    """``30d``, ``12h``, ``90m``, ``2w`` from now, or an RFC 3339 time; None: never expires."""
    if text is None:
        return None
    now = now or dt.datetime.now(dt.UTC)
    m = _DURATION_RE.match(text)
    when = now + dt.timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2)]) if m else parse_time(text)
    if when <= now:
        raise InvalidInputError(f"expiry {text!r} is not in the future")
    return when.astimezone(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def parse_store_grant(text: str) -> tuple[str, str]:
    """``STORE``, ``STORE:rw`` or ``STORE:ro`` (``*`` for every store; STORE an id or a unique
    name) -> (store, access)."""
    name, colon, access = text.rpartition(":")
    if not colon:
        name, access = text, "rw"
    if access not in ACCESS:
        raise InvalidInputError(f"invalid store grant {text!r}: use STORE, STORE:rw or STORE:ro")
    if not name:
        raise InvalidInputError(f"invalid store grant {text!r}: no store named")
    return name, access


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class TokenStore:
    """The tokens of one workspace, in ``<home>/tokens.json``.

    Changes take a file lock and replace the file atomically; every process (server workers, the
    CLI) sees a revocation at its next request because the file is re-read when it changes: when
    its size, time stamp or inode differ from the copy read, and while it is younger than
    ``RACY_NS`` (an edit within one tick of the file clock can keep size and time stamp).
    """

    def __init__(self, home: str | os.PathLike[str] | None = None) -> None:
        self.path = config.workspace_home(home) / TOKENS_FILE
        self._home = str(self.path.parent)
        self._lock = threading.Lock()
        self._key: tuple[int, int, int] | None = None
        self._read_ns = 0  # when the file as cached was read (time.time_ns())
        self._records: dict[str, dict[str, Any]] = {}
        self._tokens: dict[str, Token] = {}  # parsed records of the file as last read

    # ------------------------------------------------------------------ file
    def _load(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            try:
                st = self.path.stat()
            except FileNotFoundError:
                self._key, self._records, self._tokens = None, {}, {}
                return self._records
            key = (st.st_mtime_ns, st.st_size, st.st_ino)
            if key != self._key or self._read_ns - st.st_mtime_ns < RACY_NS:
                read_ns = time.time_ns()
                self._records = self._read_migrated()
                self._tokens = {}
                self._key, self._read_ns = key, read_ns
            return self._records

    def _parsed(self, token_id: str, record: dict[str, Any]) -> Token:
        """``record`` as a Token, parsed once per version of the file (``_load`` empties this)."""
        with self._lock:
            token = self._tokens.get(token_id)
            if token is None or self._records.get(token_id) is not record:
                token = _token(record, self._home)
                if self._records.get(token_id) is record:
                    self._tokens[token_id] = token
            return token

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{self.path}: unreadable token file ({exc})") from None
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, dict):
            raise ConfigError(f"{self.path}: key 'tokens' is missing or not a mapping")
        return tokens

    def _read_migrated(self) -> dict[str, dict[str, Any]]:
        """The records, with grants by store name first rewritten to store ids (gitmem.server.grants)."""
        from gitmem.server import grants

        records = self._read()
        if not grants.needs_migration(records):
            return records
        try:
            with self._locked():
                records = self._read()
                if grants.needs_migration(records):
                    records = grants.migrate(records, self.path.parent)
                    self._save(records)
        except OSError:  # a reader that may not write the file: migrated for this process only
            records = grants.migrate(self._read(), self.path.parent)
        return records

    def _save(self, records: dict[str, dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{TOKENS_FILE}.tmp{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"tokens": records}, fh, indent=2, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, self.path)

    def _locked(self) -> Any:
        from gitmem.store import file_lock

        return file_lock(self.path.with_name(f".{TOKENS_FILE}.lock"))

    # ------------------------------------------------------------------ verbs
    def create(
        self,
        *,
        actor: str | None = None,
        stores: Mapping[str, str] | None = None,
        scope: str | None = None,
        session: str | None = None,
        admin: bool = False,
        expires: str | None = None,
        review: bool = False,
        rights: tuple[str, ...] | list[str] = (),
    ) -> tuple[Token, str]:
        """A new token and its secret (shown once: only its hash is kept).

        ``actor`` defaults to ``api:<token id>``; ``session`` tags every write with that session.
        """
        ulid = new_ulid()
        token_id = f"apikey_{ulid}"
        grants: dict[str, str] = {}
        for name, access in (stores or {}).items():
            if access not in ACCESS:
                raise InvalidInputError(f"invalid access {access!r} for store {name!r}: use ro or rw")
            key = name if name == ALL_STORES else self._store_id(name)
            grants[key] = "rw" if "rw" in (access, grants.get(key)) else access
        from gitmem.model.caller import RIGHTS

        unknown = sorted(set(rights) - RIGHTS)
        if unknown:
            raise InvalidInputError(f"unknown right(s) {', '.join(unknown)}: use {', '.join(sorted(RIGHTS))}")
        if actor is not None and actor.startswith("session:"):
            raise InvalidInputError("a token's actor cannot be a session: give --session instead")
        token = Token(
            id=token_id,
            actor=validate_actor(actor) if actor is not None else f"api:{token_id}",
            stores=grants,
            scope=validate_scope(scope) if scope is not None else None,
            session=validate_session(session),
            admin=admin,
            expires_at=expiry(expires),
            created_at=config.now_rfc3339(),
            review=review,
            rights=tuple(sorted(set(rights))),
            home=self._home,
        )
        secret = f"gitmem_{ulid}_{secrets.token_urlsafe(32)}"
        with self._locked():
            records = dict(self._read()) if self.path.exists() else {}
            records[token_id] = {**token.to_dict(), "secret_sha256": _hash(secret)}
            self._save(records)
        return token, secret

    def _store_id(self, name: str) -> str:
        """The id of the store ``name`` names now (a grant follows that store, not the name)."""
        from gitmem.store import resolve_store

        return resolve_store(name, self.path.parent).id

    def list(self) -> list[Token]:
        """Every token, oldest first."""
        return [_token(r, self._home) for _i, r in sorted(self._load().items())]

    def get(self, token_id: str) -> Token:
        record = self._load().get(token_id)
        if record is None:
            raise NotFoundError(f"token {token_id} does not exist")
        return _token(record, self._home)

    def revoke(self, token_id: str) -> Token:
        """Delete a token: its secret stops working at once, in every process."""
        if not _ID_RE.match(token_id):
            raise InvalidInputError(f"invalid token id {token_id!r}: expected apikey_<ulid>")
        with self._locked():
            records = dict(self._read()) if self.path.exists() else {}
            record = records.pop(token_id, None)
            if record is None:
                raise NotFoundError(f"token {token_id} does not exist")
            self._save(records)
        return _token(record, self._home)

    def authenticate(self, secret: str | None) -> Token:
        """The token whose secret this is; AuthenticationError when missing, unknown or expired."""
        if not secret:
            raise AuthenticationError("no API token: send 'Authorization: Bearer <token>' or 'x-api-key'")
        m = _SECRET_RE.match(secret)
        token_id = f"apikey_{m.group(1)}" if m else ""
        record = self._load().get(token_id) if m else None
        stored = record.get("secret_sha256") if record else None
        # Compare even for an unknown id, so that timing says nothing about which ids exist.
        ok = hmac.compare_digest(_hash(secret), stored if isinstance(stored, str) else "0" * 64)
        if record is None or not ok:
            raise AuthenticationError("invalid API token")
        token = self._parsed(token_id, record)
        if token.expired():
            raise AuthenticationError(f"API token {token.id} expired at {token.expires_at}")
        return token


def _token(record: dict[str, Any], home: str = "") -> Token:
    names = {f.name for f in dataclasses.fields(Token)} - {"home"}
    fields = {k: v for k, v in record.items() if k in names}
    if "rights" in fields:
        fields["rights"] = tuple(fields["rights"] or ())
    return Token(**fields, home=home)
