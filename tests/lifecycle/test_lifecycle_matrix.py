"""The lifecycle matrix (issue 26): one store exercises every feature, then
every lifecycle step runs on it and each feature's row checks what that feature left.

Rows are :data:`FEATURES`; cells are :data:`CELLS`. The store is built once per module. A feature
that writes a ledger kind, a trailer or a ref namespace none of the rows exercises fails
:func:`test_every_feature_has_a_row` (so a new feature must add its row here).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import stat
import string
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2
import pytest
import yaml

import gitmem
from gitmem import config
from gitmem.audit import retention, review
from gitmem.audit.purge_proof import prove_purged
from gitmem.audit.redact import redact_pattern
from gitmem.audit.verify import verify
from gitmem.config import Retention
from gitmem.engine import ledger, proposals
from gitmem.engine.denylist import denied_reason, read_patterns
from gitmem.engine.transfer import export_bundle, export_jsonl, import_jsonl
from gitmem.errors import GuardRejectedError
from gitmem.ids import new_id
from gitmem.model.versions import KNOWN_TRAILERS, parse_trailers
from gitmem.push.clone import clone, fetch
from gitmem.push.replica import add_replica, init_replica, push_replicas
from gitmem.sessions.revert import revert_session
from gitmem.store import Store, restore_store

DAY = 86400
ROOT = Path(gitmem.__file__).parent


def word(seed: int) -> str:
    rng = random.Random(seed)
    return "codeword-" + "".join(rng.choice(string.ascii_lowercase) for _ in range(14))


def token(seed: int) -> str:
    """A GitHub-token-shaped string built at run time (the guard finds it)."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    while True:
        body = "".join(rng.choice(alphabet) for _ in range(36))
        if (
            any(c.isdigit() for c in body)
            and any(c.isupper() for c in body)
            and any(c.islower() for c in body)
        ):
            return "ghp_" + body


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout


@dataclass
class Built:
    """The store that used every feature, and what each feature left to look for."""

    root: Path
    store: Store
    #: texts that were redacted (or erased): they must be in no object of any copy
    secrets: dict[str, bytes] = field(default_factory=dict)
    #: feature -> (scope, path, content) that must read back the same from every copy
    live: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    #: feature -> refs it left (they must survive a bundle restore)
    refs: dict[str, list[str]] = field(default_factory=dict)
    #: feature -> trailers its commits carry (they must be in the restored store)
    trailers: dict[str, list[str]] = field(default_factory=dict)
    #: feature -> ledger kinds it wrote
    kinds: dict[str, list[str]] = field(default_factory=dict)
    replica: Path | None = None
    clone: Path | None = None
    cells: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------- the features (rows)
def sync_clone(b: Built) -> None:
    """A plain fetch into the clone: it holds what is about to be rewritten."""
    assert b.clone is not None
    fetch(b.clone)
    # fast-forward main when it can; after a rewrite it stays on the old history until the purge
    subprocess.run(["git", "merge", "-q", "--ff-only", "origin/main"], cwd=b.clone, capture_output=True)


def f_scopes_and_forks(b: Built) -> None:
    s = b.store
    s.write("/notes/a.md", "alpha\n", actor="user:alice")
    s.write("/team.md", "standup 9:00\n", scope="team", actor="user:bob")
    git(s.path, "branch", "fork", "main")
    s.write("/notes/a.md", "alpha in the fork\n", scope="fork", actor="user:alice")
    b.live["scopes_and_forks"] = ("fork", "/notes/a.md", "alpha in the fork\n")
    b.refs["scopes_and_forks"] = ["refs/heads/main", "refs/heads/team", "refs/heads/fork"]


