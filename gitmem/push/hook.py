"""Entry points of the server-side hooks: ``python -m gitmem.push.hook pre-receive|post-receive SHIM``.

The shims in ``hooks/`` exec this module with the interpreter recorded at install time. It imports
only what a hook needs (pygit2, the push checks, and the index in post-receive), so a push pays little
for it. pre-receive rejects the whole push with one ``gitmem: ...`` line per violation and fails
closed on unexpected errors; post-receive never fails the (already accepted) push. A foreign hook that
was kept as ``<name>.legacy`` runs after gitmem's own work, with the same input.
"""

# size-ok: a push imports this one module and nothing heavy (start time is the hook's cost, see
# docs/architecture.md#hooks); its parts are already plain functions, tested one by one.
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitmem import config

if TYPE_CHECKING:
    import pygit2

    from gitmem.engine.core import StoreCore
    from gitmem.push.pushcheck import RefUpdate

PUSH_LOG = "pushes.jsonl"
INDEX_FILE = "index.sqlite"  # gitmem.engine.index.INDEX_FILE (not imported: the fast path skips that module)
SETTINGS_CACHE = "settings.json"  # $GIT_DIR/gitmem/settings.json: see config.load_settings_cached
MAX_LINES = 100
#: The git server's own identity of the pusher, in this order (docs/identity.md): Apache/nginx
#: ``git http-backend`` (and ``gitmem serve``), GitLab, Gitea/Forgejo, gitolite. Each outranks
#: ``GITMEM_ACTOR``, which on a local or file:// push is whatever the client set.
SERVER_IDENTITY = ("REMOTE_USER", "GL_USERNAME", "GITEA_PUSHER_NAME", "GL_USER")
CLIENT_IDENTITY = "GITMEM_ACTOR"
UNKNOWN = "unknown"
#: Set by ``gitmem serve`` (git over HTTP) to the pushing token's session; a client cannot set it.
SERVER_SESSION_ENV = "GITMEM_PUSH_SESSION"
#: Set by ``gitmem serve`` for a push by a review-mode token: the hook refuses it (docs/access.md).
SERVER_REVIEW_ENV = "GITMEM_PUSH_REVIEW"


def push_options(env: Mapping[str, str]) -> list[str]:
    """The ``git push -o`` options git passes to receive hooks."""
    try:
        count = int(env.get("GIT_PUSH_OPTION_COUNT", "0"))
    except ValueError:
        return []
    return [env.get(f"GIT_PUSH_OPTION_{i}", "") for i in range(count)]


def option(options: Sequence[str], name: str) -> str | None:
    """The value of the last ``-o name=value`` push option (None: not given)."""
    found = None
    for opt in options:
        if opt.startswith(name + "="):
            found = opt[len(name) + 1 :]
    return found


ACTOR_KINDS = ("session", "user", "api", "service", "git")  # gitmem.model.versions._ACTOR_RE


def as_actor(value: str) -> str | None:
    """An identity as a valid actor: ``kind:name`` when it names one of :data:`ACTOR_KINDS` (gitmem
    serve's tokens do), else ``user:<value>`` (``cn:bob`` is ``user:cn:bob``). Whitespace, control
    and format characters (a newline, a right-to-left override) become ``_``; a value with no name
    left (empty, blank, ``user:``) is None: nobody."""
    import unicodedata

    text = value.strip()
    kind, sep, rest = text.partition(":")
    if not (sep and kind in ACTOR_KINDS):
        kind, rest = "user", text
    name = "".join(
        "_" if ch.isspace() or ch in "<>" or unicodedata.category(ch)[0] == "C" else ch for ch in rest
    )[:200]
    return f"{kind}:{name}" if name.strip("_") else None


