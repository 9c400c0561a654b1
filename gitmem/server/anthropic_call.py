"""One authenticated request to the Anthropic memory stores API, as its handlers see it: below the
API (gitmem.server.anthropic_api), its version endpoints and its inline reads, which all take one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gitmem.model.caller import Caller
from gitmem.server import door
from gitmem.server.tokens import Token


@dataclass(frozen=True)
class Call:
    """One authenticated request, as the handlers see it."""

    token: Token
    params: Mapping[str, str]
    query: Mapping[str, str]
    raw: bytes
    request_id: str

    @property
    def caller(self) -> Caller:
        """Who asks, for the library (gitmem.model.caller): the engine decides with it."""
        return door.caller_for(self.token)

    @property
    def owner(self) -> str | None:
        """Whose open proposal this caller's reads show on top (a review token's own)."""
        return self.caller.owner if self.token.review else None

    def scope(self) -> str:
        scope = self.query.get("scope") or self.token.default_scope()
        return door.token_scope(self.token, scope)
