"""A redaction on the cluster leaves the secret in no object on any node: each replica purges the
deny-listed objects once its refs moved and proves it (the purge proof a clone's purge uses); an
unreachable replica keeps the purge pending ("verified" only once every replica proved it) and is
sent again until it holds."""

from __future__ import annotations

import subprocess
from pathlib import Path

import gitmem
from gitmem.audit.purge_proof import prove_purged
from gitmem.cluster import purges
from tests.cluster.test_cluster_nodes import cluster, halt, serving, the_copy

SECRET = b"the launch code is PURPLE-WALRUS-1917"


def test_a_redaction_is_purged_and_proved_on_every_replica(database: str, tmp_path: Path) -> None:
    with cluster(database, tmp_path, n=3, replicas=2) as nodes:
        n0, _n1, n2 = nodes
        store = gitmem.create_store("secrets", home=tmp_path / "n0")
        n0.node.tick()  # placed here, replicas on n1 and n2
        state = n0.node.state
        assert sorted(state.placement(store.settings.id).replicas) == ["n1", "n2"]
        home = store.path
        with gitmem.open_store(home) as s:
            s.write("/keep.md", "nothing to hide\n")
            s.write("/leak.md", SECRET.decode() + "\n")
            s.write("/leak.md", "the code was changed\n")  # the secret is only in history now
        n0.node.tick()
        copies = [the_copy(tmp_path / n) for n in ("n1", "n2")]
        for c in copies:  # the secret reached both replicas
            assert not prove_purged(c, secrets=[SECRET]).ok
        halt(n2, node=False)  # n2 stops answering; it still looks healthy
        with gitmem.open_store(home) as s:
            version = s.versions(path="/leak.md")[-1].id
            s.redact(version, reason="a leaked key")
        assert prove_purged(home, secrets=[SECRET]).ok
        n0.node.tick()
        assert prove_purged(copies[0], secrets=[SECRET]).ok  # n1 purged and proved it
        got = purges.status(state, store.settings.id, home)
        assert not got.verified and set(got.pending) == {"n2"}  # n2 blocks "verified"
        assert not prove_purged(copies[1], secrets=[SECRET]).ok
        back = serving(n2.node, start=False)  # n2 answers again: the home sends it again
        try:
            n0.node.tick()
            got = purges.status(state, store.settings.id, home)
            assert got.verified, got.pending
            for c in [home, *copies]:
                assert prove_purged(c, secrets=[SECRET]).ok, c
                fsck = subprocess.run(
                    ["git", f"--git-dir={c}", "fsck", "--full"], capture_output=True, text=True
                )
                assert fsck.returncode == 0, fsck.stderr
            with gitmem.open_store(copies[1]) as s:
                assert s.read("/leak.md").content == "the code was changed\n"  # type: ignore[union-attr]
        finally:
            halt(back, node=False)
        store.close()
