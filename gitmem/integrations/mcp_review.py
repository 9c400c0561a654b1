"""The tools of a reviewing agent on ``gitmem mcp --reviewer`` (docs/review.md): list, show and
diff proposals, accept or reject them. Results are JSON text; decisions are recorded under the
server's actor (else its session)."""

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from gitmem.model.caller import Caller
from gitmem.store import Store


def add_review_tools(
    server: Any,
    readable: Callable[[str], Store],
    rw: Callable[[str], Store],
    call: Callable[..., Any],
    StoreArg: Any,
    WStoreArg: Any,
    who: str,
    annotations: dict[str, Any],
    caller: Caller | None = None,
) -> None:
    """The tools of a reviewing agent (docs/review.md): text results (JSON). ``caller``: who asks,
    passed to every library call (a proposal is read only by its proposer and by reviewers)."""
    import dataclasses
    import json

    def _text(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, indent=1)

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if hasattr(value, "isoformat"):
            return value.isoformat().replace("+00:00", "Z")
        return value

    IdArg = Annotated[str, Field(description="Proposal id (prop_...).")]
    PathsArg = Annotated[
        list[str] | None, Field(description="Only these paths (default: every undecided one).")
    ]

    def list_proposals(store: StoreArg, status: str | None = "open") -> str:
        """Proposals waiting for review (or with another status): who proposed, paths, conflicts."""
        s = readable(store)
        return _text(
            plain(
                call(
                    lambda: [
                        s.proposal_summary(p, caller=caller)
                        for p in s.proposals(status=status, caller=caller)
                    ]
                )
            )
        )

    def show_proposal(store: StoreArg, proposal: IdArg) -> str:
        """The versions a proposal holds, oldest first, and the decisions so far."""
        s = readable(store)
        p = call(lambda: s.proposal(proposal, caller=caller))
        return _text(
            plain(
                {
                    "proposal": call(lambda: s.proposal_summary(p, caller=caller)),
                    "versions": call(lambda: s.proposal_versions(p.id, caller=caller)),
                }
            )
        )

    def diff_proposal(store: StoreArg, proposal: IdArg) -> str:
        """Each changed path against the scope's current content (clean, conflict with a three-way
        diff, or same)."""
        s = readable(store)
        return _text(plain(call(lambda: s.proposal_diff(proposal, caller=caller))))

    def accept_proposal(store: WStoreArg, proposal: IdArg, paths: PathsArg = None, reason: str = "") -> str:
        """Publish a proposal (or some of its paths) onto the scope; refused on a conflict."""
        s = rw(store)
        done = call(lambda: s.accept(proposal, reviewer=who, paths=paths, reason=reason))
        return _text(plain({"status": done.proposal.status, "paths": done.paths, "versions": done.versions}))

    def reject_proposal(store: WStoreArg, proposal: IdArg, reason: str, paths: PathsArg = None) -> str:
        """Reject a proposal (or some of its paths), with the reason."""
        s = rw(store)
        p = call(lambda: s.reject(proposal, reviewer=who, reason=reason, paths=paths))
        return _text({"status": p.status})

    for tool in (list_proposals, show_proposal, diff_proposal):
        server.add_tool(tool, annotations=annotations["read"], structured_output=False)
    server.add_tool(accept_proposal, annotations=annotations["write"], structured_output=False)
    server.add_tool(reject_proposal, annotations=annotations["destructive"], structured_output=False)
