"""Who is asking: the explicit caller every library operation takes (docs/access.md).

A :class:`Caller` names the actor and session a write is attributed to, the token behind it, the
stores and scopes it may read and write, whether its changes go to review, and the rights it holds.
The engine decides with it (``gitmem.engine.access``); faces only build one: the server from the
API token that authenticated the request (``gitmem.server.door``), the pre-receive hook from the
pusher, the CLI and the library the local actor (:meth:`Caller.local`: full trust, as anyone who
can open the repository is).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gitmem.errors import AccessError

#: Every right a caller can hold. ``admin`` holds all of them.
RIGHTS = frozenset({"write", "redact", "review", "admin", "erase", "compact", "settings", "manage"})
#: What a read-write token holds unless it names its rights: write, and review others' proposals.
DEFAULT_RW_RIGHTS = frozenset({"write", "review"})
#: What a review-mode token holds: its writes become proposals; it decides none.
DEFAULT_REVIEW_RIGHTS = frozenset({"write"})
ALL = "*"
#: Every way into gitmem (docs/access.md). tests/conformance holds a row for each face x operation.
FACES = (
    "library",
    "cli",
    "anthropic",
    "databricks",
    "mcp-stdio",
    "mcp-http",
    "memory-tool",
    "session-sync",
    "langgraph",
    "openai-agents",
    "git-file",
    "git-ssh",
    "git-http",
    "console",
    "conversations",
    "responses",
    "dreams",
    "cluster-proxy",
)
#: Every operation the conformance matrix checks on every face.
OPERATIONS = (
    "create",
    "update",
    "rename",
    "delete",
    "redact",
    "review-accept",
    "restore",
    "revert-session",
    "search",
    "list",
    "clone",
    "webhooks",  # the admin's webhook endpoints: list, create, delete, enable, test (docs/webhooks.md)
)


@dataclass(frozen=True)
class Caller:
    """One caller. ``stores`` maps a store name (or ``*``) to ``ro`` or ``rw``; None: every store,
    read-write (the local caller). ``scope``: the one scope it may touch (None: any).
    ``session_bound``: the session is the caller's own (a token's), so no request may name another.
    ``local``: the library, the CLI or ``file://``: the actor and session are whatever it says."""

    actor: str | None
    session: str | None = None
    token_id: str | None = None
    stores: Mapping[str, str] | None = None
    scope: str | None = None
    review: bool = False
    rights: frozenset[str] = field(default_factory=lambda: RIGHTS)
    session_bound: bool = False
    local: bool = False

    @classmethod
    def local_actor(cls, actor: str | None = None, session: str | None = None) -> Caller:
        """The full-trust local caller (library, CLI, ``file://``); ``acl.review`` still applies."""
        return cls(actor=actor, session=session, rights=RIGHTS, local=True)

    # ------------------------------------------------------------------ questions
    def has(self, right: str) -> bool:
        return "admin" in self.rights or right in self.rights

    def access(self, store: str) -> str | None:
        if self.stores is None or "admin" in self.rights:
            return "rw"
        return self.stores.get(store) or self.stores.get(ALL)

    def may_read(self, store: str, scope: str | None = None) -> bool:
        return self.access(store) is not None and self.scope_ok(scope)

    def may_write(self, store: str, scope: str | None = None) -> bool:
        return self.access(store) == "rw" and self.scope_ok(scope) and self.has("write")

    def scope_ok(self, scope: str | None) -> bool:
        return scope is None or self.scope is None or scope == self.scope

    @property
    def reviewer(self) -> bool:
        """Whether this caller receives every proposal of the stores and scopes it may read: it
        holds the ``review`` right and is not itself in review mode (docs/access.md, "Who receives
        which refs": ``/git``'s hidden refs and the APIs', MCP's and the console's proposals)."""
        return self.has("review") and not self.review

    def reviews(self, store: str) -> bool:
        """Whether this caller is a reviewer of ``store`` (its id): :attr:`reviewer`, with a
        read-write grant on that store. A token's rights are the same on every store it holds,
        so ``review`` (a default of any read-write grant) must not reach a store it only reads."""
        return self.reviewer and self.access(store) == "rw"

    @property
    def owner(self) -> str | None:
        """Whose proposal this caller's reads show on top: its session, else its actor."""
        return self.session or self.actor

    @property
    def who(self) -> str:
        return f"token {self.token_id}" if self.token_id else f"actor {self.actor or 'local'}"

    # ------------------------------------------------------------------ checks (ForbiddenError)
    def require(self, right: str, what: str) -> None:
        if not self.has(right):
            raise AccessError(f"{self.who} may not {what}: it needs the {right!r} right")

    def check_read(self, store: str, scope: str | None = None) -> None:
        if not self.scope_ok(scope):
            raise AccessError(f"{self.who} may only use scope {self.scope!r}, not {scope!r}")
        if self.access(store) is None:
            raise AccessError(f"{self.who} may not read store {store!r}")

    def check_write(self, store: str, scope: str | None = None) -> None:
        self.check_read(store, scope)
        if self.access(store) != "rw" or not self.has("write"):
            raise AccessError(f"{self.who} is read-only on store {store!r}")

    def claim_session(self, session: str | None) -> str | None:
        """The session a write by this caller carries: its own when bound (naming another is
        refused), else the one it names."""
        if self.session_bound:
            if session is not None and session != self.session:
                raise AccessError(
                    f"{self.who} writes as session {self.session!r}; it may not claim {session!r}"
                )
            return self.session
        return session if session is not None else self.session

    def claim_actor(self, actor: str | None) -> str | None:
        if self.local or self.actor is None:
            return actor if actor is not None else self.actor
        if actor is not None and actor != self.actor:
            raise AccessError(f"{self.who} writes as {self.actor!r}; it may not claim {actor!r}")
        return self.actor