def pusher(env: Mapping[str, str], options: Sequence[str], trust_options: bool) -> str | None:
    """Who pushes: the server's identity variable (:data:`SERVER_IDENTITY`, in that order) as
    ``user:<name>``, else ``GITMEM_ACTOR``, else (only when the store's acl sets
    ``trust_push_actor``) a ``-o actor=...`` push option; None when nobody said (``unknown``).
    A variable whose value names nobody (see :func:`as_actor`) counts as unset."""
    for var in (*SERVER_IDENTITY, CLIENT_IDENTITY):
        actor = as_actor(env.get(var) or "")
        if actor is not None:
            return actor
    if trust_options:
        return as_actor(option(options, "actor") or "")
    return None


def push_session(env: Mapping[str, str], options: Sequence[str], actor: str | None) -> str | None:
    """The session a push's versions carry (docs/access.md, session binding): the one the server
    bound (``gitmem serve``: the token's); else ``-o session=<id>``, which, when a git server
    named the pusher (:data:`SERVER_IDENTITY`), is put under the pusher's own namespace
    (:func:`session_namespace` ``.<id>``): a pusher can never write in another's session. A local or file://
    push (full trust) names any session."""
    bound = env.get(SERVER_SESSION_ENV)
    if bound:
        return bound
    named = option(options, "session")
    if named is None or actor is None or identity_source(env) not in SERVER_IDENTITY:
        return named
    own = session_namespace(actor)
    return named if named == own or named.startswith(own + ".") else f"{own}.{named}"


def session_namespace(actor: str) -> str:
    """A pusher's own session namespace: ``sesn_<actor, readable>_<10 hex of its hash>``. The
    hash makes it one actor's alone (``user:a.b`` and ``user:a_b`` read alike), and with no ``.``
    in it no namespace is a prefix of another's sub-sessions."""
    import hashlib

    slug = "".join(c if c.isalnum() or c in "_-" else "_" for c in actor)[:40]
    return f"sesn_{slug}_{hashlib.sha256(actor.encode('utf-8')).hexdigest()[:10]}"


def identity_source(env: Mapping[str, str]) -> str:
    """Which variable named the pusher (for the audit)."""
    for var in (*SERVER_IDENTITY, CLIENT_IDENTITY):
        if as_actor(env.get(var) or "") is not None:
            return var
    return "none"


def push_id(text: str) -> str:
    """One id for a push that both hooks compute from the same ref-update lines."""
    import hashlib

    return "push_" + hashlib.sha256(text.strip().encode("utf-8", "surrogateescape")).hexdigest()[:24]


def trusted_for_trailers(acl: Mapping[str, object], actor: str | None) -> bool:
    """Whether the store believes this pusher's trailers (``acl.trust_trailers``: actor patterns)."""
    import fnmatch

    globs = acl.get("trust_trailers") or []
    if actor is None or not isinstance(globs, list):
        return False
    return any(fnmatch.fnmatchcase(actor, str(g)) for g in globs)


def open_repo() -> pygit2.Repository:
    """The store as git sees it during the push: ``FROM_ENV`` honours ``GIT_DIR`` and the
    quarantine (``GIT_OBJECT_DIRECTORY`` + ``GIT_ALTERNATE_OBJECT_DIRECTORIES``)."""
    import pygit2

    return pygit2.Repository(".", flags=pygit2.enums.RepositoryOpenFlag.FROM_ENV)


def _store(repo: pygit2.Repository) -> StoreCore:
    from gitmem.engine.core import StoreCore

    return StoreCore(repo, Path(repo.path).resolve())


