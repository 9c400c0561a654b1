"""``gitmem verify``: is the store whole? (docs/architecture.md#the-audit-ledger)

Checks, in order: an interrupted history rewrite is finished or rolled back first; ``git fsck``; the
ledger chain (and, against the anchors, that it was not rewritten); every ledger redaction and
compaction really purged (its digests match deny-listed ids, and git cannot read any of those); no
proposal's erase left unfinished (one killed past its proposal's save is finished first);
every ``[redacted: <id>]`` mark recorded by the ledger; every commit's gitmem trailers well-formed;
the derived index consistent with git. Any failure raises IntegrityError (exit 7) naming each failed
check. On a clone, what cannot be checked there (the deny-list, a missing ledger) is reported as
skipped, never as ok.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import pygit2

from gitmem import config
from gitmem.audit import transparency
from gitmem.engine import ledger
from gitmem.engine.core import StoreCore
from gitmem.engine.denylist import MARK as _MARK
from gitmem.engine.denylist import excused, read_scoped
from gitmem.errors import GitmemError, IntegrityError
from gitmem.model.versions import parse_trailers, trailer_problems


@dataclass(frozen=True)
class Check:
    """One check; ``skipped``: it cannot be made here (a clone has no deny-list), ``detail`` says why."""

    name: str
    ok: bool
    detail: str = ""
    skipped: bool = False


class _Skipped(Exception):
    pass


@dataclass(frozen=True)
class VerifyReport:
    store: str
    recovered: str | None = None  # "completed" / "rolled back": an interrupted rewrite was resolved
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def verify(store: StoreCore, *, raise_on_failure: bool = True) -> VerifyReport:
    """Run every check; raise IntegrityError naming the failures (unless ``raise_on_failure`` is off)."""
    from gitmem.audit.journal import recover

    recovered = recover(store, blocking=True)
    checks = [
        _run("fsck", lambda: check_fsck(store)),
        _run("ledger", lambda: check_ledger(store)),
        _run("redactions purged", lambda: check_purged(store)),
        _run("erasures", lambda: check_erasures(store)),
        _run("redaction marks", lambda: check_marks(store)),
        _run("trailers", lambda: check_trailers(store)),
        _run("receipts", lambda: check_receipts(store)),
        _run("settings", lambda: check_settings(store)),
        _run("index", lambda: check_index(store)),
        _run("transparency log", lambda: transparency.check(store)),
    ]
    report = VerifyReport(str(store.path), recovered, checks)
    _remember(store, report)
    if report.ok and store.is_clone:
        ledger.remember_seen(store)
    if report.ok:
        transparency.remember(store)
    if raise_on_failure and not report.ok:
        failed = "; ".join(f"{c.name}: {c.detail}" for c in checks if not c.ok)
        raise IntegrityError(f"verify failed for {store.path}: {failed}")
    return report


LAST_REPORT_FILE = "verify_last.json"


def _remember(store: StoreCore, report: VerifyReport) -> None:
    """Keep the newest report in ``$GIT_DIR/gitmem/verify_last.json`` (for the console's
    integrity page); a store whose directory is read-only just keeps none."""
    path = store.gitmem_dir / LAST_REPORT_FILE
    tmp = path.with_name(f".{LAST_REPORT_FILE}.tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"at": config.now_rfc3339(), **asdict(report)}), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):  # on a read-only file system the unlink fails too
            tmp.unlink(missing_ok=True)


def last_report(store: StoreCore) -> tuple[str, VerifyReport] | None:
    """When ``verify`` last ran on this store, and what it found (None: never, or unreadable)."""
    try:
        data = json.loads((store.gitmem_dir / LAST_REPORT_FILE).read_text(encoding="utf-8"))
        checks = [Check(str(c["name"]), bool(c["ok"]), str(c.get("detail", ""))) for c in data["checks"]]
        return str(data["at"]), VerifyReport(str(data["store"]), data.get("recovered"), checks)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _run(name: str, fn: object) -> Check:
    assert callable(fn)
    try:
        problems = fn()
    except _Skipped as skip:
        return Check(name, True, str(skip), skipped=True)
    except GitmemError as exc:
        problems = [exc.message]
    if problems:
        shown = "; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
        return Check(name, False, shown)
    return Check(name, True)


def check_fsck(store: StoreCore) -> list[str]:
    from gitmem.git.consolidate import merges_paused
    from gitmem.git.repo import STORE_LOCK
    from gitmem.git.rewrite import _git

    with merges_paused(os.path.join(store.git_dir, "gitmem", STORE_LOCK)):  # none deletes a pack under it
        res = _git(store, "fsck", "--no-progress", "--no-dangling")
    if res.returncode == 0:
        return []
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    return [f"git fsck failed: {ln}" for ln in lines[:3]] or ["git fsck failed"]


def check_ledger(store: StoreCore) -> list[str]:
    """The chain, its anchors, and (on a store) that the anchor exists when the ledger does: a
    deleted anchor would let a rewritten ledger pass."""
    if store.is_clone and ledger.ledger_tip(store) is None:
        raise _Skipped("skipped: this clone has no audit ledger (clone it with gitmem clone)")
    problems = ledger.check_chain(store)
    anchor = store.gitmem_dir / ledger.ANCHOR_FILE
    if not store.is_clone and ledger.ledger_tip(store) is not None and not anchor.exists():
        problems.append(
            f"the ledger anchor $GIT_DIR/gitmem/{ledger.ANCHOR_FILE} is missing although the store "
            "has a ledger: the audit trail may have been rewritten"
        )
    return problems


def check_erasures(store: StoreCore) -> list[str]:
    """A proposal's erase killed half-way: finished here when only its records' scrub was left,
    reported otherwise (gitmem.audit.erase_recovery)."""
    from gitmem.audit.erase_recovery import check_pending
    from gitmem.audit.journal import store_lock

    if store.is_clone:
        raise _Skipped("skipped: a clone erases no proposals")
    return check_pending(store, store_lock)


def check_purged(store: StoreCore) -> list[str]:
    """Each rewrite in the ledger: its digests match deny-listed ids, none of which git can read."""
    from gitmem.git.rewrite import missing_objects

    if store.is_clone:
        raise _Skipped(
            "skipped: a clone has no deny-list (only the store can prove its purge; "
            "gitmem fetch --purge proves the clone's own)"
        )
    events = [e for e in ledger.entries(store) if e.kind in ("redaction", "compaction", "proposal_erased")]
    blocks = ledger.denied_by(store)
    problems = []
    # Every deny-list block was written by a rewrite that the ledger must record: a block without
    # its entry means audit history was lost (the ledger truncated or rewritten).
    recorded = {f"{e.kind} {e.data.get('id')}" for e in events}
    for label in sorted(k for k, ids in blocks.items() if k and ids and k not in recorded):
        problems.append(f"the deny-list holds '{label}', which the ledger does not record")
    if not events:
        return problems
    denied = sorted(ledger.denied(store))
    scoped = read_scoped(store.path)
    for e in events:
        block = blocks.get(f"{e.kind} {e.data.get('id')}", set())
        blob_digests = set(e.data.get("blob_digests", []))
        digests = {o: ledger.digest(store, o) for o in block}
        commits = {o for o, d in digests.items() if d not in blob_digests}
        complete = blob_digests <= set(digests.values())
        if not complete or ledger.set_digest(store, commits) != e.data.get("retired_commits_digest"):
            problems.append(f"{e.kind} {e.data.get('id')}: its retired objects are not all on the deny-list")
        # a blob refused in fewer scopes than the ledger says the redaction rewrote (an edited
        # '#@ scopes' line): those scopes could take it back, and the proof would excuse it there
        rewrote = {str(s) for s in e.data.get("scopes") or ()}
        narrowed = [
            o for o, d in digests.items() if d in blob_digests and o in scoped and not rewrote <= scoped[o]
        ]
        if narrowed:
            problems.append(
                f"{e.kind} {e.data.get('id')}: the deny-list refuses {len(narrowed)} of its blobs in fewer "
                f"scopes than the ledger records it rewrote ({', '.join(sorted(rewrote))})"
            )
    readable = set(denied) - missing_objects(store, denied)
    if readable:  # a redacted blob written again in a scope its redaction did not rewrite is no leftover
        # (unless a scope it was redacted from reaches it again)
        readable -= excused(store.path, scoped, readable)
    if readable:
        problems.append(f"{len(readable)} deny-listed (redacted or retired) objects are still in the store")
    return problems


def check_marks(store: StoreCore) -> list[str]:
    """Every ``[redacted: <id>]`` placeholder in the store's objects, and every redaction the index
    remembers, is a redaction the ledger records: removing a redaction's entry (with its deny-list
    block and anchor) is still detected."""
    recorded = {str(e.data.get("id")) for e in ledger.entries(store, kind="redaction")}
    found: set[str] = set()
    for _oid, data in _blobs(store):
        found.update(m.decode() for m in _MARK.findall(data))
    if not store.is_clone:
        with contextlib.suppress(Exception):
            found.update(r[0] for r in store.index.db.execute("SELECT id FROM redactions"))
    missing = sorted(found - recorded)
    return [
        f"redaction {rid} left its mark in the store, but the ledger does not record it" for rid in missing
    ]


def _blobs(store: StoreCore) -> Iterator[tuple[str, bytes]]:
    """Every blob reachable from a branch (what a rolled-back rewrite left unreferenced is not
    history): ``git rev-list --objects --branches`` into one ``git cat-file --batch`` stream."""
    env = config.plain_git_env()
    base = ["git", f"--git-dir={store.path}"]
    listing = subprocess.Popen(
        [*base, "rev-list", "--objects", "--no-object-names", "--branches", "--remotes"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    cmd = [*base, "cat-file", "--batch=%(objecttype) %(objectname) %(objectsize)"]
    with (
        listing,
        subprocess.Popen(
            cmd, stdin=listing.stdout, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
        ) as proc,
    ):
        assert proc.stdout is not None
        out = proc.stdout
        while True:
            header = out.readline()
            if not header:
                break
            kind, oid, size = header.split()
            data = out.read(int(size) + 1)[:-1]
            if kind == b"blob":
                yield oid.decode(), data


def check_trailers(store: StoreCore) -> list[str]:
    """Malformed gitmem trailers (readers treat such a commit as plain git), and compaction roots
    that a pusher wrote rather than the server (docs/identity.md)."""
    from gitmem.engine import receipts
    from gitmem.model.versions import malformed_trailers

    problems = []
    require = store.settings.require_trailers
    received = receipts.load(store.path)
    for scope in store.scopes():
        tip = store.tip(scope)
        if tip is None:
            continue
        for commit in store.walk(tip):
            message = commit.message
            trailers = parse_trailers(message)
            if not trailers:
                if require:
                    problems.append(f"commit {commit.id} in scope {scope!r} has no gitmem trailers")
                continue
            bad = malformed_trailers(message)
            if bad:
                problems.append(f"commit {commit.id} in scope {scope!r}: malformed trailers: {bad[0]}")
                continue
            receipt = received.get(str(commit.id), scope)
            if "Gitmem-Compaction" in trailers:
                # A copy (a scope forked from a compacted one) is the server's root arriving on
                # another scope, not a root a pusher wrote: those are refused by pre-receive.
                if receipt is not None and not receipt.trusted and not receipt.copy:
                    problems.append(
                        f"commit {commit.id} in scope {scope!r} claims to be a compaction root but was "
                        f"pushed by {receipt.actor}; its trailers are ignored"
                    )
                continue
            if require and trailer_problems(trailers):
                problems.append(f"commit {commit.id} in scope {scope!r}: {trailer_problems(trailers)[0]}")
    return problems


def check_receipts(store: StoreCore) -> list[str]:
    """The push receipts (``$GIT_DIR/gitmem/receipts.jsonl``) against the ledger's push entries,
    which are chained: a receipt whose pusher or session is not its push's, and a version a push
    brought that the index no longer derives (a receipt deleted or rewritten, so the rebuilt index
    gives the commit other ids or another actor), are reported (docs/identity.md)."""
    from gitmem.engine import receipts

    book = receipts.load(store.path)
    pushes = {str(e.data.get("push")): e for e in ledger.entries(store, kind="push") if e.data.get("push")}
    dropped: set[str] = set()
    for c in ledger.entries(store, kind="compaction"):
        dropped.update(str(v) for v in c.data.get("dropped", []) if isinstance(v, str))
    problems = []
    for r in book.values():
        p = pushes.get(r.push)
        if p is None:  # a push that failed after its checks passed (a lost race) leaves receipts
            continue
        if r.actor != p.actor or r.session != p.data.get("session", r.session):
            problems.append(
                f"the receipt of commit {r.commit} on scope {r.scope!r} says {r.actor} (session "
                f"{r.session}) but push {r.push} was by {p.actor} (session {p.data.get('session')}): "
                "receipts.jsonl was edited"
            )
    store.index.ensure_all()
    db = store.index.db
    for pid, e in pushes.items():
        trusted = bool(e.data.get("trusted_trailers"))
        for v in e.data.get("versions", []):
            if not isinstance(v, dict) or str(v.get("version")) in dropped:
                continue
            row = db.execute(
                "SELECT actor FROM versions WHERE id=? AND scope=?", (v.get("version"), v.get("scope"))
            ).fetchone()
            if row is None:
                problems.append(
                    f"push {pid} brought version {v.get('version')} to scope {v.get('scope')!r}, which "
                    "the index no longer has: its receipt was removed or changed"
                )
            elif not trusted and row[0] != e.actor:
                problems.append(
                    f"version {v.get('version')} is attributed to {row[0]}, but push {pid} by {e.actor} "
                    "brought it: its receipt was changed"
                )
    return problems


def check_settings(store: StoreCore) -> list[str]:
    """A hand edit of gitmem.yaml is recorded in the ledger (unattributed) when found."""
    from gitmem.engine.ledger import check_hand_edit

    check_hand_edit(store)
    return []


def check_index(store: StoreCore) -> list[str]:
    index = store.index
    scopes = index.ensure_all()
    problems = []
    if index.purge_pending() and not index.purge_search():
        problems.append(
            "the index's WAL still holds pages of purged (redacted or compacted) text: a process keeps "
            "a read transaction open; stop it and run gitmem verify again"
        )
    for scope in scopes:
        tip = store.tip(scope)
        row = index.db.execute("SELECT tip FROM scopes WHERE scope=?", (scope,)).fetchone()
        if row is None or tip is None or row[0] != str(tip):
            problems.append(f"index of scope {scope!r} is not at its branch tip")
            continue
        in_git = dict(_files(store.commit(tip).tree, ""))
        in_index = {h.path: h.blob for h in index.heads(scope)}
        if in_git != in_index:
            diff = sorted(set(in_git.items()) ^ set(in_index.items()))
            problems.append(f"index heads of scope {scope!r} differ from git at {diff[0][0]}")
        for (commit_id,) in index.db.execute(
            "SELECT DISTINCT commit_id FROM versions WHERE scope=?", (scope,)
        ):
            if not store.has_object(commit_id):
                problems.append(f"index of scope {scope!r} names commit {commit_id}, which is not in git")
                break
    return problems


def _files(tree: pygit2.Tree, base: str) -> list[tuple[str, str]]:
    out = []
    for entry in tree:
        path = f"{base}/{entry.name}"
        if isinstance(entry, pygit2.Tree):
            out.extend(_files(entry, path))
        else:
            out.append((path, str(entry.id)))
    return out
