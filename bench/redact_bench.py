#!/usr/bin/env python3
"""Redaction time against ``git filter-repo`` doing the same replacement on a copy of the same store.

    python bench/redact_bench.py [--versions 100000] [--memories 10000] [--json out.json]
    python bench/redact_bench.py --quick [--no-compare]   # small store, seconds (CI smoke)

Three cases on the cached generated store (bench/common.py): a superseded version near the start of
history (nearly every commit is rewritten), one near the end (a few commits), and the early one
when a second scope holds the same content too (one redaction covers both scopes). gitmem's time is the
whole ``redact()``: rewrite, ledger, index, purge and the ``git cat-file`` proof. filter-repo's time is
``git filter-repo --blob-callback`` replacing the same blob, including its own cleanup (reflog expire,
gc); afterwards the blob must be gone there too. Target (docs/architecture.md#performance-targets): gitmem <= 0.5x.

git-filter-repo is needed in the bench environment only: the ``dev`` extra installs it (``make
bench-all`` uses that venv; or ``pip install git-filter-repo``, or point ``--filter-repo`` at a
directory holding ``git_filter_repo.py``). Without it the run stops before building anything and says
so; ``--no-compare`` measures gitmem's side alone.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pygit2  # noqa: E402

import gitmem  # noqa: E402
from bench.common import CACHE_DIR, Result, Spec, cached_store, table, work_copy  # noqa: E402
from gitmem.audit import redact  # noqa: E402


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def filter_repo_cmd(where: str | None) -> list[str]:
    """How to run git-filter-repo: on PATH, importable, or from ``where``."""
    env_path = os.pathsep.join(p for p in (where, os.environ.get("PYTHONPATH")) if p)
    probe = subprocess.run(
        [sys.executable, "-c", "import git_filter_repo"],
        env=dict(os.environ, PYTHONPATH=env_path),
        capture_output=True,
        check=False,
    )
    if probe.returncode == 0:
        os.environ["PYTHONPATH"] = env_path
        return [sys.executable, "-m", "git_filter_repo"]
    if shutil.which("git-filter-repo"):
        return ["git-filter-repo"]
    sys.exit(
        "git-filter-repo is not installed, and the comparison needs it: pip install -e '.[dev]' (or pip "
        "install git-filter-repo; --filter-repo DIR: a directory holding git_filter_repo.py), or run with "
        "--no-compare for gitmem's figures alone"
    )


def pick_versions(path: Path) -> dict[str, tuple[str, str]]:
    """(version id, blob) of a superseded version near the start and one near the end."""
    with gitmem.open_store(path) as store:
        store.core.index.ensure_all()
        db = store.core.index.db
        heads = "SELECT blob FROM heads"
        early = db.execute(
            f"SELECT id, blob FROM versions WHERE blob NOT IN ({heads}) ORDER BY seq LIMIT 1"
        ).fetchone()
        late = db.execute(
            f"SELECT id, blob FROM versions WHERE blob NOT IN ({heads}) ORDER BY seq DESC LIMIT 1"
        ).fetchone()
    return {"early": (early[0], early[1]), "recent": (late[0], late[1])}


def gone(path: Path, oid: str) -> bool:
    res = subprocess.run(
        ["git", f"--git-dir={path}", "cat-file", "-e", oid], capture_output=True, check=False
    )
    return res.returncode != 0


def run_gitmem(path: Path, version: str, scopes: list[str]) -> float:
    with gitmem.open_store(path) as store:
        t = time.perf_counter()
        r = redact.redact(store.core, version, reason="bench")
        elapsed = time.perf_counter() - t
        assert r.scopes == scopes, r.scopes
        return elapsed


def add_second_scope(path: Path, blob: str) -> None:
    """A scope ``alice`` that also held ``blob`` (then overwrote it): the redaction covers it too."""
    with gitmem.open_store(path) as store:
        data = store.core.blob_data(pygit2.Oid(hex=blob))
        store.write("/copied.md", data, scope="alice", actor="user:alice")
        store.write("/copied.md", "overwritten\n", scope="alice", actor="user:alice")
        store.core.index.ensure_all()


def run_filter_repo(cmd: list[str], path: Path, blob: str) -> float:
    callback = f"if blob.original_id == b'{blob}':\n  blob.data = b'[redacted]'"
    t = time.perf_counter()
    subprocess.run(
        [*cmd, "--force", "--quiet", "--blob-callback", callback], cwd=path, check=True, capture_output=True
    )
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--versions", type=int, default=None, help="commits (default 100000; 2000 with --quick)")
    ap.add_argument("--memories", type=int, default=None, help="memories (default 10000; 200 with --quick)")
    ap.add_argument("--quick", action="store_true", help="a small store: a smoke run in seconds")
    ap.add_argument("--no-compare", action="store_true", help="skip git filter-repo (gitmem's figures only)")
    ap.add_argument("--filter-repo", default=None, help="directory holding git_filter_repo.py")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--cache", type=Path, default=CACHE_DIR, help="where generated stores are kept")
    args = ap.parse_args()
    versions = args.versions or (2000 if args.quick else 100_000)
    memories = args.memories or (200 if args.quick else 10_000)
    cmd = None if args.no_compare else filter_repo_cmd(args.filter_repo)
    built = cached_store(Spec(memories, versions), cache=args.cache, log=_log)
    targets = pick_versions(built.path)
    cases = [(case, version, blob, False) for case, (version, blob) in targets.items()]
    cases.append(("early, 2 scopes", *targets["early"], True))
    results = []
    with tempfile.TemporaryDirectory(dir=args.cache) as tmp:
        for case, version, blob, two_scopes in cases:
            ours = work_copy(built, Path(tmp) / "gitmem")
            if two_scopes:
                add_second_scope(ours, blob)
            _log(f"{case}: gitmem redact {version} ...")
            g = run_gitmem(ours, version, ["alice", "main"] if two_scopes else ["main"])
            assert gone(ours, blob)
            label = f"redact, {case} blob, {versions // 1000}k commits"
            if cmd is None:
                results.append(Result(label, g, g, "gitmem itself (no comparison)", None, "--no-compare"))
            else:
                theirs = work_copy(built, Path(tmp) / "filter-repo")
                if two_scopes:
                    add_second_scope(theirs, blob)
                _log(f"{case}: git filter-repo ...")
                f = run_filter_repo(cmd, theirs, blob)
                assert gone(theirs, blob), "filter-repo left the blob in the store"
                results.append(Result(label, g, f, "git filter-repo", 0.5))
                shutil.rmtree(theirs)
            shutil.rmtree(ours)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps([r.to_dict() for r in results], indent=2))


if __name__ == "__main__":
    main()
