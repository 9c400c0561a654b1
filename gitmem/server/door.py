"""The server's one door: how every HTTP face (Anthropic, Databricks, git, MCP, console) learns
who is asking, what it may see, and how long and how much it may send (docs/access.md).

- :func:`credential`: the same credential forms on every face: ``Authorization: Bearer <token>``,
  ``x-api-key: <token>``, and HTTP Basic with the token as the password (the user name when the
  password is empty), which git's credential helpers send.
- :func:`caller_for`: the :class:`~gitmem.model.caller.Caller` a token is, with the rights it holds
  (:func:`rights_of`); the library decides everything else with it.
- :func:`store_access`: the same 404/403 rules everywhere, with no existence oracle: a store the
  token has no grant for answers exactly as a store that does not exist (404); a store it may read
  but not write answers 403 to a write.
- :data:`BODIES`: the body policy of each face (size and deadline; git streams packs, so an idle
  timeout and a cap derived from ``max_store_bytes`` instead).
- :func:`mcp_session`: the session a token's MCP writes carry (its own; never another token's).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass

from gitmem.errors import AccessError, ForbiddenError, InvalidInputError, NotFoundError
from gitmem.model.caller import DEFAULT_REVIEW_RIGHTS, DEFAULT_RW_RIGHTS, RIGHTS, Caller
from gitmem.model.paths import validate_scope
from gitmem.model.versions import validate_session
from gitmem.server.tokens import Token, TokenStore

#: Every HTTP face the server has; tests/conformance checks each one has rows in the matrix.
FACES = ("anthropic", "databricks", "git", "mcp", "console")


# ---------------------------------------------------------------------- credentials
def credential(headers: Mapping[str, str]) -> str | None:
    """The token a request carries, in any of the accepted forms (None: none)."""
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.strip().partition(" ")
        if scheme.lower() == "bearer":
            return value.strip() or None
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return None
            user, _, password = decoded.partition(":")
            return password or user or None
        return None
    key = headers.get("x-api-key")
    return key.strip() or None if key is not None else None


def authenticate(tokens: TokenStore, headers: Mapping[str, str]) -> Token:
    """The token of a request; AuthenticationError (401) when missing, unknown or expired."""
    return tokens.authenticate(credential(headers))


# ---------------------------------------------------------------------- the caller
def rights_of(token: Token) -> frozenset[str]:
    """What a token may do besides reading: an admin token everything; a token created with
    explicit rights those; else a token with a read-write grant ``write`` and ``review`` (only
    ``write`` in review mode); a read-only token nothing. ``redact``, ``erase``, ``compact``,
    ``settings`` and ``manage`` are never defaults: an admin holds them, or a token names them."""
    if token.admin:
        return RIGHTS
    named = getattr(token, "rights", None)
    if named:
        return frozenset(named) & RIGHTS
    if "rw" not in token.stores.values():
        return frozenset()
    return DEFAULT_REVIEW_RIGHTS if token.review else DEFAULT_RW_RIGHTS


def caller_for(token: Token) -> Caller:
    """The caller a token is: its actor, its own session (bound: a request cannot name another),
    its grants and scope, its review mode and rights."""
    return Caller(
        actor=token.actor,
        session=token.session,
        token_id=token.id,
        stores=dict(token.stores),
        scope=token.scope,
        review=token.review,
        rights=rights_of(token),
        session_bound=True,
    )


def store_access(
    token: Token,
    name: str,
    exists: bool,
    *,
    write: bool = False,
    scope: str | None = None,
    shown: str | None = None,
) -> None:
    """The one rule of every face: no grant (or another scope) and no store are the same 404;
    a write with a read-only grant is 403. ``shown``: how the request named the store (the
    messages say that, never ``name`` when it is an id the request did not give)."""
    said = shown if shown is not None else name
    if not exists or not token.may_read(name, None):
        raise NotFoundError(f"memory store {said} does not exist")
    if scope is not None and not token.may_read(name, scope):
        raise AccessError(f"token {token.id} may only use scope {token.scope!r}, not {scope!r}")
    if write and not token.may_write(name, scope):
        raise AccessError(f"token {token.id} may read memory store {said} but not write it")


# ---------------------------------------------------------------------- bodies
@dataclass(frozen=True)
class BodyPolicy:
    """How much a face reads and how long it waits. ``deadline``: the whole body within this many
    seconds (408); ``idle``: at most this long without a byte (streams: git); ``max_bytes`` None:
    derived from the store (git: its ``max_store_bytes``)."""

    max_bytes: int | None
    deadline: float | None
    idle: float | None = None


API_BODY = BodyPolicy(max_bytes=1 << 20, deadline=30.0)
BODIES: dict[str, BodyPolicy] = {
    "anthropic": API_BODY,
    "databricks": API_BODY,
    "mcp": BodyPolicy(max_bytes=1 << 20, deadline=30.0),
    "console": BodyPolicy(max_bytes=1 << 20, deadline=30.0),
    "git": BodyPolicy(max_bytes=None, deadline=None, idle=60.0),
}
MIN_PUSH_BYTES = 64 << 20  # a push may always carry this much (a new store's first pack)


def token_scope(token: Token, scope: str) -> str:
    """``scope`` as a request names it, checked (400) and within the token's confinement (403): the
    one check every HTTP API makes before the engine's own."""
    try:
        validate_scope(scope)
    except InvalidInputError as exc:
        raise InvalidInputError(f"scope: {exc.message}") from None
    if token.scope is not None and scope != token.scope:
        raise ForbiddenError(f"token {token.id} may only use scope {token.scope!r}, not {scope!r}")
    return scope


def push_cap(max_store_bytes: int | None, configured: int) -> int:
    """The largest push body: twice the store's ``max_store_bytes`` (a pack plus its slack),
    at least :data:`MIN_PUSH_BYTES`, never more than the server's configured cap."""
    if not max_store_bytes:
        return configured
    return min(configured, max(MIN_PUSH_BYTES, 2 * max_store_bytes))


# ---------------------------------------------------------------------- sessions
MCP_SESSION_PREFIX = "sesn_mcp_"


def mcp_session(token: Token, named: str | None) -> str:
    """The session a token's MCP writes carry: the token's own session when it has one (naming
    another is 403); else ``sesn_mcp_<token ulid>``, or a sub-session of it the client names
    (``sesn_mcp_<ulid>.<name>``, or ``<name>`` alone, which is put under the token's prefix):
    one token can never write in another token's session."""
    try:
        named = validate_session(named)
    except InvalidInputError as exc:
        raise InvalidInputError(f"session: {exc.message}") from None
    if token.session is not None:
        if named is not None and named != token.session:
            raise AccessError(
                f"token {token.id} writes as session {token.session!r}; it may not claim {named!r}"
            )
        return token.session
    own = MCP_SESSION_PREFIX + token.id.removeprefix("apikey_")
    if named is None or named == own:
        return own
    if named.startswith(own + "."):
        return named
    if named.startswith(MCP_SESSION_PREFIX):  # another token's session
        raise AccessError(f"token {token.id} may not write in session {named!r}: it is another token's")
    session = validate_session(f"{own}.{named}")
    assert session is not None
    return session