def pre_receive(
    repo: pygit2.Repository, text: str, env: Mapping[str, str], now: int | None = None
) -> list[str]:
    """Check a push; returns the ``gitmem: ...`` lines (empty: accept).

    An accepted push gets its receipts (who pushed each commit, when, in which session) before git
    moves any ref; a rejected one is recorded in the ledger (who, which refs, which rules)."""
    import time

    from gitmem.engine.denylist import read_denylist, read_patterns
    from gitmem.push import pushcheck

    git_dir = Path(repo.path).resolve()
    # After a reboot a write acknowledged before it may sit only in the intent log: replay it
    # before judging a push against the refs (one small read when nothing is due).
    if intent_replay_due(git_dir):
        from gitmem.git.repo import recover_intent_log

        recover_intent_log(git_dir)
    from gitmem.errors import ForbiddenError
    from gitmem.git.fence import check_fence
    from gitmem.push.pushlock import rewrite_running

    try:
        check_fence(git_dir)  # a store in a cluster takes pushes only at the lease holder
    except ForbiddenError as exc:
        return [f"gitmem: push rejected: {exc}"]
    if (git_dir / "gitmem" / "journal.json").exists() or rewrite_running(git_dir):
        from gitmem.audit.journal import guard_push  # pushes and rewrites exclude each other

        refused = guard_push(git_dir)
        if refused is not None:
            return [refused]
    settings = config.load_settings_cached(
        git_dir / config.SETTINGS_FILE, git_dir / "gitmem" / SETTINGS_CACHE
    )
    updates = pushcheck.parse_updates(text)
    from gitmem.push.pushwait import moved_while_waiting

    moved = moved_while_waiting(repo, updates)
    if moved:
        return moved
    options = push_options(env)
    actor = pusher(env, options, bool(settings.acl.get("trust_push_actor")))
    received_at = int(time.time()) if now is None else now
    ctx = pushcheck.PushContext(
        settings=settings,
        pusher=actor,
        denylist=read_denylist(git_dir),
        patterns=read_patterns(git_dir),
        now=now,
        quarantine=pushcheck.quarantine_objects(env.get("GIT_QUARANTINE_PATH")),
        trusted=trusted_for_trailers(settings.acl, actor),
        session=push_session(env, options, actor),
        git_dir=git_dir,
        review=env.get(SERVER_REVIEW_ENV) == "1",
    )
    stats: dict[str, tuple[int, int]] = {}
    store_bytes = 0
    scopes = {u.scope for u in updates if u.scope and not u.is_delete}
    if scopes:
        stats, store_bytes = scope_stats(repo, git_dir, scopes)
    commits: dict[str, str] = {}
    violations = pushcheck.check_push(repo, updates, ctx, stats, store_bytes, commits=commits)
    lines = [pushcheck.format_violation(v) for v in violations[:MAX_LINES]]
    if len(violations) > MAX_LINES:
        lines.append(f"gitmem: ... and {len(violations) - MAX_LINES} more")
    if lines:
        lines.append(f"gitmem: push rejected ({len(violations)} problem(s)); nothing was changed")
        try:
            record_rejection(git_dir, updates, violations, actor, env, received_at)
        except Exception as exc:  # the push is refused all the same
            lines.append(f"gitmem: warning: could not record the rejected push: {type(exc).__name__}")
        return lines
    from gitmem.engine import receipts

    pid = push_id(text)
    # Trailers are believed only on the commits a trusted pusher brings into the store: the ones it
    # already had (on another scope) are copies, whose ids are taken.
    receipts.append(
        git_dir,
        [
            receipts.Receipt(
                c,
                c,
                scope,
                actor or UNKNOWN,
                ctx.session,
                received_at,
                ctx.trusted and c in commits,
                pid,
                copy=c not in commits,
            )
            for c, scope in pushcheck.arrivals(repo, updates)
        ],
    )
    return lines


def intent_replay_due(git_dir: Path) -> bool:
    """Whether the store's intent log may hold writes to replay: it exists and was begun in an
    earlier boot (the test :func:`gitmem.git.repo.recover_intent_log` makes first, here without
    importing the repository layer)."""
    from gitmem.git import intent

    boot = intent.boot_id()
    if boot is None:
        return False
    try:
        with open(git_dir / intent.INTENT_LOG, "rb") as fh:
            first = fh.readline()
    except OSError:
        return False
    return first != f"{intent.INTENT_HEADER}{boot}\n".encode()


