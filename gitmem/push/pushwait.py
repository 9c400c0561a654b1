"""A push judged after it waited for a history rewrite (docs/redaction.md#pushes-during-a-redaction).

While a redaction or compaction runs, the pre-receive hook waits for the store lock; when it gets
it, the push's ref may have moved and the history its commits are built on may be purged. Such
updates are refused by a rule here, before any push check reads a purged object.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import pygit2

from gitmem.push.refupdates import ZERO, RefUpdate


def moved_while_waiting(repo: pygit2.Repository, updates: Sequence[RefUpdate]) -> list[str]:
    """The refusals for updates whose ref is no longer at the push's old value, or whose new
    commit no longer has its history: a redaction or compaction rewrote (and purged) it while the
    push waited for the store lock. Refused by this rule, before any check reads a purged object."""
    out = []
    for u in updates:
        if not u.ref.startswith("refs/heads/"):
            continue  # other refs are refused by the ref rules
        ref = repo.references.get(u.ref)
        current = str(ref.target) if ref is not None and isinstance(ref.target, pygit2.Oid) else ZERO
        if current not in (u.old, u.new):
            if u.is_create or current == ZERO or _descends(repo, current, u.old):
                why = "another write moved it on"
            else:
                why = "its history was rewritten (a redaction or compaction)"
            out.append(
                f"gitmem: {u.ref}: {why} while this push waited; fetch it (gitmem fetch --purge on a "
                "clone), rebase your commits onto it and push again"
            )
        elif not u.is_delete and not _reaches_only_present(repo, u.new):
            out.append(
                f"gitmem: {u.ref}: this push is built on history the store has rewritten (a redaction or "
                "compaction purged it); fetch, rebase your commits onto the new history and push again"
            )
    return out


def _descends(repo: pygit2.Repository, tip: str, old: str) -> bool:
    try:
        return bool(repo.descendant_of(pygit2.Oid(hex=tip), pygit2.Oid(hex=old)))
    except (KeyError, ValueError, pygit2.GitError):
        return False


def _reaches_only_present(repo: pygit2.Repository, new: str) -> bool:
    """Whether the commit ``new`` and its first commits' parents are all readable (a parent
    purged by a rewrite is not). Only the commits the push brings are walked (they stop at
    history the store's branches hold)."""
    kept = [
        r.target for r in (repo.references[n] for n in repo.references) if isinstance(r.target, pygit2.Oid)
    ]
    try:
        walker = repo.walk(pygit2.Oid(hex=new), pygit2.enums.SortMode.NONE)
        for oid in kept:
            with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
                walker.hide(oid)
        for _commit in walker:
            pass
    except (KeyError, ValueError, pygit2.GitError):
        return False
    return True