def f_guard_flag(b: Built) -> None:
    s = b.store
    s.update_settings(guard={"secrets": "flag"}, actor="user:admin")
    s.write("/flagged.md", f"deploy key {token(1)}\n", actor="user:alice")
    s.write("/flagged.md", "rotated\n", actor="user:alice")
    s.update_settings(guard={"secrets": "reject"}, actor="user:admin")
    b.trailers["guard_flag"] = ["Gitmem-Flag"]
    b.kinds["guard_flag"] = ["flag", "settings_changed"]
    b.live["guard_flag"] = ("main", "/flagged.md", "rotated\n")


def f_guard_reject(b: Built) -> None:
    s = b.store
    tip = s.core.tip("main")
    with pytest.raises(GuardRejectedError):
        s.write("/rejected.md", f"key {token(2)}\n", actor="user:alice")
    assert s.core.tip("main") == tip
    b.secrets["guard_reject"] = token(2).encode()  # refused: it must be in no object anywhere


def f_review(b: Built) -> None:
    s = b.store
    s.update_settings(acl={"review": {"main": ["session:*"]}}, actor="user:admin")
    s.write("/accepted.md", "proposed and accepted\n", session="sesn_acc")
    s.write("/rejected-p.md", "proposed and rejected\n", session="sesn_rej")
    s.write("/erased-p.md", f"proposed then erased {word(3)}\n", session="sesn_era")
    s.write("/open.md", "an open proposal\n", session="sesn_open")
    by_owner = {p.owner: p for p in proposals.proposals(s.core)}
    acc, rej, era, opn = (by_owner[n] for n in ("sesn_acc", "sesn_rej", "sesn_era", "sesn_open"))
    review.accept(s.core, acc.id, reviewer="user:rev")
    review.reject(s.core, rej.id, reviewer="user:rev", reason="no")
    sync_clone(b)
    review.erase(s.core, era.id, reviewer="user:rev", reason="leaked a codeword")
    b.secrets["review_erased"] = word(3).encode()
    b.live["review_accepted"] = ("main", "/accepted.md", "proposed and accepted\n")
    b.trailers["review_accepted"] = ["Gitmem-Reviewed-By"]
    b.kinds["review_accepted"] = ["proposal_accepted"]
    b.kinds["review_rejected"] = ["proposal_rejected"]
    b.kinds["review_erased"] = ["proposal_erased"]
    b.refs["review_open"] = [opn.ref]
    b.cells["open_proposal"] = opn.id


def f_redaction_by_version(b: Built) -> None:
    s = b.store
    v = s.write("/leak.md", f"the gate code is {word(4)}\n", actor="user:alice")
    s.write("/leak.md", "ask the desk\n", actor="user:alice")
    sync_clone(b)
    s.redact(v.id, reason="leak", actor="user:alice")
    b.secrets["redaction_by_version"] = word(4).encode()
    b.kinds["redaction_by_version"] = ["redaction"]


def f_redaction_by_pattern(b: Built) -> None:
    s = b.store
    secret = word(5)
    s.write("/p.md", f"pattern secret {secret} in team\n", scope="team", actor="user:bob")
    s.write("/p.md", "clean now\n", scope="team", actor="user:bob")
    s.write("/in-proposal.md", f"an agent saw {secret}\n", session="sesn_open")  # the open proposal
    sync_clone(b)
    redact_pattern(s.core, re.escape(secret), reason="pattern leak", actor="user:alice")
    b.secrets["redaction_by_pattern"] = secret.encode()
    b.kinds["redaction_by_pattern"] = ["redaction"]


def f_revert_session(b: Built) -> None:
    s = b.store
    s.write("/team.md", "standup moved\n", scope="team", session="sesn_oops")
    revert_session(s, "sesn_oops", actor="user:admin")
    b.live["revert_session"] = ("team", "/team.md", "standup 9:00\n")
    b.kinds["revert_session"] = ["revert_session"]


