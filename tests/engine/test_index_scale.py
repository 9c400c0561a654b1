"""Index catch-up whatever a store's shape: a walk through big directories derives exactly what the
reference diff (``diff_trees``: Python under the threshold, libgit2 past it) derives, on random
histories with renames, deletes, nested directories and redaction marks; and the CI guard: a
catch-up of 5,000 commits into one directory costs at most 10x ``git log --raw`` over the same
commits, both timed in this test in CPU seconds (this process's against the git subprocesses',
from ``RUSAGE_CHILDREN``: a ratio, which a loaded machine moves far less than wall time)."""

from __future__ import annotations

import random
import resource
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pygit2
import pytest

from gitmem.git import logdiff, treediff
from gitmem.ids import derived_ulid
from gitmem.model.versions import format_message
from gitmem.store import Store
from tests.helpers import plain_commit


def _rows(store: Store) -> list[tuple[Any, ...]]:
    db = store.core.index.db
    versions = db.execute("SELECT * FROM versions ORDER BY seq").fetchall()
    heads = db.execute("SELECT * FROM heads ORDER BY scope, path").fetchall()
    stats = db.execute("SELECT scope, memories, bytes FROM scopes ORDER BY scope").fetchall()
    search = db.execute("SELECT scope, path, version_id FROM search_docs ORDER BY scope, path").fetchall()
    marks = db.execute("SELECT * FROM redacted ORDER BY version_id").fetchall()
    return [*versions, *heads, *stats, *search, *marks]


def _reference_changes(self: treediff.TreeDiffer, commit: pygit2.Commit) -> list[treediff.Change]:
    """What the walk's differ must give: ``diff_trees`` of the commit's first parent's tree and its tree."""
    repo = self._repo
    parent = repo[commit.parent_ids[0]].tree if commit.parent_ids else None  # type: ignore[attr-defined]
    return treediff.diff_trees(repo, parent, commit.tree)


@pytest.mark.parametrize("seed", [3, 4])
def test_catch_up_in_big_directories_derives_what_the_reference_diff_derives(
    store: Store, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    rng = random.Random(seed)
    seed_files = {f"bulk/memory-{i:04d}.md": f"seed {i}\n".encode() for i in range(620)}
    seed_files.update({f"bulk/nested/deeper/n{i}.md": f"nested {i}\n".encode() for i in range(5)})
    plain_commit(store, seed_files, message="import\n")
    live = sorted("/" + p for p in seed_files)
    for step in range(160):
        op = rng.random()
        path = rng.choice(live)
        if op < 0.35:
            store.write(path, f"edit {step}\n")
        elif op < 0.55:
            new = (
                f"/bulk/memory-{620 + step:04d}.md"
                if rng.random() < 0.7
                else f"/bulk/sub-{step % 3}/m{step}.md"
            )
            store.write(new, f"create {step}\n")
            live.append(new)
        elif op < 0.65:
            store.delete(path)
            live.remove(path)
        elif op < 0.75:
            new = f"/bulk/renamed-{step}.md" if rng.random() < 0.5 else f"/bulk/a/renamed-{step}.md"
            store.rename(path, new)
            live[live.index(path)] = new
        else:  # plain git: several changes at once, a move by content, a directory deleted whole
            changes: dict[str, bytes | None] = {}
            for p in rng.sample(live, 3):
                changes[p[1:]] = f"plain {step}\n".encode()
            victim = rng.choice([p for p in live if p not in changes and "/" + p[1:] not in changes])
            body = store.read(victim).content.encode()
            changes[victim[1:]] = None
            changes[f"bulk/moved-{step}.md"] = body
            live.remove(victim)
            live.append(f"/bulk/moved-{step}.md")
            if step % 5 == 0:
                nested = [p for p in live if p.startswith("/bulk/nested/")]
                for p in nested:
                    changes[p[1:]] = None
                    live.remove(p)
            plain_commit(store, changes, message=f"plain {step}\n")
    secret = store.write(live[0], "a secret\n")
    store.write(live[0], "no secret\n")
    store.redact(secret.id, reason="test")
    store.list("/")
    incremental = _rows(store)
    store.core.index.rebuild()
    walked = _rows(store)
    monkeypatch.setattr(treediff.TreeDiffer, "commit_changes", _reference_changes)
    store.core.index.rebuild()
    reference = _rows(store)
    assert walked == reference
    assert walked == incremental
    assert any(r[-1] for r in walked if len(r) == 2)  # the redaction mark is there


def _flat_stream(n: int) -> Iterator[bytes]:
    """``n`` commits into ``/bulk/``: creates with gitmem's trailers, then edits of random memories
    (a fifth of them), a few made with plain git."""
    rng = random.Random(1)
    creates = n - n // 5
    for k in range(n):
        memory = k if k < creates else rng.randrange(creates)
        path = f"/bulk/memory-{memory:05d}.md"
        when = 1_700_000_000 + k
        if k % 50 == 7:
            message = f"plain git {k}\n"
        else:
            version = "memver_" + derived_ulid(when * 1000, "guard", str(k))
            mid = "mem_" + derived_ulid(1_700_000_000_000, "guard-memory", str(memory))
            op = "created" if k < creates else "modified"
            message = format_message(op, path, version, mid, "service:guard", None)
        data = f"# memory {memory}\n\nversion {k} {'words ' * rng.randint(5, 60)}\n".encode()
        msg = message.encode()
        yield b"".join(
            (
                b"commit refs/heads/main\n",
                f"author service:guard <service:guard> {when} +0000\n".encode(),
                f"committer gitmem <gitmem> {when} +0000\n".encode(),
                f"data {len(msg)}\n".encode(),
                msg,
                f"M 100644 inline {path[1:]}\ndata {len(data)}\n".encode(),
                data,
                b"\n",
            )
        )
    yield b"done\n"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "in-process"])
