"""A redaction on the cluster leaves the secret in no object on any node: each replica purges the
deny-listed objects once its refs moved and proves it (the purge proof a clone's purge uses); an
unreachable replica keeps the purge pending ("verified" only once every replica proved it) and is
sent again until it holds."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import gitmem
from gitmem.audit.purge_proof import prove_purged
from gitmem.cluster import purges
from tests.cluster.test_cluster_nodes import cluster, halt, hang, serving, the_copy

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


def _redact(url: str, secret: str, sid: str, vid: str) -> tuple[dict[str, object], float]:
    import time

    import httpx2 as httpx

    headers = {"authorization": f"Bearer {secret}", "anthropic-version": "2023-06-01",
               "anthropic-beta": "managed-agents-2026-04-01"}  # fmt: skip
    started = time.monotonic()
    reply = httpx.post(
        f"{url}/v1/memory_stores/{sid}/memory_versions/{vid}/redact", headers=headers, json={}, timeout=300
    )
    assert reply.status_code == 200, reply.text
    return reply.json(), time.monotonic() - started


def test_the_redaction_answer_says_verified_only_once_every_replica_proved_it(
    database: str, tmp_path: Path
) -> None:
    """The redaction's own answer (through a node that is not the home) carries the cluster-wide
    purge state: pending on a replica that accepts connections but never answers (the answer comes
    back within the settle time, not the replication's 120 s read timeout), verified once every
    replica proved the purge."""

    from gitmem.cluster.tokens import ClusterTokenStore

    with cluster(database, tmp_path, n=3, replicas=2) as nodes:
        n0, n1, n2 = nodes
        store = gitmem.create_store("secrets", home=tmp_path / "n0")
        n0.node.tick()
        sid = store.settings.id
        with gitmem.open_store(store.path) as s:
            s.write("/leak.md", SECRET.decode() + "\n")
            s.write("/leak.md", "the code was changed\n")
            s.write("/leak2.md", "second secret ORANGE-OTTER-2026\n")
            s.write("/leak2.md", "gone too\n")
            first = s.versions(path="/leak.md")[-1].id
            second = s.versions(path="/leak2.md")[-1].id
        n0.node.tick()
        _t, admin = ClusterTokenStore(n0.node.state).create(actor="user:admin", admin=True)
        hung = hang(n2)  # n2 still beats (healthy), but its port now hangs every request
        try:
            answer, took = _redact(n1.url, admin, sid, first)
        finally:
            hung.close()  # the connections queued there are reset: the replication gives up
        assert answer["redacted_at"] and answer["purge"] == {
            "verified": False,
            "pending": {"n2": "has not proved the current deny-list yet (down, or not yet sent)"},
        }, answer
        assert took < 60.0, took  # bounded by the settle wait (10 s), not the hung read (120 s)
        assert prove_purged(the_copy(tmp_path / "n1"), secrets=[SECRET]).ok
        # (the hung replication held the store's lock, and so n0's beat: one beat renews its fence)
        n0.node.tick()
        back = serving(n2.node, start=False)
        try:
            answer, _took = _redact(n1.url, admin, sid, second)
            assert answer["purge"] == {"verified": True, "pending": {}}, answer
            for name in ("n0", "n1", "n2"):
                copy = the_copy(tmp_path / name)
                assert prove_purged(copy, secrets=[SECRET, b"ORANGE-OTTER-2026"]).ok, name
        finally:
            halt(back, node=False)
        store.close()


@pytest.mark.slow  # a real cluster, failed over
def test_a_redaction_drops_the_lost_tail_bundle_that_kept_the_secret(database: str, tmp_path: Path) -> None:
    """An async failover's tail, kept in a bundle on the old home, held a secret; a redaction at
    the new home retires that blob: the old home drops the bundle (a report beside it, the lost
    writes say so), and its purge is proved and verified only once no bundle keeps it."""
    import json
    import time

    from gitmem.cluster import handoff
    from gitmem.cluster.node import ClusterNode
    from gitmem.cluster.replication import refs_of

    def until(check: object, what: str, seconds: float = 180) -> None:
        deadline = time.monotonic() + seconds
        while not check():  # type: ignore[operator]
            assert time.monotonic() < deadline, what
            time.sleep(0.05)

    with cluster(database, tmp_path, n=2, lease_seconds=8.0, healthy_seconds=3.0) as nodes:
        n0, n1 = nodes
        state = n0.node.state
        store = gitmem.create_store("tail", home=tmp_path / "n0")
        sid = store.settings.id
        store.close()
        n0.node.tick()
        old_home = the_copy(tmp_path / "n0")
        with gitmem.open_store(old_home) as s:
            s.write("/r0.md", "replicated\n")
        n0.node.tick()
        n0.node.stop()  # the home stops beating; its tail (a secret in it) is never sent
        with gitmem.open_store(old_home) as s:
            s.write("/tail-secret.md", SECRET.decode() + "\n")
            s.write("/tail-ok.md", "harmless\n")
        blob = subprocess.run(
            ["git", f"--git-dir={old_home}", "rev-parse", "refs/heads/main:tail-secret.md"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        halt(n0)
        until(lambda: n1.node.failovers, "the replica never took over")
        new_home = the_copy(tmp_path / "n1")
        back = serving(ClusterNode(tmp_path / "n0", database, "n0", n0.url, heartbeat_seconds=0.5,
                                   lease_seconds=8.0, healthy_seconds=3.0))  # fmt: skip
        try:
            until(lambda: refs_of(old_home) == refs_of(new_home), "the old home was never brought level")
            until(lambda: handoff.lost_writes(state, sid), "the tail was not reported")
            lost = handoff.lost_writes(state, sid)
            bundle = old_home / lost[0].bundle
            assert blob in bundle.with_suffix(".objects").read_text().split()  # it keeps the secret
            # the same secret reaches the new home later, and is redacted there
            with gitmem.open_store(new_home) as s:
                s.write("/dup.md", SECRET.decode() + "\n")
                s.write("/dup.md", "rotated\n")
                s.redact(s.versions(path="/dup.md")[-1].id, reason="a leaked key")
            assert blob in (new_home / "gitmem" / "denylist").read_text()
            until(lambda: not bundle.exists(), "the bundle holding the secret was kept")
            report = json.loads(bundle.with_suffix(".dropped.json").read_text())
            assert report["denied_objects"] == [blob] and report["bundle"] == lost[0].bundle
            assert all(w.bundle.startswith("dropped") for w in handoff.lost_writes(state, sid))
            assert not list((old_home / "gitmem" / "lost").glob("*.bundle"))
            until(lambda: purges.status(state, sid, new_home).verified, "the purge was never verified")
            assert prove_purged(old_home, secrets=[SECRET]).ok
        finally:
            halt(back)