def f_plain_git_pushes(b: Built) -> None:
    s = b.store
    s.update_settings(
        acl={
            "review": {"main": ["session:*"]},
            "trust_push_actor": True,
            "trust_trailers": ["service:mirror"],
        },
        actor="user:admin",
    )
    work = b.root / "work"
    git(b.root, "clone", "-q", "-b", "team", str(s.path), str(work))
    (work / "pushed.md").write_text("by an untrusted pusher\n")
    git(work, "add", "pushed.md")
    git(work, "commit", "-qm", "plain commit")
    git(work, "push", "-q", "origin", "team")
    (work / "mirrored.md").write_text("by a trusted mirror\n")
    git(work, "add", "mirrored.md")
    msg = (
        "create /mirrored.md\n\n"
        f"Gitmem-Version: {new_id('memver')}\nGitmem-Memory: {new_id('mem')}\n"
        "Gitmem-Operation: created\nGitmem-Actor: service:mirror\n"
    )
    git(work, "commit", "-qm", msg)
    git(work, "push", "-q", "-o", "actor=service:mirror", "origin", "team")
    gitmem.open_store(s.path).close()  # the next gitmem process records the spooled pushes
    b.live["plain_git_pushes"] = ("team", "/mirrored.md", "by a trusted mirror\n")
    b.kinds["plain_git_pushes"] = ["push"]


def f_compaction(b: Built) -> None:
    s = b.store
    s.write("/old.md", "old one\n", scope="archive", actor="user:alice")
    s.write("/old.md", "old two\n", scope="archive", actor="user:alice")
    s.write("/old.md", "old three\n", scope="archive", actor="user:alice")
    s.write("/start.md", "start, again\n", actor="user:alice")
    s.update_settings(retention=Retention(min_days=10, max_days=30, keep_recent=1), actor="user:admin")
    sync_clone(b)
    result = retention.prune(s.core, actor="service:janitor", now=int(time.time()) + 400 * DAY)
    assert {c.scope for c in result.compactions} >= {"archive", "main"}, result.skipped
    s.update_settings(retention=Retention(), actor="user:admin")
    b.trailers["compaction"] = ["Gitmem-Compaction", "Gitmem-Snapshot"]
    b.kinds["compaction"] = ["compaction"]
    b.live["compaction"] = ("archive", "/old.md", "old three\n")


def f_replica(b: Built) -> None:
    # The replica is added first (see build); here it catches up and is checked.
    assert b.replica is not None
    results = push_replicas(b.store.path)
    assert all(r.ok for r in results), results


def f_hand_edit(b: Built) -> None:
    path = b.store.core.settings_path
    data = yaml.safe_load(path.read_text())
    data["description"] = "edited by hand"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    b.kinds["hand_edit"] = ["settings_changed"]


def f_archived(b: Built) -> None:
    b.store.update_settings(archived_at=config.now_rfc3339(), actor="user:admin")
    b.kinds["archived"] = ["archived"]


