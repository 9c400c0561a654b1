"""``gitmem clone STORE DEST``: a git clone of a store for offline inspection.

The clone is an ordinary git working copy (scope ``main`` checked out when it exists) that also
fetches ``refs/gitmem/*`` (the audit ledger) and holds a read-only copy of the store's settings in
``.git/gitmem/gitmem.yaml``. Read-only gitmem commands work on it; writes are refused (commit with
git and push instead, through the store's pre-receive hook). The deny-list, index and secrets of the
store are never copied.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pygit2

from gitmem import config
from gitmem.audit.journal import open_recovered as open_store
from gitmem.engine.core import GITMEM_DIR
from gitmem.errors import ConflictError, GitmemError, InvalidInputError

GITMEM_REFSPEC = "refs/gitmem/*:refs/gitmem/*"  # no '+': a rewritten ledger is refused, not followed
URL_SCHEMES = ("http://", "https://")


@dataclass(frozen=True)
class CloneResult:
    source: str
    path: Path
    scopes: list[str]
    gitmem_refs: list[str]


def clone(
    source: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    home: str | os.PathLike[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> CloneResult:
    """Clone a store (a name in the workspace, or a path) to ``dest`` for offline inspection.

    Raises:
        NotFoundError: no such store.
        ConflictError: ``dest`` exists and is not an empty directory.

    ``source`` may also be an ``http(s)://.../git/<store>.git`` URL of ``gitmem serve`` (or of any
    git server); git itself transfers then, so its credential helpers, ``http.extraHeader`` and
    proxies apply (docs/git-servers.md).
    """
    if os.fspath(source).startswith(URL_SCHEMES):
        from gitmem.push.remote import clone_url, redact_url

        target = Path(dest).expanduser().resolve()
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            raise ConflictError(f"{target} already exists and is not an empty directory")
        scopes, gitmem_refs = clone_url(os.fspath(source), target, GITMEM_REFSPEC)
        _anchor_ledger(target)
        return CloneResult(redact_url(os.fspath(source)), target, scopes, gitmem_refs)
    with open_store(source, home) as store:
        if store.is_clone:
            raise InvalidInputError(f"{store.path} is itself a clone; clone the store it came from")
        url = str(store.path)
        settings_file = store.settings_path
    target = Path(dest).expanduser().resolve()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConflictError(f"{target} already exists and is not an empty directory")
    callbacks = _Progress(progress) if progress is not None else None
    try:
        repo = pygit2.clone_repository(url, str(target), callbacks=callbacks)
    except pygit2.GitError as exc:
        raise GitmemError(f"cannot clone {url} to {target}: {exc}") from None
    try:
        repo.remotes.add_fetch("origin", GITMEM_REFSPEC)
        repo.remotes["origin"].fetch(refspecs=[GITMEM_REFSPEC], callbacks=callbacks)
        gitdir = Path(repo.path)
        (gitdir / GITMEM_DIR).mkdir(exist_ok=True)
        copy = gitdir / GITMEM_DIR / config.SETTINGS_FILE
        shutil.copyfile(settings_file, copy)
        copy.chmod(0o444)
        scopes = sorted(
            n[len("refs/remotes/origin/") :]
            for n in repo.references
            if n.startswith("refs/remotes/origin/") and n != "refs/remotes/origin/HEAD"
        )
        gitmem_refs = sorted(n for n in repo.references if n.startswith("refs/gitmem/"))
    except (pygit2.GitError, OSError) as exc:
        shutil.rmtree(target, ignore_errors=True)
        raise GitmemError(f"cannot finish the clone at {target}: {exc}") from None
    finally:
        repo.free()
    _anchor_ledger(target)
    return CloneResult(url, target, scopes, gitmem_refs)


def _anchor_ledger(target: Path) -> None:
    """Remember the ledger entry the clone starts from, so ``verify`` on the clone later detects a
    ledger rewritten since (a broken ledger is left for ``verify`` to report)."""
    from gitmem.engine import ledger
    from gitmem.errors import IntegrityError

    with open_store(str(target)) as store, contextlib.suppress(IntegrityError):
        ledger.remember_seen(store)


class _Progress(pygit2.RemoteCallbacks):
    def __init__(self, report: Callable[[int, int], None]) -> None:
        super().__init__()
        self._report = report

    def transfer_progress(self, stats: pygit2.remotes.TransferProgress) -> None:
        self._report(stats.received_objects, stats.total_objects)


@dataclass(frozen=True)
class RewrittenScope:
    """A scope whose history the store rewrote (redaction or compaction) since the last fetch."""

    scope: str
    old: str
    new: str
    local_branches: list[str]  # local branches still built on the old history


@dataclass(frozen=True)
class FetchResult:
    path: Path
    updated: list[str]
    rewritten: list[RewrittenScope]


_ORIGIN = "refs/remotes/origin/"


def fetch(clone_path: str | os.PathLike[str]) -> FetchResult:
    """Bring a clone up to date with its store, and say which scopes' history was rewritten.

    A redaction or compaction rewrites a scope's commits: the clone's remote-tracking branch is
    replaced (the old history holds content the store has purged), and any local branch built on
    the old history must be reset or rebased before its commits can be pushed (the hook refuses
    redacted content and retired commits).

    Raises:
        InvalidInputError: ``clone_path`` is not a clone of a store.
    """
    with open_store(os.fspath(clone_path)) as store:
        if not store.is_clone:
            raise InvalidInputError(f"{store.path} is a store, not a clone; fetch works on clones")
        repo = store.repo
        before = {n: repo.references[n].target for n in repo.references if n.startswith(_ORIGIN)}
        try:
            refspecs = [f"+refs/heads/*:{_ORIGIN}*", GITMEM_REFSPEC]
            if (store.clone_of or "").startswith(URL_SCHEMES):
                from gitmem.push.remote import fetch_url

                fetch_url(Path(repo.workdir or repo.path), refspecs)
            else:
                repo.remotes["origin"].fetch(refspecs=refspecs, prune=pygit2.enums.FetchPrune.PRUNE)
        except (KeyError, pygit2.GitError) as exc:
            raise GitmemError(f"cannot fetch into {store.path}: {exc}") from None
        updated, rewritten = [], []
        for name in sorted(repo.references):
            if not name.startswith(_ORIGIN) or name == _ORIGIN + "HEAD":
                continue
            new = repo.references[name].target
            old = before.get(name)
            if old == new:
                continue
            scope = name[len(_ORIGIN) :]
            updated.append(scope)
            if old is not None and not store.is_ancestor(old, new):  # type: ignore[arg-type]
                stale = [
                    b
                    for b in repo.branches.local
                    if store.is_ancestor(old, repo.branches.local[b].target)  # type: ignore[arg-type]
                ]
                rewritten.append(RewrittenScope(scope, str(old), str(new), stale))
    return FetchResult(Path(os.fspath(clone_path)), updated, rewritten)
