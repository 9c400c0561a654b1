"""``gitmem clone STORE DEST``: a git clone of a store for offline inspection.

The clone is an ordinary git working copy (scope ``main`` checked out when it exists) that also
fetches ``refs/gitmem/*`` (the audit ledger) and holds a read-only copy of the store's settings in
``.git/gitmem/gitmem.yaml``. Read-only gitmem commands work on it; writes are refused (commit with
git and push instead, through the store's pre-receive hook). The deny-list, index and secrets of the
store are never copied; its index seeds the clone's only after checks against the clone's own
git (:mod:`gitmem.push.clone_index`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from gitmem import config
from gitmem.audit.journal import open_recovered as open_store
from gitmem.engine.core import GITMEM_DIR, StoreCore
from gitmem.errors import ConflictError, GitmemError, IntegrityError, InvalidInputError
from gitmem.git import reflocks
from gitmem.git.configwrite import config_write
from gitmem.git.fence import fenced

GITMEM_REFSPEC = "refs/gitmem/*:refs/gitmem/*"  # no '+': a rewritten ledger is refused, not followed
URL_SCHEMES = ("http://", "https://")


@dataclass(frozen=True)
class CloneResult:
    source: str
    path: Path
    scopes: list[str]
    gitmem_refs: list[str]
    #: the clone's index was seeded from the source's (checked; gitmem.push.clone_index)
    seeded_index: bool = False


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
        config_write(repo.path, lambda: repo.remotes.add_fetch("origin", GITMEM_REFSPEC))
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
    seeded = _seed_index(source, home, target)
    _anchor_ledger(target)
    return CloneResult(url, target, scopes, gitmem_refs, seeded)


def _seed_index(source: str | os.PathLike[str], home: str | os.PathLike[str] | None, target: Path) -> bool:
    """Start the clone's index from the source's, checked against the clone's git
    (:mod:`gitmem.push.clone_index`); when a check fails, the first command derives it from git."""
    from gitmem.push import clone_index

    with open_store(source, home) as store:
        candidate = clone_index.snapshot(store, target / ".git")
    if candidate is None:
        return False
    with open_store(str(target)) as copy:
        return clone_index.seed(copy, candidate)


def _anchor_ledger(target: Path) -> None:
    """Remember the ledger entry the clone starts from, so ``verify`` on the clone later detects a
    ledger rewritten since (a broken ledger is left for ``verify`` to report)."""
    from gitmem.audit import transparency
    from gitmem.engine import ledger
    from gitmem.errors import IntegrityError

    with open_store(str(target)) as store, contextlib.suppress(IntegrityError):
        ledger.remember_seen(store)
        transparency.remember(store)


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
    #: with ``purge``: how many objects of the old history were removed from the clone (proved gone)
    purged: int = 0
    #: local branches reset onto the rewritten history by ``purge``
    resynced: list[str] = field(default_factory=list)


_ORIGIN = "refs/remotes/origin/"
_INCOMING = "refs/gitmem-incoming/"
_PROPOSALS = "refs/gitmem/proposals/"
PENDING_FILE = "rewritten.json"  # $GIT_DIR/gitmem/: rewrites a plain fetch saw, for a later --purge


def fetch(clone_path: str | os.PathLike[str], *, purge: bool = False) -> FetchResult:
    """Bring a clone up to date with its store, and say which scopes' history was rewritten.

    A redaction or compaction rewrites a scope's commits: the clone's remote-tracking branch is
    replaced (the old history holds content the store has purged), and any local branch built on
    the old history must be reset or rebased before its commits can be pushed (the hook refuses
    redacted content and retired commits). With ``purge``, local branches that are exactly at the
    old history are reset onto the new one (a checked-out one with ``git reset --hard``, refused
    when the work tree has changes), and the old history's objects are removed from the clone
    (reflogs expired, ``git gc --prune=now``), then proved gone. The audit ledger is never
    replaced: a ledger that is not an extension of the clone's is reported (IntegrityError, exit 7)
    and the clone keeps its own.

    Raises:
        InvalidInputError: ``clone_path`` is not a clone of a store.
        ConflictError: ``purge`` while a local branch has commits on the old history, or the
            work tree has uncommitted changes (nothing is purged then).
        IntegrityError: the store's ledger was rewritten (the scopes were still fetched).
    """
    with open_store(os.fspath(clone_path)) as store:
        if not store.is_clone:
            raise InvalidInputError(f"{store.path} is a store, not a clone; fetch works on clones")
        repo = store.repo
        before = {
            n: repo.references[n].target
            for n in repo.references
            if n.startswith(_ORIGIN) and isinstance(repo.references[n].target, pygit2.Oid)
        }
        own: dict[str, pygit2.Oid] = {}
        for n in repo.references:
            t = repo.references[n].target
            if n.startswith("refs/gitmem/") and isinstance(t, pygit2.Oid):
                own[n] = t
        refspecs = [f"+refs/heads/*:{_ORIGIN}*", f"+refs/gitmem/*:{_INCOMING}*"]

        def run() -> None:
            if (store.clone_of or "").startswith(URL_SCHEMES):
                from gitmem.push.remote import fetch_url

                fetch_url(Path(repo.workdir or repo.path), refspecs)
            else:
                repo.remotes["origin"].fetch(refspecs=refspecs, prune=pygit2.enums.FetchPrune.PRUNE)

        try:  # the fetch moves refs itself: past the stale locks a killed process left
            reflocks.past_stale_locks(repo.path, run)
        except (KeyError, pygit2.GitError, OSError) as exc:
            raise GitmemError(f"cannot fetch into {store.path}: {exc}") from None
        ledger_problem = _take_ledger(store, own)
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
        purged, resynced = 0, list[str]()
        if rewritten:  # first: a purge refused below must still find this history next time
            _remember_pending(store, rewritten)
        if purge and ledger_problem is None:
            purged, resynced = _purge_clone(
                store, _with_pending(store, rewritten), [str(t) for t in before.values()]
            )
    if ledger_problem is not None:
        raise IntegrityError(ledger_problem)
    return FetchResult(Path(os.fspath(clone_path)), updated, rewritten, purged, resynced)


def _take_ledger(store: StoreCore, own: dict[str, pygit2.Oid]) -> str | None:
    """Move the fetched ``refs/gitmem/*`` into place only when each extends the clone's own
    (``own``: their values before the fetch); otherwise keep the clone's and return the problem.
    The incoming refs are removed either way. (libgit2 also updates refs by the remote's
    configured refspecs during a fetch: a ref it moved off ``own`` is put back first.)"""
    repo = store.repo
    problem = None
    for name, target in own.items():  # every move by compare-and-swap, past stale locks (reflocks)
        reflocks.set_ref(store, name, target, "gitmem fetch: the clone keeps its own ledger")

    arrived = set()
    for name in sorted(n for n in repo.references if n.startswith(_INCOMING)):
        incoming = repo.references[name].target
        local_name = "refs/gitmem/" + name[len(_INCOMING) :]
        arrived.add(local_name)
        local = repo.references.get(local_name)
        _delete(store, name)
        if not isinstance(incoming, pygit2.Oid):
            continue
        target = incoming
        if local_name.startswith(_PROPOSALS):
            # A proposal's chain is no audit record: a redaction rewrites it, a decision or an
            # erasure removes it; the clone follows the store (the old chain is purged with the rest).
            reflocks.set_ref(store, local_name, target, "gitmem fetch: the proposal moved")
            continue
        if local is None:
            reflocks.set_ref(store, local_name, target, "gitmem fetch: the ledger arrived")
        elif local.target == target:
            continue
        elif isinstance(local.target, pygit2.Oid) and store.is_ancestor(local.target, target):
            reflocks.set_ref(store, local_name, target, "gitmem fetch: the ledger grew")
        else:
            problem = (
                f"the store's audit ledger ({local_name}) was rewritten: it no longer extends the one "
                f"this clone has ({str(local.target)[:12]}); the clone keeps its own. Run gitmem verify "
                "on the store and ask its administrator"
            )
    for name in [n for n in repo.references if n.startswith(_PROPOSALS) and n not in arrived]:
        _delete(store, name)  # the store no longer has (or no longer serves) it
    return problem


def _delete(store: StoreCore, name: str) -> None:
    """Delete a ref past a stale lock on it or on packed-refs, the cluster's fence checked."""
    with fenced(store.path):
        reflocks.delete_ref(store.repo, name)


def _pending_path(store: StoreCore) -> Path:
    return store.gitmem_dir / PENDING_FILE


def _load_pending(store: StoreCore) -> dict[str, list[str]]:
    try:
        data = json.loads(_pending_path(store).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): [str(t) for t in v if isinstance(t, str)] for k, v in data.items() if isinstance(v, list)}


def _remember_pending(store: StoreCore, rewritten: list[RewrittenScope]) -> None:
    """A plain fetch saw rewritten scopes: keep their old tips, so that a later ``fetch --purge``
    still knows which history to remove (the remote-tracking refs no longer name it)."""
    pending = _load_pending(store)
    for w in rewritten:
        olds = pending.setdefault(w.scope, [])
        if w.old not in olds:
            olds.append(w.old)
    path = _pending_path(store)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{PENDING_FILE}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(pending, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def _with_pending(store: StoreCore, rewritten: list[RewrittenScope]) -> list[RewrittenScope]:
    """This fetch's rewritten scopes plus the ones earlier plain fetches saw."""
    repo = store.repo
    out = list(rewritten)
    seen = {(w.scope, w.old) for w in rewritten}
    for scope, olds in sorted(_load_pending(store).items()):
        ref = repo.references.get(_ORIGIN + scope)
        new = str(ref.target) if ref is not None and isinstance(ref.target, pygit2.Oid) else ""
        for old in olds:
            if (scope, old) in seen or not store.has_object(old):
                continue
            stale = [
                b
                for b in repo.branches.local
                if store.is_ancestor(pygit2.Oid(hex=old), repo.branches.local[b].target)  # type: ignore[arg-type]
            ]
            out.append(RewrittenScope(scope, old, new, stale))
    return out


def _kept_tips(store: StoreCore) -> list[str]:
    """What the store serves now: the remote-tracking branches and ``refs/gitmem/*``."""
    repo = store.repo
    keep = []
    for n in repo.references:
        if (n.startswith(_ORIGIN) or n.startswith("refs/gitmem/")) and n != _ORIGIN + "HEAD":
            target = repo.references[n].resolve().target
            if isinstance(target, pygit2.Oid):
                keep.append(str(target))
    return keep


def _rev_list(store: StoreCore, revs: list[str], *, objects: bool = False, body: bool = False) -> str:
    from gitmem.git.rewrite import _git

    if not any(not r.startswith("^") for r in revs):
        return ""
    args = ["rev-list", "--stdin"]
    if objects:
        args += ["--objects", "--no-object-names"]
    if body:
        args += ["--format=%H%x00%B%x01", "--no-commit-header"]
    res = _git(store, *args, stdin="\n".join(revs) + "\n")
    if res.returncode != 0:
        raise IntegrityError(f"git rev-list failed in {store.path}, nothing is proved: {res.stderr.strip()}")
    return res.stdout


def _holders(store: StoreCore, old_commits: set[str], resets: dict[str, str]) -> list[str]:
    """Refs other than the store's (and the branches about to be reset) that keep retired
    history alive: a commit of the old history, or a commit gitmem wrote (a ``Gitmem-Version``
    trailer) that the store no longer serves, is reachable from them."""
    repo = store.repo
    keep = [f"^{t}" for t in _kept_tips(store)]
    out = []
    names = sorted(repo.references) + (["HEAD"] if repo.head_is_detached else [])
    for name in names:
        if name.startswith(_ORIGIN) or name.startswith("refs/gitmem/") or name in resets:
            continue
        target = repo.head.target if name == "HEAD" else repo.references[name].resolve().target
        if not isinstance(target, pygit2.Oid):
            continue
        listing = _rev_list(store, [str(target), *keep], body=True)
        for record in listing.split("\x01"):
            cid, _, message = record.strip("\n").partition("\x00")
            if cid in old_commits or "\nGitmem-Version: " in f"\n{message}":
                out.append(name)
                break
    return out


def _purge_clone(
    store: StoreCore, rewritten: list[RewrittenScope], old_tips: list[str]
) -> tuple[int, list[str]]:
    """Reset local branches onto the rewritten history, remove the old history's objects, and
    prove them gone (:func:`gitmem.audit.purge_proof.prove_purged`): an IntegrityError naming
    the reason when the proof does not hold."""
    from gitmem.audit.purge_proof import prove_purged
    from gitmem.git.rewrite import _git

    repo = store.repo
    workdir = repo.workdir
    resets: dict[str, str] = {}
    for w in rewritten:
        for branch in w.local_branches:
            target = repo.branches.local[branch].target
            if str(target) != w.old or not w.new:
                raise ConflictError(
                    f"local branch {branch} has commits on the old history of scope {w.scope!r}; "
                    f"rebase them first (git rebase --onto origin/{w.scope} {w.old[:12]} {branch}), "
                    "then run gitmem fetch --purge again (nothing was purged)"
                )
            resets["refs/heads/" + branch] = w.new
    head = None if repo.head_is_detached or repo.head_is_unborn else repo.head.shorthand
    if workdir and any(b == "refs/heads/" + str(head) for b in resets):
        dirty = {p: f for p, f in repo.status().items() if f not in (pygit2.enums.FileStatus.IGNORED,)}
        if dirty:
            raise ConflictError(
                f"the work tree of {workdir} has uncommitted changes ({sorted(dirty)[0]}); "
                "commit or discard them, then run gitmem fetch --purge again (nothing was purged)"
            )
    olds = [w.old for w in rewritten if store.has_object(w.old)]
    keep = [f"^{t}" for t in _kept_tips(store)]
    old_commits = set(_rev_list(store, [*olds, *keep]).split())
    holders = _holders(store, old_commits, resets)
    if holders:
        raise ConflictError(
            f"{', '.join(holders)} still reach history the store has rewritten (redacted or retired "
            "content); rebase or delete them, then run gitmem fetch --purge again (nothing was purged)"
        )
    del old_tips  # the tips before this fetch: the rewritten ones are among ``olds``
    gone = _old_objects(store, olds)
    for ref, new in resets.items():
        branch = ref[len("refs/heads/") :]
        if branch == head and workdir:
            reflocks.break_if_stale(repo.path, ref)  # libgit2 moves it
            repo.reset(pygit2.Oid(hex=new), pygit2.enums.ResetMode.HARD)
        else:
            reflocks.set_ref(store, ref, pygit2.Oid(hex=new), "gitmem fetch --purge: resynced")
    for extra in ("ORIG_HEAD", "FETCH_HEAD"):
        (Path(repo.path) / extra).unlink(missing_ok=True)
    _git(store, "reflog", "expire", "--expire=now", "--expire-unreachable=now", "--all")
    reflocks.break_stale_locks(repo.path)  # git gc packs the refs: every lock it meets fails it
    res = _git(store, "gc", "--prune=now", "--quiet")
    if res.returncode != 0:
        raise GitmemError(f"git gc failed in {store.path}: {res.stderr.strip()}")
    proof = prove_purged(store.path, object_ids=gone)
    kept = _holders(store, set(), {})  # gc kept only what refs reach: none may be retired history
    if kept:
        raise IntegrityError(
            f"the purge of {store.path} failed: {', '.join(kept)} still reach commits the store no "
            "longer serves; nothing is proved clean"
        )
    if not proof.ok:
        raise IntegrityError(
            f"the purge of {store.path} failed: {proof.reason()}; nothing is proved clean (delete the ref "
            "that keeps them, then run gitmem fetch --purge again)"
        )
    with contextlib.suppress(OSError):
        _pending_path(store).unlink(missing_ok=True)
    return len(gone), sorted(r[len("refs/heads/") :] for r in resets)


def _old_objects(store: StoreCore, old_tips: list[str]) -> set[str]:
    """Objects the old tips reach that nothing kept (remote-tracking refs, ``refs/gitmem/*``)
    reaches: what the purge must remove. Two full walks (a clone is small next to its store, and
    ``--not`` does not exclude blobs that only older kept commits hold)."""
    from gitmem.git.rewrite import _git

    repo = store.repo
    keep = []
    for n in repo.references:
        if (n.startswith(_ORIGIN) or n.startswith("refs/gitmem/")) and n != _ORIGIN + "HEAD":
            target = repo.references[n].target
            if isinstance(target, pygit2.Oid):
                keep.append(str(target))
    tips = [t for t in old_tips if len(t) == 40 and store.has_object(t)]

    def walk(revs: list[str]) -> set[str]:
        if not revs:
            return set()
        res = _git(
            store, "rev-list", "--objects", "--no-object-names", "--stdin", stdin="\n".join(revs) + "\n"
        )
        return set(res.stdout.split())

    return walk(tips) - walk(keep)