def test_catch_up_of_5000_commits_in_one_directory_within_10x_git_log_raw(
    store: Store, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    """The CI guard (docs/performance.md, "Scale"), with the walk's changes streamed from
    ``git log --raw`` past its first commits (gitmem/git/logdiff.py) and with the in-process
    differ alone (its fallback). The catch-up costs about 1.7x git's CPU in process; a quadratic
    one (each commit re-reading its whole directory in Python: about 19x, measured) or a sixfold
    regression of the per-version cost fails, noise does not (CPU seconds of both, the catch-up's
    own git subprocesses included, git's best of three runs, two before the catch-up and one
    after, a bound of 10x). Not caught: a libgit2 diff of the whole directory per commit (about
    3.5x: git log --raw reads the whole directory per commit too); ``bench/rebuild_bench.py``
    measures the 3x target."""
    if not stream:
        monkeypatch.setattr(logdiff, "STREAM_AFTER", 10**9)
    n = 5000
    store.list("/")  # the store's index exists and is current at its first commit
    proc = subprocess.Popen(
        ["git", "-C", str(store.path), "fast-import", "--quiet", "--done"], stdin=subprocess.PIPE
    )
    assert proc.stdin is not None
    proc.stdin.write(b"".join(_flat_stream(n)))
    proc.stdin.close()
    assert proc.wait() == 0
    cmd = ["git", "-C", str(store.path), "log", "--raw", "--no-abbrev", "--format=%H%n%B", "refs/heads/main"]

    def git_log_cpu() -> float:
        before = _children_cpu()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
        return _children_cpu() - before

    git_cpu = [git_log_cpu(), git_log_cpu()]
    start, children, wall = time.process_time(), _children_cpu(), time.perf_counter()
    store.core.index.ensure("main")
    cpu = time.process_time() - start + _children_cpu() - children
    wall = time.perf_counter() - wall
    git_cpu.append(git_log_cpu())
    assert store.core.index.db.execute("SELECT COUNT(*) FROM versions").fetchone()[0] == n
    assert len(store.list("/bulk/")) == n - n // 5
    floor = min(git_cpu)
    assert cpu <= 10 * floor, f"catch-up {cpu:.2f} s CPU ({wall:.2f} s wall), git log --raw {floor:.2f} s CPU"
