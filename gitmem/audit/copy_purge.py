"""Purge a copy of a store of what its deny-list names, and prove it (docs/cluster.md#redactions-on-replicas).

A replica that received a redaction's forced refs still holds the retired objects. Once its refs
no longer reach them, :func:`purge_and_prove` makes them unreadable (:func:`gitmem.git.purge.purge`)
and proves it with the one purge check (:func:`gitmem.audit.purge_proof.prove_purged`).
"""

from __future__ import annotations

from pathlib import Path

from gitmem.audit.purge_proof import prove_purged
from gitmem.engine.denylist import excused, read_denylist, read_scoped, readmitted
from gitmem.errors import IntegrityError
from gitmem.git.purge import existing_objects, purge
from gitmem.git.repo import Repo, open_repository


def purge_and_prove(git_dir: Path) -> str:
    """Purge the copy at ``git_dir`` of every deny-listed object it holds; "" once proved, else
    the reason it is not."""
    denied = read_denylist(git_dir)
    if not denied:
        return ""
    try:
        repo = Repo(open_repository(git_dir), git_dir)
        present = denied & existing_objects(repo)
        # a redacted blob written again in a scope its redaction did not rewrite stays (that
        # scope's content is never purged)
        scoped = read_scoped(git_dir)
        kept = readmitted(git_dir, scoped, present)
        if present - kept:
            purge(repo, sorted(present - kept))
        # but one a scope it was redacted from reaches again is no excused copy: the proof fails
        proof = prove_purged(git_dir, object_ids=denied - excused(git_dir, scoped, kept))
    except IntegrityError as exc:
        return exc.message
    return "" if proof.ok else proof.reason()