#: row name -> what builds it, in build order
FEATURES: dict[str, Callable[[Built], None]] = {
    # first: a compaction is skipped while a fork shares the history it would retire, or while a
    # proposal started on it (tests/audit/test_round_trip_bugs.py: a newer one is moved along)
    "compaction": f_compaction,
    "scopes_and_forks": f_scopes_and_forks,
    "guard_flag": f_guard_flag,
    "guard_reject": f_guard_reject,
    "review": f_review,
    "redaction_by_version": f_redaction_by_version,
    "redaction_by_pattern": f_redaction_by_pattern,
    "revert_session": f_revert_session,
    "plain_git_pushes": f_plain_git_pushes,
    "replica": f_replica,
    "hand_edit": f_hand_edit,
    "archived": f_archived,
}
#: the rows of the matrix (review contributes four)
ROWS = [
    *(f for f in FEATURES if f != "review"),
    "review_open",
    "review_accepted",
    "review_rejected",
    "review_erased",
]
CELLS = ["verify", "fsck", "reindex", "index", "bundle", "jsonl", "clone", "mirror", "replica"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    root = tmp_path_factory.mktemp("lifecycle")
    mp = pytest.MonkeyPatch()
    home = root / "home"
    home.mkdir()
    mp.setenv("HOME", str(home))
    mp.setenv("GITMEM_HOME", str(root / "workspace"))
    mp.setenv("GIT_CONFIG_NOSYSTEM", "1")
    mp.chdir(root)  # git (the replica's mirror push) needs a working directory that exists
    for k, v in (("NAME", "Tester"), ("EMAIL", "tester@example.com")):
        mp.setenv(f"GIT_AUTHOR_{k}", v)
        mp.setenv(f"GIT_COMMITTER_{k}", v)
    for var in ("GITMEM_ACTOR", "GITMEM_SESSION", "GIT_DIR", "GIT_WORK_TREE"):
        mp.delenv(var, raising=False)
    (home / ".gitconfig").write_text('[init]\n\tdefaultBranch = main\n[protocol "file"]\n\tallow = always\n')
    store = gitmem.create_store("life", description="every feature", home=root / "workspace")
    b = Built(root, store)
    b.replica = init_replica(root / "replica.git")
    add_replica(store.core, str(b.replica))
    store.write("/start.md", "start\n", actor="user:alice")
    b.clone = root / "clone"
    clone(str(store.path), b.clone)  # cloned before the rewrites: it holds every secret then
    for build in FEATURES.values():
        build(b)
    try:
        yield b
    finally:
        store.close()
        mp.undo()


def _all_objects(git_dir: Path) -> bytes:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", "cat-file", "--batch-all-objects", "--batch"],
        capture_output=True,
        check=True,
    ).stdout


def _refs(path: Path) -> dict[str, str]:
    repo = pygit2.Repository(str(path))
    try:
        return {n: str(repo.references[n].target) for n in repo.references}
    finally:
        repo.free()


def _cell(b: Built, name: str) -> Any:
    """Each lifecycle step runs once; every row then checks its part of the outcome."""
    if name in b.cells:
        return b.cells[name]
    s = b.store
    if name == "verify":
        out: Any = verify(s.core, raise_on_failure=False)
    elif name == "fsck":
        out = subprocess.run(
            ["git", f"--git-dir={s.path}", "fsck", "--full", "--strict"], capture_output=True, text=True
        )
    elif name == "reindex":
        queries = [
            "SELECT scope, id, memory_id, path, operation, actor, session, blob FROM versions ORDER BY 1, 2",
            "SELECT * FROM heads ORDER BY 1, 2",
            "SELECT * FROM redacted ORDER BY 1",
        ]
        s.core.index.ensure_all()
        incremental = [s.core.index.db.execute(q).fetchall() for q in queries]
        s.core.index.rebuild()
        out = (incremental, [s.core.index.db.execute(q).fetchall() for q in queries])
    elif name == "bundle":
        bundle = b.root / "life.bundle"
        export_bundle(s.core, bundle)
        backup = b.root / "backup"
        backup.mkdir()
        shutil.copy2(s.core.settings_path, backup)
        for f in ("secret", "denylist", "ledger_head", "receipts.jsonl", "denypatterns"):
            if (s.path / "gitmem" / f).exists():
                shutil.copy2(s.path / "gitmem" / f, backup)
        shutil.copytree(s.path / "gitmem" / "proposals", backup / "proposals")
        other = b.root / "restored"
        restored = restore_store("life", bundle, backup=backup, home=other)
        out = (restored, other / "stores")
    elif name == "jsonl":
        dump = b.root / "life.jsonl"
        with dump.open("w", encoding="utf-8") as fh:
            export_jsonl(s.core, fh)
        target = gitmem.create_store("imported", home=b.root / "imported")
        with dump.open("rb") as fh:
            import_jsonl(target.core, fh, actor="user:importer")
        out = (target, dump.read_bytes())
    elif name == "clone":
        assert b.clone is not None
        first = fetch(b.clone)  # a plain fetch first: the purge must still find the old history
        purged = fetch(b.clone, purge=True)
        out = (first, purged, _all_objects(b.clone / ".git"))
    elif name == "mirror":
        mirror = b.root / "mirror.git"
        git(b.root, "clone", "-q", "--mirror", str(s.path), str(mirror))
        out = (_all_objects(mirror), _refs(mirror))
    elif name == "replica":
        assert b.replica is not None
        out = (_all_objects(b.replica), prove_purged(b.replica, secrets=list(b.secrets.values())))
    else:  # pragma: no cover
        raise AssertionError(name)
    b.cells[name] = out
    return out


