"""Entry points of the server-side hooks: ``python -m gitmem.push.hook pre-receive|post-receive SHIM``.

The shims in ``hooks/`` exec this module with the interpreter recorded at install time. It imports
only what a hook needs (pygit2, the push checks, and the index in post-receive), so a push pays little
for it: at import only this module and :mod:`gitmem.push.pushenv` (the standard library); the rest
when a step needs it, post-receive's work from :mod:`gitmem.push.postreceive`. pre-receive rejects the whole push with one ``gitmem: ...`` line per violation and fails
closed on unexpected errors; post-receive never fails the (already accepted) push. A foreign hook that
was kept as ``<name>.legacy`` runs after gitmem's own work, with the same input.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitmem import config
from gitmem.push.pushenv import (
    SERVER_REVIEW_ENV,
    UNKNOWN,
    identity_source,
    open_repo,
    push_id,
    push_options,
    push_session,
    pusher,
    store_of,
    trusted_for_trailers,
)

if TYPE_CHECKING:
    import pygit2

    from gitmem.push.refupdates import RefUpdate

INDEX_FILE = "index.sqlite"  # gitmem.engine.index.INDEX_FILE (not imported: the fast path skips that module)
MAX_LINES = 100


def pre_receive(
    repo: pygit2.Repository, text: str, env: Mapping[str, str], now: int | None = None
) -> list[str]:
    """Check a push; returns the ``gitmem: ...`` lines (empty: accept).

    An accepted push gets its receipts (who pushed each commit, when, in which session) before git
    moves any ref; a rejected one is recorded in the ledger (who, which refs, which rules)."""
    import time

    from gitmem.engine.denylist import read_denylist, read_patterns, read_scoped
    from gitmem.push import pushcheck, refupdates

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
        git_dir / config.SETTINGS_FILE, git_dir / "gitmem" / config.SETTINGS_CACHE
    )
    updates = refupdates.parse_updates(text)
    from gitmem.push.pushwait import moved_while_waiting

    moved = moved_while_waiting(repo, updates)
    if moved:
        return moved
    options = push_options(env)
    actor = pusher(env, options, bool(settings.acl.get("trust_push_actor")))
    received_at = int(time.time()) if now is None else now
    ctx = refupdates.PushContext(
        settings=settings,
        pusher=actor,
        denylist=read_denylist(git_dir),
        denyscoped=read_scoped(git_dir),
        patterns=read_patterns(git_dir),
        now=now,
        quarantine=refupdates.quarantine_objects(env.get("GIT_QUARANTINE_PATH")),
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
    arrived = pushcheck.arrivals(repo, updates)
    from gitmem.push.ledgercheck import check_ledger_text

    violations += check_ledger_text(repo, updates, ctx, options, arrived)  # the ledger keeps them
    lines = [pushcheck.format_violation(v) for v in violations[:MAX_LINES]]
    if len(violations) > MAX_LINES:
        lines.append(f"gitmem: ... and {len(violations) - MAX_LINES} more")
    if lines:
        lines.append(f"gitmem: push rejected ({len(violations)} problem(s)); nothing was changed")
        try:
            record_rejection(git_dir, updates, violations, actor, env, received_at, settings)
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
            for c, scope in arrived
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
    settings: config.StoreSettings | None = None,
) -> None:
    """One line in ``$GIT_DIR/gitmem/rejected.jsonl`` (server-side; ``gitmem audit`` shows it):
    who, when, which refs, which rules and how often. No content and no commit ids (a stale clone
    pushing redacted history back would otherwise leave retired ids behind), no pusher or ref name
    the store's guard finds anything in (``settings``: withheld), and no ref or object changes: a
    rejected push leaves the repository as it was."""
    import json
    import os

    from gitmem.engine.ledger import REJECTED_LOG
    from gitmem.push.ledgercheck import withheld

    rules: dict[str, int] = {}
    for v in violations:
        rule = str(getattr(v, "rule", "?"))
        rules[rule] = rules.get(rule, 0) + 1
    refs = sorted({u.ref for u in updates})
    if settings is not None:
        actor, refs = withheld(settings, actor, refs)
    rec = {
        "actor": actor or UNKNOWN,
        "identity": identity_source(env),
        "refs": refs,
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
    store = store_of(repo)
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
    from gitmem.push.refupdates import parse_updates

    return [u for u in parse_updates(text) if u.ref.startswith("refs/heads/") and not u.is_delete]


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
        from gitmem.git.refgen import bump
        from gitmem.push.postreceive import post_receive

        try:
            repo = open_repo()
            bump(repo.path)  # receive-pack moved refs: a new ref generation (docs/cluster.md)
            lines = post_receive(repo, text, env)
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
