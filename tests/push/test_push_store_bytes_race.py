"""max_store_bytes holds under concurrent plain-git pushes (issue 26: 22,500 bytes were stored
against a 10,000 limit): pushes that add bytes to a store with the limit check and land one at a
time, so the limit is never overshot."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import gitmem
from gitmem.config import Limits


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_concurrent_pushes_never_overshoot_max_store_bytes(workspace: Path, tmp_path: Path) -> None:
    limits = Limits(max_memory_bytes=5000, max_store_bytes=10_000)
    with gitmem.create_store("tight", limits=limits, home=workspace) as store:
        store.write("/seed.md", "s\n", actor="user:alice")
        path = store.path
    n = 9
    works = []
    for i in range(n):
        work = tmp_path / f"w{i}"
        assert git(tmp_path, "clone", "-q", str(path), str(work)).returncode == 0
        (work / f"f{i}.md").write_text(chr(ord("a") + i) * 2500)
        git(work, "add", ".")
        assert git(work, "commit", "-qm", f"add f{i}").returncode == 0
        works.append(work)
    results: dict[int, subprocess.CompletedProcess[str]] = {}
    start = threading.Barrier(n)

    def push(i: int) -> None:
        start.wait()
        results[i] = git(works[i], "push", "origin", f"HEAD:refs/heads/s{i}")

    threads = [threading.Thread(target=push, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    landed = [i for i, r in results.items() if r.returncode == 0]
    refused = [r for r in results.values() if r.returncode != 0]
    assert all("max_store_bytes" in r.stderr or "limit" in r.stderr for r in refused), [
        r.stderr for r in refused
    ]
    with gitmem.open_store(path) as s:
        s.core.index.ensure_all()
        total = s.core.index.store_bytes()
    assert total <= 10_000, (total, landed)
    assert len(landed) == 3  # 2 + 3 x 2,500 fits; a fourth would not
