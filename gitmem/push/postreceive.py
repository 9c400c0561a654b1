"""What post-receive does with a push that landed (at once, or later from the spool,
gitmem.push.spool): the derived index caught up, the push log, the ``push`` ledger entry, the
guard's ``flag`` entry for pushed files, maintenance. Each step is on its own: one failing never
hides the others, and none fails the accepted push.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from gitmem import config
from gitmem.push.pushenv import (
    SERVER_SESSION_ENV,
    UNKNOWN,
    identity_source,
    push_id,
    push_options,
    pusher,
    store_of,
)

if TYPE_CHECKING:
    import pygit2

    from gitmem.engine.core import StoreCore
    from gitmem.push.refupdates import RefUpdate

PUSH_LOG = "pushes.jsonl"


def post_receive(repo: pygit2.Repository, text: str, env: Mapping[str, str]) -> list[str]:
    """Bring the derived index up to date and record the push; returns warning lines.

    Each step runs on its own, so one failing (say, a broken settings file) never hides the others.
    """
    from gitmem.push.refupdates import parse_updates

    store = store_of(repo)
    updates = parse_updates(text)
    options = push_options(env)
    warnings: list[str] = []
    try:
        settings = config.load_settings_cached(
            store.path / config.SETTINGS_FILE, store.gitmem_dir / config.SETTINGS_CACHE
        )
        trust = bool(settings.acl.get("trust_push_actor"))
    except Exception:
        settings, trust = None, False
    actor = pusher(env, options, trust) or UNKNOWN
    pid = push_id(text)
    steps: list[tuple[str, Callable[[], object]]] = [
        ("index", lambda: update_index(store, updates)),
        ("push log", lambda: record_push(store, updates, actor, options, env.get(SERVER_SESSION_ENV))),
        ("ledger", lambda: record_push_in_ledger(store, updates, actor, options, pid, env)),
        ("guard flags", lambda: record_push_flags(store, settings, updates, actor)),
        ("packs", lambda: store.maintain()),  # every push adds a pack: keep them geometric
    ]
    for what, step in steps:
        try:
            step()
        except Exception as exc:  # the push has landed: warn, never fail it
            warnings.append(f"gitmem: warning: could not update the {what}: {type(exc).__name__}: {exc}")
    store.index.close()
    return warnings


def update_index(store: StoreCore, updates: Sequence[RefUpdate]) -> None:
    from gitmem.model.paths import validate_scope

    for u in updates:
        if u.scope:
            store.index.ensure(validate_scope(u.scope))


def record_push(
    store: StoreCore,
    updates: Sequence[RefUpdate],
    actor: str | None,
    options: Sequence[str],
    session: str | None = None,
    when: str | None = None,
) -> None:
    """Append one JSON line per ref update to ``$GIT_DIR/gitmem/pushes.jsonl`` (server-side, never
    cloned: it keeps the raw commit ids that the public ledger only holds as keyed digests)."""
    import json

    when = when or config.now_rfc3339()
    store.gitmem_dir.mkdir(exist_ok=True)
    with open(store.gitmem_dir / PUSH_LOG, "a", encoding="utf-8") as fh:
        for u in updates:
            rec = {
                "ref": u.ref,
                "old": u.old,
                "new": u.new,
                "actor": actor,
                "push_options": list(options),
                "time": when,
            }
            if session:
                rec["session"] = session
            fh.write(json.dumps(rec, sort_keys=True) + "\n")


def record_push_in_ledger(
    store: StoreCore,
    updates: Sequence[RefUpdate],
    actor: str,
    options: Sequence[str],
    pid: str = "",
    env: Mapping[str, str] | None = None,
) -> None:
    """A ``push`` entry in the audit ledger: the pusher, where the identity came from, the session,
    the receive time and the versions the push brought (ids and scopes are not secret). Commit ids
    go in as keyed digests: a pushed commit may later be retired by a redaction, and the public
    ledger never holds those (``gitmem audit`` shows each version's current commit)."""
    from gitmem.engine import ledger, receipts
    from gitmem.errors import GitmemError

    refs = [
        {"ref": u.ref, "old": ledger.digest(store, u.old), "new": ledger.digest(store, u.new)}
        for u in updates
    ]
    keys = sorted({o.split("=", 1)[0] for o in options})  # option values may be anything: keep names
    mine = [r for r in receipts.load(store.path).values() if r.push == pid and pid]
    versions: list[dict[str, str]] = []
    authors: set[str] = set()
    db = store.index.db
    for r in mine:
        for vid, scope, op in db.execute(
            "SELECT id, scope, operation FROM versions WHERE commit_id=? AND scope=? ORDER BY seq",
            (r.commit, r.scope),
        ):
            versions.append({"version": vid, "scope": scope, "operation": op})
        with contextlib.suppress(GitmemError):
            authors.add(store.commit(r.commit).author.email)
    commit_count = len({r.commit for r in mine})
    record: dict[str, object] = {
        "updates": refs,
        "actor": actor,
        "identity": identity_source(env or {}),
        "push_options": keys,
        "push": pid,
        "commits": commit_count,
        "versions": versions,
        "authors": sorted(authors),  # self-asserted: information only
    }
    if mine:
        record["received_at"] = mine[0].at
        record["session"] = mine[0].session
        record["trusted_trailers"] = mine[0].trusted
    ledger.record_push(store, record)


def record_push_flags(
    store: StoreCore, settings: config.StoreSettings | None, updates: Sequence[RefUpdate], actor: str | None
) -> None:
    """A ``flag`` ledger entry for pushed files the guard flags (pre-receive refused what it
    rejects). Only the blobs the push added are scanned; commits go in as keyed digests."""
    if settings is None:
        return
    from gitmem.engine.guard import policy_of

    guard = policy_of(settings.guard)
    if guard.secrets != "flag" and guard.pii != "flag" and all(p.action != "flag" for p in guard.patterns):
        return
    import pygit2

    from gitmem.engine import ledger
    from gitmem.engine.guard import push_flags
    from gitmem.git.treediff import tree_deltas

    repo = store.repo
    blobs: list[tuple[str, str, bytes]] = []
    seen: set[pygit2.Oid] = set()
    scopes = []
    for u in updates:
        if not u.scope or u.is_delete:
            continue
        scopes.append(u.scope)
        walker = repo.walk(pygit2.Oid(hex=u.new), pygit2.enums.SortMode.TOPOLOGICAL)
        if not u.is_create:
            walker.hide(pygit2.Oid(hex=u.old))
        for commit in walker:
            parent = commit.parents[0].tree if commit.parents else None
            for d in tree_deltas(parent, commit.tree):
                if d.kind == "deleted" or d.new_id is None or d.new_id in seen:
                    continue
                seen.add(d.new_id)
                blob = repo.get(d.new_id)
                if isinstance(blob, pygit2.Blob):
                    path = "/" + d.raw_path.decode("utf-8", "surrogateescape")
                    blobs.append((str(commit.id), path, blob.data))
    files = push_flags(guard, blobs)
    for f in files:  # keyed digests: a path may be the secret, and the ledger cannot be rewritten
        f["commit"] = ledger.digest(store, f["commit"])
        f["path_digest"] = ledger.digest(store, f.pop("path"))
    if files:
        data = {"scope": scopes[0] if len(scopes) == 1 else None, "session": None, "files": files}
        ledger.append(store, "flag", data, actor=actor)