def record_rejection(
    git_dir: Path,
    updates: Sequence[RefUpdate],
    violations: Sequence[object],
    actor: str | None,
    env: Mapping[str, str],
    at: int,
) -> None:
    """One line in ``$GIT_DIR/gitmem/rejected.jsonl`` (server-side; ``gitmem audit`` shows it):
    who, when, which refs, which rules and how often. No content and no commit ids (a stale clone
    pushing redacted history back would otherwise leave retired ids behind), and no ref or object
    changes: a rejected push leaves the repository as it was."""
    import json
    import os

    from gitmem.engine.ledger import REJECTED_LOG

    rules: dict[str, int] = {}
    for v in violations:
        rule = str(getattr(v, "rule", "?"))
        rules[rule] = rules.get(rule, 0) + 1
    rec = {
        "actor": actor or UNKNOWN,
        "identity": identity_source(env),
        "refs": sorted({u.ref for u in updates}),
        "rules": rules,
        "problems": len(violations),
        "at": at,
    }
    path = git_dir / "gitmem" / REJECTED_LOG
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(rec, sort_keys=True) + "\n").encode("utf-8"))
    finally:
        os.close(fd)


def scope_stats(
    repo: pygit2.Repository, git_dir: Path, scopes: set[str]
) -> tuple[dict[str, tuple[int, int]], int]:
    """(memories, bytes) of each scope at its current tip, and the store's total bytes.

    The derived index's counters at the tips it last saw, brought to each scope's tip now by the
    tree diff between the two (the index lags behind git by the pushes since a gitmem process last
    opened the store: post-receive only spools them). One read-only query and the diffs since, so
    a push neither pays nor waits for an index catch-up, and the hook writes no index. Only when
    the index is missing or unreadable, or a tip it saw is no longer in the store (history
    rewritten since), does it catch up first."""
    import sqlite3

    path = git_dir / "gitmem" / INDEX_FILE
    try:
        if path.exists():
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
            try:
                rows = db.execute("SELECT scope, tip, memories, bytes FROM scopes").fetchall()
            finally:
                db.close()
            found = _stats_since_index(repo, {r[0]: (r[1], int(r[2]), int(r[3])) for r in rows})
            if found is not None:
                return {s: found[s] for s in scopes if s in found}, sum(v[1] for v in found.values())
    except sqlite3.Error:
        pass
    store = _store(repo)
    try:
        store.index.ensure_all()
        return {s: store.index.scope_stats(s) for s in scopes}, store.index.store_bytes()
    finally:
        store.index.close()


def _stats_since_index(
    repo: pygit2.Repository, indexed: Mapping[str, tuple[str | None, int, int]]
) -> dict[str, tuple[int, int]] | None:
    """(memories, bytes) of every scope at its tip, from the index's (tip, memories, bytes) plus
    the tree diff from that tip; None when a tip the index saw is gone (the caller catches up).
    A scope the index has not seen counts from an empty tree; one no longer in git counts nothing
    (as a catch-up would leave them)."""
    import pygit2

    from gitmem.push.pushcheck import tree_stats

    out: dict[str, tuple[int, int]] = {}
    for name in repo.references:
        if not name.startswith("refs/heads/"):
            continue
        scope = name[len("refs/heads/") :]
        tip = repo.references[name].target
        seen_tip, memories, size = indexed.get(scope, (None, 0, 0))
        if seen_tip == str(tip):
            out[scope] = (memories, size)
            continue
        head = repo.get(tip)
        if not isinstance(head, pygit2.Commit):
            return None
        base = None
        if seen_tip is not None:
            try:
                seen = repo.get(seen_tip)
            except ValueError:
                return None
            if not isinstance(seen, pygit2.Commit):
                return None
            base = seen.tree
        dcount, dbytes = tree_stats(repo, base, head.tree)
        out[scope] = (memories + dcount, size + dbytes)
    return out


