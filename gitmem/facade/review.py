"""Review verbs of :class:`gitmem.Store`: proposals, their summaries, versions and diffs, and the
reviewer's decisions (accept, reject, erase); docs/review.md.

A ``caller`` confines what is seen (``gitmem.engine.access.may_see_proposal``, the one rule of every
face): a proposal is read only by its proposer and by reviewers, in a scope the caller may read;
any other is left out of listings and is "not found" when asked for by id (the same answer as a
missing one: no existence oracle). The decisions check the caller's rights in the engine
(``admit_decision``: a caller that may not decide is refused, 403).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gitmem.errors import NotFoundError
from gitmem.model.caller import Caller

if TYPE_CHECKING:
    from gitmem.audit.review import Accepted, Erased, PathDiff
    from gitmem.audit.review import Summary as ProposalSummary
    from gitmem.engine.core import StoreCore
    from gitmem.engine.proposals import Proposal
    from gitmem.model.versions import Version


class Review:
    """Review verbs (mixed into :class:`gitmem.Store`)."""

    _core: StoreCore

    def proposals(
        self, *, status: str | None = None, scope: str | None = None, caller: Caller | None = None
    ) -> builtins.list[Proposal]:
        """Proposals, oldest first, by ``status`` (open, accepted, rejected) and ``scope``; with a
        ``caller``, only those it may read (its own, or every one for a reviewer)."""
        from gitmem.engine import access, proposals

        found = proposals.proposals(self._core, status=status, scope=scope)
        return [p for p in found if access.may_see_proposal(self._core, caller, p)]

    def proposal(self, proposal_id: str, *, caller: Caller | None = None) -> Proposal:
        """One proposal by id (NotFoundError: none, or one ``caller`` may not read)."""
        from gitmem.engine import access, proposals

        return access.admit_proposal(self._core, caller, proposals.get(self._core, proposal_id))

    def proposal_summary(self, proposal: Proposal | str, *, caller: Caller | None = None) -> ProposalSummary:
        """What a reviewer sees of a proposal: status, versions, pending paths and conflicts."""
        from gitmem.audit import review

        return review.summary(self._core, self._proposal(proposal, caller))

    def proposal_versions(self, proposal_id: str, *, caller: Caller | None = None) -> builtins.list[Version]:
        """The proposed versions, oldest first."""
        from gitmem.engine import proposals

        return proposals.versions(self._core, self._proposal(proposal_id, caller).id)

    def proposal_paths(self, proposal: Proposal | str, *, caller: Caller | None = None) -> builtins.list[str]:
        """The paths the proposal changes."""
        from gitmem.engine import proposals

        return proposals.touched(self._core, self._proposal(proposal, caller))

    def proposal_has_chain(self, proposal: Proposal | str, *, caller: Caller | None = None) -> bool:
        """Whether the proposal's commits are still in the store (an erased one's are not)."""
        from gitmem.engine import proposals

        return proposals.tip_of(self._core, self._proposal(proposal, caller)) is not None

    def proposal_diff(
        self, proposal_id: str, paths: Sequence[str] | None = None, *, caller: Caller | None = None
    ) -> builtins.list[PathDiff]:
        """The proposal against the scope's current content, path by path (a conflict also three-way)."""
        from gitmem.audit import review

        return review.diff(self._core, self._proposal(proposal_id, caller).id, paths)

    def accept(
        self,
        proposal_id: str,
        *,
        reviewer: str,
        paths: Sequence[str] | None = None,
        reason: str = "",
        session: str | None = None,
        caller: Caller | None = None,
    ) -> Accepted:
        """Publish the proposal (or its ``paths``) onto its scope, authors kept, ``reviewer`` named.
        ConflictError (nothing written) when a chosen path changed on the scope since its base."""
        from gitmem.audit import review

        pid = self._decided(proposal_id, caller).id
        return review.accept(
            self._core, pid, reviewer=reviewer, paths=paths, reason=reason, session=session, caller=caller
        )

    def reject(
        self,
        proposal_id: str,
        *,
        reviewer: str,
        reason: str = "",
        paths: Sequence[str] | None = None,
        session: str | None = None,
        caller: Caller | None = None,
    ) -> Proposal:
        """Record that the proposal (or its ``paths``) is not published (kept for retention.min_days)."""
        from gitmem.audit import review

        pid = self._decided(proposal_id, caller).id
        return review.reject(
            self._core, pid, reviewer=reviewer, reason=reason, paths=paths, session=session, caller=caller
        )

    def erase_proposal(
        self,
        proposal_id: str,
        *,
        reviewer: str,
        reason: str,
        session: str | None = None,
        caller: Caller | None = None,
    ) -> Erased:
        """Reject the proposal and erase its chain now: what only it holds is purged and proved gone."""
        from gitmem.audit import review

        pid = self._decided(proposal_id, caller).id
        return review.erase(self._core, pid, reviewer=reviewer, reason=reason, session=session, caller=caller)

    def _proposal(self, proposal: Proposal | str, caller: Caller | None) -> Proposal:
        if isinstance(proposal, str):
            return self.proposal(proposal, caller=caller)
        from gitmem.engine import access

        return access.admit_proposal(self._core, caller, proposal)

    def _decided(self, proposal_id: str, caller: Caller | None) -> Proposal:
        """The proposal a decision names, in a scope ``caller`` may read (else not found); whether
        it may decide is the engine's ``admit_decision`` (403 for a proposer or a review-mode caller)."""
        from gitmem.engine import proposals

        p = proposals.get(self._core, proposal_id)
        if caller is not None and not caller.may_read(self._core.settings.id, p.scope):
            raise NotFoundError(f"proposal {p.id} does not exist in store {self._core.name!r}")
        return p
