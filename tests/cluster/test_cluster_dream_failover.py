"""Dream records travel with their store (gitmem/cluster/dream_copies.py): after the home is lost, the
promoted replica lists the same dreams (a finished and archived one as it was; one that was running
on the old home ended ``failed``, as after a restart), and once the old home is back and brought
level every node lists each dream once. Three real nodes on a real PostgreSQL, the official
``anthropic`` client, the dream tests' scripted model."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anthropic
import pytest

import gitmem
from gitmem.cluster import dream_copies
from gitmem.cluster.node import ClusterNode
from gitmem.cluster.tokens import ClusterTokenStore
from tests.cluster.test_cluster_nodes import cluster, halt, serving, the_copy
from tests.helpers import patience

SESSION = "sesn_work1"


def _until(check: Any, what: str) -> None:
    deadline = patience(120)
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _listed(c: anthropic.Anthropic) -> list[tuple[str, str, bool]]:
    return [(d.id, d.status, d.archived_at is not None) for d in c.beta.dreams.list(include_archived=True)]


@pytest.mark.slow  # a real cluster, failed over, and its old home back
def test_a_promoted_replica_lists_the_same_dreams(database: str, tmp_path: Path, model: Any) -> None:
    from tests.dreamkit import SESSION_NOTE, STORE

    with cluster(database, tmp_path, n=3, replicas=2, lease_seconds=5.0, healthy_seconds=3.0) as nodes:
        state = nodes[0].node.state
        _t, admin = ClusterTokenStore(state).create(actor="user:admin", admin=True)
        sdk = [anthropic.Anthropic(base_url=r.url, api_key=admin, max_retries=3) for r in nodes]
        store = sdk[0].beta.memory_stores.create(name="notes")
        assert state.placement(store.id).home == "n0"
        with gitmem.open_store(the_copy(tmp_path / "n0")) as s:
            for path, content in STORE.items():
                s.write(path, content, actor="user:alice")
            s.write(SESSION_NOTE[0], SESSION_NOTE[1], session=SESSION)
        inputs = [
            {"type": "memory_store", "memory_store_id": store.id},
            {"type": "sessions", "session_ids": [SESSION]},
        ]
        behavior = {"type": "update_existing", "memory_store_id": store.id}
        first = sdk[1].beta.dreams.create(inputs=inputs, model="m", output_behavior=behavior)
        _until(lambda: sdk[1].beta.dreams.retrieve(first.id).status == "completed", "the dream never ended")
        assert sdk[2].beta.dreams.archive(first.id).archived_at is not None
        model.gate_turn = 1  # the next dream is held running, mid-conversation
        second = sdk[1].beta.dreams.create(inputs=inputs, model="m", output_behavior=behavior)
        assert model.reached.wait(120), "the second dream never reached the model"
        assert sdk[2].beta.dreams.retrieve(second.id).status == "running"
        nodes[0].node.tick()  # replicate now: both records are in the replicas' copies
        for n in ("n1", "n2"):
            kept = the_copy(tmp_path / n) / dream_copies.DIR
            assert sorted(p.name for p in kept.glob("drm_*.json")) == sorted(
                [f"{first.id}.json", f"{second.id}.json"]
            )
            assert not (tmp_path / n / "dreams").exists()  # a replica lists none of them itself
        before = _listed(sdk[1])
        assert before == [(second.id, "running", False), (first.id, "completed", True)]
        # the home is lost
        halt(nodes[0])
        _until(lambda: nodes[1].node.failovers or nodes[2].node.failovers, "no replica took over")
        promoted = 1 if nodes[1].node.failovers else 2
        other = 3 - promoted
        assert state.placement(store.id).home == f"n{promoted}"
        for c in (sdk[promoted], sdk[other]):  # the same dreams, through the new home and the third node
            assert _listed(c) == [(second.id, "failed", False), (first.id, "completed", True)]
        ended = sdk[other].beta.dreams.retrieve(second.id)
        assert ended.error is not None and "failover" in ended.error.message, ended.error
        kept = sdk[other].beta.dreams.retrieve(first.id)
        assert kept.model_extra["gitmem"]["proposal_id"] and kept.archived_at is not None
        assert sdk[other].beta.dreams.archive(second.id).archived_at is not None  # acted on at the new home
        model.release.set()  # the old home's worker lets go
        # the old home comes back, is brought level, and lists none of the store's dreams itself
        back = serving(ClusterNode(tmp_path / "n0", database, "n0", nodes[0].url, heartbeat_seconds=0.5,
                                   lease_seconds=5.0, healthy_seconds=3.0))  # fmt: skip
        try:
            _until(
                lambda: not list((tmp_path / "n0" / "dreams").glob("drm_*.json")),
                "the old home kept the store's dream records",
            )
            for c in sdk:  # every node lists each dream once
                assert _listed(c) == [(second.id, "failed", True), (first.id, "completed", True)]
            record = json.loads((tmp_path / f"n{promoted}" / "dreams" / f"{second.id}.json").read_text())
            assert record["status"] == "failed" and record["worker_stopped"]
        finally:
            halt(back)


def test_the_new_home_adopts_records_and_the_old_home_releases_them(tmp_path: Path) -> None:
    """The two halves without a cluster: a copy's records (a running dream, a pending one, a
    pipeline) adopted into a workspace that lacks them, a running one ended failed; the workspace's
    own written into the copy; and an old home's records released once the copy holds them."""
    from gitmem.server.dream_jobs import Dream, DreamJobs, Pipeline

    old_home, new_home = tmp_path / "old", tmp_path / "new"
    copy = tmp_path / "copy.git"
    jobs = DreamJobs(old_home)

    def dream(behavior: str, store_id: str = "memstore_a") -> Dream:
        return jobs.create(Dream(id="", store="notes", store_id=store_id, sessions=[], model="m", speed=None,
                                 instructions=None, behavior=behavior))  # fmt: skip

    made = [dream("update_existing")]
    jobs.update(made[0].id, lambda d: (setattr(d, "status", "completed"), setattr(d, "worker_stopped", True)))
    made += [dream("create_new"), dream("create_new")]
    jobs.update(made[1].id, lambda d: setattr(d, "status", "running"))  # made[2] stays pending
    jobs.save_pipeline(Pipeline(store="memstore_a", model="m"))
    other = dream("create_new", "memstore_b")
    copy.mkdir()
    assert dream_copies.sync_home(old_home, "memstore_a", copy) == []  # the old home: its records in
    kept = copy / dream_copies.DIR
    assert sorted(p.name for p in kept.iterdir()) == sorted(
        [*(f"{d.id}.json" for d in made), dream_copies.PIPELINE]
    )  # another store's dream is not this copy's
    adopted = dream_copies.sync_home(new_home, "memstore_a", copy)
    assert sorted(adopted) == sorted(d.id for d in made)
    mine = DreamJobs(new_home)
    assert mine.get(made[0].id).status == "completed"
    ended = mine.get(made[1].id)  # it was running on the old home
    assert ended.status == "failed" and ended.worker_stopped and "failover" in (ended.error or {})["message"]
    assert mine.get(made[2].id).status == "pending"  # started by the new home's runner, where one runs
    assert mine.pipeline("memstore_a") is not None
    assert json.loads((kept / f"{made[1].id}.json").read_text())["status"] == "failed"  # the new home's now
    # the old home, a replica now: the copy holds the store's records, so its own go
    assert sorted(dream_copies.release(old_home, "memstore_a", copy)) == sorted(d.id for d in made)
    assert [d.id for d in jobs.all()] == [other.id] and jobs.pipeline("memstore_a") is None