def post_receive(repo: pygit2.Repository, text: str, env: Mapping[str, str]) -> list[str]:
    """Bring the derived index up to date and record the push; returns warning lines.

    Each step runs on its own, so one failing (say, a broken settings file) never hides the others.
    """
    from gitmem.push import pushcheck

    store = _store(repo)
    updates = pushcheck.parse_updates(text)
    options = push_options(env)
    warnings: list[str] = []
    try:
        settings = config.load_settings_cached(
            store.path / config.SETTINGS_FILE, store.gitmem_dir / SETTINGS_CACHE
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
    for f in files:
        f["commit"] = ledger.digest(store, f["commit"])
    if files:
        data = {"scope": scopes[0] if len(scopes) == 1 else None, "session": None, "files": files}
        ledger.append(store, "flag", data, actor=actor)


def run_legacy(shim: str | None, name: str, stdin: bytes) -> int:
    """Run ``<name>.legacy`` beside the shim, if there is one, with the same input."""
    if not shim:
        return 0
    legacy = Path(shim).with_name(f"{name}.legacy")
    if not legacy.is_file():
        return 0
    import subprocess

    return subprocess.run([str(legacy)], input=stdin, check=False).returncode


def _content_updates(text: str) -> list[Any]:
    from gitmem.push import pushcheck

    return [u for u in pushcheck.parse_updates(text) if u.ref.startswith("refs/heads/") and not u.is_delete]


def _one_at_a_time(git_dir: Path, text: str) -> tuple[int | None, list[str]]:
    """Pushes that bring content are checked against ``max_store_bytes`` and land one at a time
    (issue 26: concurrent pushes each saw the room only one had): the store-bytes lock, held until
    git has moved this push's refs (:func:`gitmem.push.pushlock.hold_until_landed`)."""
    from gitmem.push.pushlock import PUSH_WAIT, acquire_bytes_lock

    if not _content_updates(text):
        return None, []
    fd = acquire_bytes_lock(git_dir, PUSH_WAIT)
    if fd is None:
        return None, ["gitmem: the store is busy with other pushes; nothing was changed: push again"]
    return fd, []


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("pre-receive", "post-receive"):
        sys.stderr.write("usage: python -m gitmem.push.hook pre-receive|post-receive [SHIM]\n")
        return 2
    name, shim = args[0], (args[1] if len(args) > 1 else None)
    raw = sys.stdin.buffer.read()
    text = raw.decode("utf-8", "surrogateescape")
    env = config.env_snapshot()
    if name == "pre-receive":
        lock: int | None = None
        bytes_lock: int | None = None
        try:
            repo = open_repo()
            from gitmem.push.pushlock import exclude_rewrites

            lock, lines = exclude_rewrites(Path(repo.path).resolve())
            if not lines:
                bytes_lock, lines = _one_at_a_time(Path(repo.path).resolve(), text)
            if not lines:
                lines = pre_receive(repo, text, env)
        except Exception as exc:  # fail closed: an unchecked push must not land
            lines = [f"gitmem: push rejected: the check failed ({type(exc).__name__}: {exc})"]
        if lines:
            if bytes_lock is not None:
                os.close(bytes_lock)
            if lock is not None:
                os.close(lock)
            sys.stderr.write("".join(line + "\n" for line in lines))
            sys.stderr.flush()
            return 1
        if bytes_lock is not None:
            from gitmem.push.pushlock import hold_until_landed, receive_pack_pid

            landed = {u.ref: u.new for u in _content_updates(text)}
            hold_until_landed(bytes_lock, receive_pack_pid(), Path(repo.path).resolve(), landed)
        if lock is not None:
            from gitmem.push.pushlock import hold_until_exit, receive_pack_pid

            hold_until_exit(lock, receive_pack_pid())  # until receive-pack has moved the refs
    else:
        try:
            lines = post_receive(open_repo(), text, env)
        except Exception as exc:  # the push has landed; report, never fail it
            lines = [f"gitmem: warning: post-receive: {type(exc).__name__}: {exc}"]
        sys.stderr.write("".join(line + "\n" for line in lines))
        sys.stderr.flush()
    return run_legacy(shim, name, raw)


if __name__ == "__main__":
    import gc

    gc.disable()  # a process of a few dozen milliseconds: no cycle collections during its imports
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Every file is written and closed by now: skip the interpreter's teardown of pygit2 and the
    # modules (about as long as the checks themselves; docs/architecture.md#hooks).
    os._exit(status)