def _read(store_path: Path, scope: str, path: str) -> str:
    with gitmem.open_store(store_path) as s:
        return s.read(path, scope=scope).content


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("row", ROWS)
def test_lifecycle(built: Built, row: str, cell: str) -> None:
    b = built
    secret = b.secrets.get(row)
    live = b.live.get(row)
    if cell == "verify":
        report = _cell(b, "verify")
        assert report.ok, [c for c in report.checks if not c.ok]
        if secret is not None:
            assert prove_purged(b.store.path, secrets=[secret]).ok
    elif cell == "fsck":
        res = _cell(b, "fsck")
        assert res.returncode == 0, res.stdout + res.stderr
    elif cell == "reindex":
        incremental, rebuilt = _cell(b, "reindex")
        assert incremental == rebuilt
        if live is not None:
            assert b.store.read(live[1], scope=live[0]).content == live[2]
    elif cell == "index":
        # the index and search: no redacted text in the index files (WAL included), no hit for it
        if secret is not None:
            text = secret.decode()
            for scope in b.store.scopes():
                assert b.store.search(re.split(r"[-_]", text)[-1], scope=scope) == [], scope
            for f in b.store.path.joinpath("gitmem").glob("index.sqlite*"):
                assert secret not in f.read_bytes(), f.name
    elif cell == "bundle":
        restored, stores = _cell(b, "bundle")
        assert restored.verify.ok, [c for c in restored.verify.checks if not c.ok]
        path = stores / "life.git"
        if not path.exists():
            path = next(stores.iterdir())
        got = _refs(path)
        for ref in b.refs.get(row, []):
            assert got.get(ref) == str(b.store.core.repo.references[ref].target), ref
        if live is not None:
            assert _read(path, live[0], live[1]) == live[2]
        if secret is not None:
            assert secret not in _all_objects(path)
        messages = subprocess.run(
            ["git", f"--git-dir={path}", "log", "--all", "--format=%B"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for t in b.trailers.get(row, []):
            assert f"\n{t}: " in "\n" + messages, t
        with gitmem.open_store(path) as copy:
            for kind in b.kinds.get(row, []):
                assert ledger.entries(copy.core, kind=kind), kind
            if row == "redaction_by_pattern" and secret is not None:
                # the remembered pattern came back with the backup: the restored store's write
                # path refuses the text (the store itself is archived: writes are refused anyway)
                data = f"again {secret.decode()}\n".encode()
                why = denied_reason(frozenset(), read_patterns(copy.path), "/again.md", data)
                assert why is not None and "redacted pattern" in why
            for f in ("secret", "denylist", "denypatterns"):
                mode = stat.S_IMODE(os.stat(path / "gitmem" / f).st_mode)
                assert mode == 0o600, (f, oct(mode))
    elif cell == "jsonl":
        target, dump = _cell(b, "jsonl")
        if secret is not None:
            assert secret not in dump
            assert prove_purged(target.path, secrets=[secret]).ok
        if live is not None:
            assert target.read(live[1], scope=live[0]).content == live[2]
        assert verify(target.core, raise_on_failure=False).ok
    elif cell == "clone":
        first, purged, objects = _cell(b, "clone")
        assert purged.purged > 0  # the rewrites removed history the clone had
        del first
        if secret is not None:
            assert secret not in objects
        assert prove_purged(b.clone, secrets=list(b.secrets.values())).ok  # type: ignore[arg-type]
        if live is not None:
            assert _read(b.clone, live[0], live[1]) == live[2]  # type: ignore[arg-type]
    elif cell == "mirror":
        # a fresh `git clone --mirror` of the store: every ref it serves, none of the purged text
        objects, refs = _cell(b, "mirror")
        if secret is not None:
            assert secret not in objects
        for ref in b.refs.get(row, []):
            assert refs.get(ref) == str(b.store.core.repo.references[ref].target), ref
    elif cell == "replica":
        objects, proof = _cell(b, "replica")
        assert proof.ok, proof.reason()
        if secret is not None:
            assert secret not in objects
        replica_refs = _refs(b.replica)  # type: ignore[arg-type]
        for ref in b.refs.get(row, []):
            if ref.startswith("refs/heads/"):
                assert replica_refs.get(ref) == str(b.store.core.repo.references[ref].target), ref


# Batch operation names the ``op="..."`` scan also finds (gitmem.engine.batch.BatchOp).
BATCH_OPS = {"write", "create", "delete", "rename", "str_replace", "insert"}
# Ledger kinds written only in another store's ledger than the one built here, with where their
# round trip is checked.
ELSEWHERE = {
    "store_copied": "the copy's own ledger (a dream's create_new): tests/engine/test_copying.py verifies copies",
}


def test_every_feature_has_a_row(built: Built) -> None:
    """Every ledger kind the code writes, every trailer gitmem knows and every ref namespace of
    the built store is exercised by some row: a new feature without a row fails here."""
    source = "\n".join(p.read_text(encoding="utf-8") for p in ROOT.rglob("*.py"))
    kinds = set(re.findall(r"ledger\.append\(\s*[\w.]+,\s*\"([a-z_]+)\"", source))
    kinds |= set(re.findall(r"\bop=\"([a-z_]+)\"", source))
    kinds |= set(re.findall(r"record_settings_change\([^)]*kind=\"([a-z_]+)\"", source))
    kinds -= BATCH_OPS  # ``op="write"`` also names a batch operation, which is no ledger kind
    seen = {e.kind for e in ledger.entries(built.store.core)}
    missing_kinds = sorted(kinds - seen - {"store_created"} - set(ELSEWHERE))
    assert missing_kinds == [], f"ledger kinds no row exercises: {missing_kinds}"
    covered = {k for ks in built.kinds.values() for k in ks}
    assert seen - {"store_created"} <= covered, (
        f"ledger kinds no row checks: {sorted(seen - covered - {'store_created'})}"
    )
    messages = subprocess.run(
        ["git", f"--git-dir={built.store.path}", "log", "--all", "--format=%B%x00"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\x00")
    trailers = {k for m in messages for k in parse_trailers(m)}
    assert sorted(set(KNOWN_TRAILERS) - trailers) == [], "trailers no row writes"
    checked = {t for ts in built.trailers.values() for t in ts} | {
        "Gitmem-Version",
        "Gitmem-Memory",
        "Gitmem-Operation",
        "Gitmem-Session",
        "Gitmem-Actor",
        "Gitmem-Reverts",
    }
    assert set(KNOWN_TRAILERS) <= checked, "trailers no row checks"
    namespaces = {
        n.rsplit("/", 1)[0] if n.startswith("refs/gitmem/proposals/") else n for n in _refs(built.store.path)
    }
    namespaces = {re.sub(r"^(refs/gitmem/proposals)/.*", r"\1", n) for n in namespaces}
    namespaces = {re.sub(r"^refs/heads/.*", "refs/heads", n) for n in namespaces}
    # refs/gitmem/checkpoints (the transparency log) is checked by every verify cell: verify's
    # "transparency log" check runs on the store, the restored copy and the clone
    assert namespaces <= {
        "refs/heads", "refs/gitmem/ledger", "refs/gitmem/proposals", "refs/gitmem/checkpoints"
    }, namespaces  # fmt: skip
    assert set(FEATURES) | {"review_open", "review_accepted", "review_rejected", "review_erased"} >= set(ROWS)
