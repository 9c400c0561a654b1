"""What a push would put into the audit ledger, screened by pre-receive before anything lands
(docs/guard.md#text-in-the-audit-ledger).

post-receive's ``push`` entry records the pusher, the push's session, the names of its push
options, every ref it updates and the author e-mail of every commit it brings to a scope; its
``flag`` entry the scope. The ledger is hash-chained and cloned and nothing in it can be redacted,
so a push is refused when the store's guard finds anything in one of them, flag mode included,
with the same screen the library's operations use (:mod:`gitmem.engine.ledger_text`). Every
commit the push brings to a scope (a new one or one the store has on another scope) is screened
by its author's and its committer's name and e-mail. All of these are names
(:func:`~gitmem.engine.ledger_text.name_policy`: an e-mail address in one is who, not PII). A
refusal names the ref, the commit, the field and the finding (rule and masked preview), never the
text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gitmem.push.refupdates import HEADS, PushContext, RefUpdate
from gitmem.push.refupdates import violation as _v

if TYPE_CHECKING:
    import pygit2

    from gitmem.config import StoreSettings
    from gitmem.model.policy import Violation


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def check_ledger_text(
    repo: pygit2.Repository,
    updates: Sequence[RefUpdate],
    ctx: PushContext,
    options: Sequence[str],
    arrived: Sequence[tuple[str, str]],
) -> list[Violation]:
    """The violations of the strings this push would put into the ledger (``arrived``: the
    ``(commit, scope)`` pairs of :func:`gitmem.push.pushcheck.arrivals`). Each distinct text is
    screened once, reported where it is first seen."""
    import pygit2

    from gitmem.engine import ledger_text
    from gitmem.engine.guard_policy import policy_of

    policy = policy_of(ctx.settings.guard)
    if not ledger_text.acts(policy):
        return []
    first = updates[0].ref if updates else ""
    texts: dict[tuple[str, str], tuple[str, str | None]] = {}  # (field, text) -> where first seen

    def add(field: str, text: str | None, ref: str, commit: str | None = None) -> None:
        if text:
            texts.setdefault((field, text), (ref, commit))

    add("the pusher", ctx.pusher, first)
    add("the push option session", ctx.session, first)
    for name in sorted({o.split("=", 1)[0] for o in options}):  # the push entry keeps the names
        add("a push option's name", name, first)
    for u in updates:
        add("the ref name", u.ref, u.ref)
    done: set[str] = set()
    for cid, scope in arrived:
        if cid in done:
            continue
        done.add(cid)
        obj = repo.get(cid)
        if not isinstance(obj, pygit2.Commit):
            continue
        for role, sig in (("author", obj.author), ("committer", obj.committer)):
            add(f"the {role}'s name", _text(sig.raw_name), HEADS + scope, cid)
            add(f"the {role}'s e-mail", _text(sig.raw_email), HEADS + scope, cid)
    names = ledger_text.name_policy(policy)
    out: list[Violation] = []
    for (field, text), (ref, at) in texts.items():
        refused = ledger_text.refusal(field, text, names)
        if refused is not None:
            out.append(_v("guard", refused.message, ref, at))
    return out


def withheld(settings: StoreSettings, actor: str | None, refs: Sequence[str]) -> tuple[str | None, list[str]]:
    """The pusher and the refs as the log of rejected pushes keeps them: what the guard finds
    anything in replaced by a ``[withheld by the guard: ...]`` marker (a push refused for a secret
    in its pusher or a ref name must not leave that secret behind)."""
    from gitmem.engine import ledger_text
    from gitmem.engine.guard_policy import policy_of

    names = ledger_text.name_policy(policy_of(settings.guard))
    shown = ledger_text.withhold(names, actor) if actor else actor
    return shown, [str(ledger_text.withhold(names, r)) for r in refs]
