"""A store's history copied into another, new store: every scope's commits, byte for byte.

What a dream with ``output_behavior: create_new`` starts from (docs/dreams.md): a new store whose
scopes are the source's branches at the moment of the copy, with the same commits (so the same
version and memory ids and the same history), fetched in-process by libgit2 from the source's
object database. The source is only read. The copy's own ledger records where it came from
(``store_copied``: the source's id and name, and each scope's tip), and its index is derived from
the copied commits on first use, as after a push.
"""

from __future__ import annotations

from gitmem.engine import ledger
from gitmem.engine.core import StoreCore
from gitmem.errors import ConflictError


def copy_history(source: StoreCore, target: StoreCore, *, actor: str | None = None) -> dict[str, str]:
    """Bring every scope of ``source`` into the empty store ``target``; returns scope -> tip.

    ``target`` must have no scope yet (a new store): a copy never overwrites history."""
    if target.scopes():
        raise ConflictError(f"store {target.name!r} already has scopes: a copy goes into a new store only")
    remote = target.repo.remotes.create_anonymous(str(source.path))
    remote.fetch(["+refs/heads/*:refs/gitmem/copying/*"])
    tips: dict[str, str] = {}
    for name in list(target.repo.references):
        if not name.startswith("refs/gitmem/copying/"):
            continue
        ref = target.repo.references[name]
        scope, tip = name[len("refs/gitmem/copying/") :], ref.target
        target.repo.references.create(f"refs/heads/{scope}", tip, force=False)
        ref.delete()
        tips[scope] = str(tip)
    ledger.append(
        target,
        "store_copied",
        {"source_id": source.settings.id, "source_name": source.name, "tips": tips},
        actor=actor,
    )
    return tips
