"""The beat skips listing a store's refs while its ref generation is unchanged (gitmem/git/refgen.py,
gitmem/cluster/listing.py): an idle store costs no git run per beat; every library write and every
git push bumps the generation, so the next beat lists and sends it; a ref moved behind the
library's back is listed within the recheck time (30 s); and writes in quick succession (two ref moves
within one file-time tick, where mtimes would not tell) each reach the replica."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

import gitmem
from gitmem.cluster.replication import refs_of
from gitmem.cluster.tokens import ClusterTokenStore
from gitmem.git import refgen
from tests.cluster.test_cluster_nodes import cluster, the_copy


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow  # a real cluster, fifty beats, a clone and a push
def test_the_beat_lists_refs_only_when_the_ref_generation_moved(database: str, tmp_path: Path) -> None:
    with cluster(database, tmp_path, n=2) as nodes:
        n0, n1 = nodes
        node = n0.node
        node.heartbeat_seconds = 3600.0  # n0 beats only when the test says (tick)
        time.sleep(2.0)  # (the wait under way, 0.5 s, ends and the long one begins)
        home = gitmem.create_store("notes", home=tmp_path / "n0").path
        with gitmem.open_store(home) as s:
            s.write("/a.md", "a\n")
        node.tick()
        replica = the_copy(tmp_path / "n1")
        assert refs_of(replica) == refs_of(home)
        assert refgen.read(home) is None  # written before the store was fenced: no token, readers list
        with gitmem.open_store(home) as s:
            s.write("/a2.md", "a2\n")
        assert refgen.read(home) is not None  # fenced now: the write bumped it
        node.tick()
        assert refs_of(replica) == refs_of(home)

        def beat() -> tuple[int, int]:
            listed, skipped = node.listings.listed, node.listings.skipped
            node.tick()
            return node.listings.listed - listed, node.listings.skipped - skipped

        assert [beat() for _ in range(5)] == [(0, 1)] * 5  # idle: no git run at all
        # every write is listed at the next beat and reaches the replica, however close together
        for i in range(20):
            with gitmem.open_store(home) as s:
                s.write(f"/quick/{i}.md", f"{i}\n")
                s.write(f"/quick/{i}.md", f"{i} again\n")  # two ref moves within a few ms
            assert beat() == (1, 0)
            assert refs_of(replica) == refs_of(home), i
        # a git push (receive-pack moves the refs; post-receive bumps the generation)
        _t, secret = ClusterTokenStore(node.state).create(actor="user:carol", stores={"notes": "rw"})
        work = tmp_path / "clone"
        via = n1.url.replace("http://", f"http://x:{secret}@") + "/git/notes.git"
        res = _git("clone", "-q", via, str(work))
        assert res.returncode == 0, res.stderr
        (work / "pushed.md").write_text("pushed\n")
        _git("-C", str(work), "add", "pushed.md")
        _git("-C", str(work), "-c", "user.name=c", "-c", "user.email=c@example.com", "commit", "-qm", "p")
        before = refgen.read(home)
        res = _git("-C", str(work), "push", "-q", "origin", "main")
        assert res.returncode == 0, res.stderr
        assert refgen.read(home) != before
        assert beat()[0] == 1
        assert refs_of(replica) == refs_of(home)
        with gitmem.open_store(replica) as copy:
            assert copy.read("/pushed.md").content == "pushed\n"  # type: ignore[union-attr]
        # a ref moved behind the library's back (no bump) is listed within the recheck time
        node.listings.forget(node.state.resolve("notes").store_id)
        assert beat() == (1, 0)  # (a fresh listing now, reused while it is young)
        tip = refs_of(home)["refs/heads/main"]
        res = _git(f"--git-dir={home}", "update-ref", "refs/heads/operator", tip)
        assert res.returncode == 0, res.stderr
        assert beat() == (0, 1)  # not counted: the listing is reused (it is younger than 30 s) ...
        assert "refs/heads/operator" not in refs_of(replica)
        node.listings.recheck_seconds = 0.0  # ... until it is older than the recheck time
        assert beat() == (1, 0)
        assert refs_of(replica) == refs_of(home)
