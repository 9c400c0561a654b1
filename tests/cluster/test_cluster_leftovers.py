"""What a node killed mid-replication leaves in a copy is cleared (gitmem/cluster/leftovers.py):
its bundle directory is inside the store (``gitmem/tmp/bundle-*``, never the system's temporary
directory) and swept once unlocked and old, at the next replication and at node start, never while
a live process holds it; every lock and temporary file git leaves (a ref's, the fetch's
``refs/gitmem-incoming/`` ones, ``HEAD.lock``, ``packed-refs.lock`` and ``.new``, ``config.lock``,
``shallow.lock``) is removed once stale, and a young one is left."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import gitmem
from gitmem.cluster import leftovers, replication
from gitmem.cluster.node import ClusterNode
from gitmem.cluster.state import ClusterState
from gitmem.errors import IntegrityError
from gitmem.store import STORE_TMP_DIR
from tests.cluster.test_cluster_stale_lock import _commit, _level

ROOT = Path(__file__).resolve().parents[2]
LONG_AGO = 3600.0


def _repos(tmp_path: Path) -> tuple[Path, Path, Path]:
    home, copy, work = tmp_path / "home.git", tmp_path / "copy.git", tmp_path / "work"
    subprocess.run(["git", "init", "-q", "--bare", str(home)], check=True)
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    _commit(home, work, "a.md")
    return home, copy, work


def _backdate(path: Path, seconds: float = LONG_AGO) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old))


def _killed_at(point: str, code: str, tmp: Path) -> None:
    """Run ``code`` in a child whose TMPDIR is ``tmp``, SIGKILLed at fault point ``point``."""
    env = {**os.environ, "GITMEM_FAULT": point, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, timeout=300, check=False
    )
    assert proc.returncode == -9, (proc.returncode, proc.stderr.decode()[-2000:])


def _bundles(git_dir: Path) -> list[Path]:
    return sorted((git_dir / STORE_TMP_DIR).glob("bundle-*"))


def test_a_node_killed_mid_replication_leaves_its_bundle_in_the_store_and_it_is_swept(tmp_path: Path) -> None:
    home, copy, work = _repos(tmp_path)
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    # the home, killed with its bundle made
    _killed_at(
        "cluster.bundle-made",
        f"from pathlib import Path; from gitmem.cluster import replication; "
        f"replication.make_bundle(Path({str(home)!r}), {{}})",
        system_tmp,
    )
    assert list(system_tmp.iterdir()) == []  # nothing in the system's temporary directory
    [left] = _bundles(home)
    assert (left / "b.bundle").is_file()
    # the next replication from that copy sweeps it at once: a bundle-* directory no live process
    # holds is a killed one's, whatever its age (it is flocked before it gets that name); it leaves
    # only its own, removed after
    bundle = replication.make_bundle(home, {}) or b""
    assert not left.exists() and _bundles(home) == []
    # the replica, killed with the bundle it received written
    refs = replication.refs_of(home)
    _killed_at(
        "cluster.bundle-received",
        f"from pathlib import Path; from gitmem.cluster import replication; import base64; "
        f"replication.apply(Path({str(copy)!r}), base64.b64decode({_b64(bundle)!r}), {refs!r}, {{}})",
        system_tmp,
    )
    assert list(system_tmp.iterdir()) == []
    [left] = _bundles(copy)
    _level(home, copy)  # the next replication into it sweeps it and brings the copy level
    assert _bundles(copy) == [] and replication.refs_of(copy) == replication.refs_of(home)


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


def test_a_bundle_directory_a_live_process_holds_is_never_swept(tmp_path: Path) -> None:
    home, _copy, _work = _repos(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from pathlib import Path; from gitmem.cluster import leftovers\n"
         f"with leftovers.bundle_dir(Path({str(home)!r})) as d:\n"
         "    print(d, flush=True); sys.stdin.readline()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdin is not None
        held = Path(holder.stdout.readline().strip())
        assert held.parent == home / STORE_TMP_DIR
        _backdate(held)  # old, but flocked by a live process
        assert leftovers.sweep_bundles(home) == [] and held.is_dir()
        replication.make_bundle(home, {})  # a replication's own sweep leaves it too
        assert held.is_dir()
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=60) == 0
        assert not held.exists()  # its holder removed it
    finally:
        holder.kill()
        holder.wait()


def test_a_node_sweeps_its_copies_leftover_bundles_when_it_starts(database: str, tmp_path: Path) -> None:
    with ClusterState(database) as s:
        s.init()
    home = tmp_path / "n0"
    home.mkdir()
    created = gitmem.create_store("notes", home=home)
    path = created.path
    created.close()
    killed = path / STORE_TMP_DIR / "bundle-killed"  # named once flocked: a killed one's
    stale = path / STORE_TMP_DIR / "new-bundle-killed"  # killed before its flock, long ago
    young = path / STORE_TMP_DIR / "new-bundle-young"  # a live one's, an instant before its flock
    for d in (killed, stale, young):
        d.mkdir(parents=True)
        (d / "b.bundle").write_bytes(b"x" * 100)
    _backdate(stale)
    node = ClusterNode(home, database, "n0", "http://127.0.0.1:9", heartbeat_seconds=60)
    node.start()
    try:
        assert not killed.exists() and not stale.exists() and young.is_dir()
    finally:
        node.stop()


def test_every_stale_lock_git_leaves_is_cleared_and_a_young_one_left(tmp_path: Path) -> None:
    home, copy, work = _repos(tmp_path)
    _level(home, copy)
    # the replica holds a packed ref the home deleted: bringing it level rewrites packed-refs
    main = replication.refs_of(copy)["refs/heads/main"]
    subprocess.run(["git", f"--git-dir={copy}", "update-ref", "refs/heads/gone", main], check=True)
    subprocess.run(["git", f"--git-dir={copy}", "pack-refs", "--all"], check=True)
    _commit(home, work, "b.md")
    left = {  # what killed gits leave: the fetch's incoming ref lock, packed-refs' pair, and more
        "refs/gitmem-incoming/heads/main.lock": main + "\n",
        "packed-refs.lock": "",
        "packed-refs.new": "",
        "HEAD.lock": "ref: refs/heads/main\n",
        "config.lock": "[core]\n",
        "shallow.lock": "",
    }
    for rel, text in left.items():
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        (copy / rel).write_text(text)
    with pytest.raises(IntegrityError):  # young: a live git's, for all the replication knows
        _level(home, copy)
    assert all((copy / rel).exists() for rel in left)
    for rel in left:
        _backdate(copy / rel, 60)
    _level(home, copy)
    assert [rel for rel in left if (copy / rel).exists()] == []
    assert replication.refs_of(copy) == replication.refs_of(home)
    assert "refs/heads/gone" not in replication.refs_of(copy)
    # a young config.lock (a git config running now) is left alone
    (copy / "config.lock").write_text("[core]\n")
    assert "config.lock" not in replication.clear_stale_locks(copy)
    assert (copy / "config.lock").exists()
    _backdate(copy / "config.lock", 60)
    assert replication.clear_stale_locks(copy) == ["config.lock"]
