"""Entry points of the server-side hooks: ``python -m gitmem.push.hook pre-receive|post-receive SHIM``.

The shims in ``hooks/`` exec this module with the interpreter recorded at install time. It imports
only what a hook needs (pygit2, the push checks, and the index in post-receive), so a push pays little
for it. pre-receive rejects the whole push with one ``gitmem: ...`` line per violation and fails
closed on unexpected errors; post-receive never fails the (already accepted) push. A foreign hook that
was kept as ``<name>.legacy`` runs after gitmem's own work, with the same input.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gitmem import config

if TYPE_CHECKING:
    import pygit2

    from gitmem.engine.core import StoreCore
    from gitmem.push.pushcheck import RefUpdate

PUSH_LOG = "pushes.jsonl"
INDEX_FILE = "index.sqlite"  # gitmem.engine.index.INDEX_FILE (not imported: the fast path skips that module)
SETTINGS_CACHE = "settings.json"  # $GIT_DIR/gitmem/settings.json: see config.load_settings_cached
MAX_LINES = 100
_ACTOR_ENV = (("GITMEM_ACTOR", ""), ("REMOTE_USER", "user:"), ("GL_USERNAME", "user:"))


def push_options(env: Mapping[str, str]) -> list[str]:
    """The ``git push -o`` options git passes to receive hooks."""
    try:
        count = int(env.get("GIT_PUSH_OPTION_COUNT", "0"))
    except ValueError:
        return []
    return [env.get(f"GIT_PUSH_OPTION_{i}", "") for i in range(count)]


def pusher(env: Mapping[str, str], options: Sequence[str], trust_options: bool) -> str | None:
    """Who pushes: ``GITMEM_ACTOR``, else ``REMOTE_USER``/``GL_USERNAME`` as ``user:<name>``, else
    (only when the store's acl sets ``trust_push_actor``) a ``-o actor=...`` push option."""
    for var, prefix in _ACTOR_ENV:
        value = env.get(var)
        if value:
            return value if ":" in value or not prefix else prefix + value
    if trust_options:
        for opt in options:
            if opt.startswith("actor="):
                return opt[len("actor=") :] or None
    return None


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
    """Check a push; returns the ``gitmem: ...`` lines (empty: accept)."""
    from gitmem.engine.denylist import read_denylist, read_patterns
    from gitmem.push import pushcheck

    git_dir = Path(repo.path).resolve()
    if (git_dir / "gitmem" / "journal.json").exists() or _rewrite_running(git_dir):
        from gitmem.audit.journal import guard_push  # pushes and rewrites exclude each other

        refused = guard_push(git_dir)
        if refused is not None:
            return [refused]
    settings = config.load_settings_cached(
        git_dir / config.SETTINGS_FILE, git_dir / "gitmem" / SETTINGS_CACHE
    )
    updates = pushcheck.parse_updates(text)
    options = push_options(env)
    ctx = pushcheck.PushContext(
        settings=settings,
        pusher=pusher(env, options, bool(settings.acl.get("trust_push_actor"))),
        denylist=read_denylist(git_dir),
        patterns=read_patterns(git_dir),
        now=now,
        quarantine=pushcheck.quarantine_objects(env.get("GIT_QUARANTINE_PATH")),
    )
    stats: dict[str, tuple[int, int]] = {}
    store_bytes = 0
    scopes = {u.scope for u in updates if u.scope and not u.is_delete}
    if scopes:
        stats, store_bytes = scope_stats(repo, git_dir, scopes)
    violations = pushcheck.check_push(repo, updates, ctx, stats, store_bytes)
    lines = [pushcheck.format_violation(v) for v in violations[:MAX_LINES]]
    if len(violations) > MAX_LINES:
        lines.append(f"gitmem: ... and {len(violations) - MAX_LINES} more")
    if lines:
        lines.append(f"gitmem: push rejected ({len(violations)} problem(s)); nothing was changed")
    return lines


def _rewrite_running(git_dir: Path) -> bool:
    """Whether a history rewrite holds the store lock now (one non-blocking shared flock)."""
    import fcntl
    import os

    try:
        fd = os.open(git_dir / "gitmem" / "lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def scope_stats(
    repo: pygit2.Repository, git_dir: Path, scopes: set[str]
) -> tuple[dict[str, tuple[int, int]], int]:
    """(memories, bytes) of each scope at its current tip, and the store's total bytes, from the
    derived index. Fast path: when the index is current for every scope, one query answers (no
    catch-up machinery imported); otherwise the index catches up first."""
    import sqlite3

    path = git_dir / "gitmem" / INDEX_FILE
    try:
        if path.exists():
            db = sqlite3.connect(str(path), timeout=5.0)
            try:
                rows = db.execute("SELECT scope, tip, memories, bytes FROM scopes").fetchall()
            finally:
                db.close()
            indexed = {r[0]: (r[1], int(r[2]), int(r[3])) for r in rows}
            tips = {}
            for name in repo.references:
                if name.startswith("refs/heads/"):
                    target = repo.references[name].target
                    tips[name[len("refs/heads/") :]] = str(target)
            if all(indexed.get(s, (None,))[0] == t for s, t in tips.items()) and set(indexed) <= set(tips):
                return {s: indexed[s][1:] for s in scopes if s in indexed}, sum(
                    v[2] for v in indexed.values()
                )
    except sqlite3.Error:
        pass
    store = _store(repo)
    try:
        store.index.ensure_all()
        return {s: store.index.scope_stats(s) for s in scopes}, store.index.store_bytes()
    finally:
        store.index.close()


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
        trust = False
    actor = pusher(env, options, trust)
    steps: list[tuple[str, Callable[[], object]]] = [
        ("index", lambda: update_index(store, updates)),
        ("push log", lambda: record_push(store, updates, actor, options)),
        ("ledger", lambda: record_push_in_ledger(store, updates, actor, options)),
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
    store: StoreCore, updates: Sequence[RefUpdate], actor: str | None, options: Sequence[str]
) -> None:
    """Append one JSON line per ref update to ``$GIT_DIR/gitmem/pushes.jsonl`` (server-side, never
    cloned: it keeps the raw commit ids that the public ledger only holds as keyed digests)."""
    import json

    when = config.now_rfc3339()
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
            fh.write(json.dumps(rec, sort_keys=True) + "\n")


def record_push_in_ledger(
    store: StoreCore, updates: Sequence[RefUpdate], actor: str | None, options: Sequence[str]
) -> None:
    """A ``push`` entry in the audit ledger. Commit ids go in as keyed
    digests: a pushed commit may later be retired by a redaction, and the public ledger never holds those."""
    from gitmem.engine import ledger

    refs = [
        {"ref": u.ref, "old": ledger.digest(store, u.old), "new": ledger.digest(store, u.new)}
        for u in updates
    ]
    keys = sorted({o.split("=", 1)[0] for o in options})  # option values may be anything: keep names
    ledger.record_push(store, {"updates": refs, "actor": actor, "push_options": keys})


def run_legacy(shim: str | None, name: str, stdin: bytes) -> int:
    """Run ``<name>.legacy`` beside the shim, if there is one, with the same input."""
    if not shim:
        return 0
    legacy = Path(shim).with_name(f"{name}.legacy")
    if not legacy.is_file():
        return 0
    import subprocess

    return subprocess.run([str(legacy)], input=stdin, check=False).returncode


def _exclude_rewrites(git_dir: Path) -> tuple[int | None, list[str]]:
    """Finish an interrupted rewrite, then take the store lock shared (waiting while a rewrite
    runs): the lock and no lines, or no lock and the refusal."""
    if (git_dir / "gitmem" / "journal.json").exists():
        from gitmem.audit.journal import guard_push

        refused = guard_push(git_dir)
        if refused is not None:
            return None, [refused]
    from gitmem.push.pushlock import acquire_shared

    lock = acquire_shared(git_dir, PUSH_WAIT)
    if lock is None:
        return None, [
            "gitmem: a history rewrite (redaction or compaction) of this store is in progress and it is "
            "still running; nothing was changed: push again when it has finished"
        ]
    return lock, []


PUSH_WAIT = 60.0  # seconds a push waits for a running rewrite


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
        try:
            repo = open_repo()
            lock, lines = _exclude_rewrites(Path(repo.path).resolve())
            if not lines:
                lines = pre_receive(repo, text, env)
        except Exception as exc:  # fail closed: an unchecked push must not land
            lines = [f"gitmem: push rejected: the check failed ({type(exc).__name__}: {exc})"]
        if lines:
            if lock is not None:
                os.close(lock)
            sys.stderr.write("".join(line + "\n" for line in lines))
            sys.stderr.flush()
            return 1
        if lock is not None:
            from gitmem.push.pushlock import hold_until_exit

            hold_until_exit(lock, os.getppid())  # until receive-pack has moved the refs
    else:
        try:
            lines = post_receive(open_repo(), text, env)
        except Exception as exc:  # the push has landed; report, never fail it
            lines = [f"gitmem: warning: post-receive: {type(exc).__name__}: {exc}"]
        sys.stderr.write("".join(line + "\n" for line in lines))
        sys.stderr.flush()
    return run_legacy(shim, name, raw)


if __name__ == "__main__":
    sys.exit(main())
