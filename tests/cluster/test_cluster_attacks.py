"""Adversarial cases of the cluster: replication requests signed by a node that is not the
store's home (a deposed or hung home coming back) must not rewrite a replica's copy."""

from __future__ import annotations

import hashlib
from pathlib import Path

import anthropic
import httpx2 as httpx
import pytest

import gitmem
from gitmem.cluster import replication
from gitmem.cluster.node import SIGNATURE
from gitmem.cluster.tokens import ClusterTokenStore
from tests.cluster.test_cluster_failover import _refs
from tests.cluster.test_cluster_nodes import cluster


def test_a_replication_signed_by_a_node_that_is_not_the_home_is_refused(
    database: str, tmp_path: Path
) -> None:
    with cluster(database, tmp_path, n=3, lease_seconds=5.0, healthy_seconds=3.0) as nodes:
        home, replica, other = nodes
        _t, admin = ClusterTokenStore(home.node.state).create(actor="user:admin", admin=True)
        sdk = anthropic.Anthropic(base_url=home.url, api_key=admin, max_retries=0)
        store = sdk.beta.memory_stores.create(name="notes")
        sdk.beta.memory_stores.memories.create(store.id, path="/a.md", content="kept\n")
        placement = home.node.state.placement(store.id)
        target = next(n for n in nodes if n.node.name in placement.replicas)
        home.node.tick()
        copy_git = gitmem.store.store_path("notes", tmp_path / target.node.name)
        before = _refs(copy_git)
        assert before
        # a node of the cluster that is not the home (e.g. a deposed home that resumes) sends an
        # empty copy: every ref deleted
        signer = next(n.node.name for n in nodes if n.node.name != placement.home)
        secret = home.node.state.secret()
        env = replication.envelope({}, {}, home.node.state.next_seq())
        body = replication.frame(env, b"")
        path = f"/cluster/v1/stores/{store.id}/replicate"
        sig = replication.sign(secret, signer, "POST", path, hashlib.sha256(body).hexdigest())
        got = httpx.post(target.url + path, content=body, headers={SIGNATURE: sig})
        assert got.status_code == 403, got.text
        assert _refs(copy_git) == before
        del replica, other


def test_a_garbled_envelope_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    import subprocess

    import pytest

    from gitmem.errors import InvalidInputError

    git_dir = tmp_path / "copy.git"
    subprocess.run(["git", "init", "--bare", "-q", str(git_dir)], check=True)
    (git_dir / "gitmem.yaml").write_text("kept\n")
    bad_states: list[dict[str, object]] = [
        {"gitmem.yaml": "not base64 !!"},
        {"gitmem.yaml": 7},
        {"../../x": None},
        {"gitmem/../../../x": "eA=="},
    ]
    for state in bad_states:
        with pytest.raises(InvalidInputError):
            replication.apply(git_dir, b"", {}, state)  # type: ignore[arg-type]
        assert (git_dir / "gitmem.yaml").read_text() == "kept\n"
    assert not (tmp_path / "x").exists()
    with pytest.raises(InvalidInputError):
        replication.apply(git_dir, b"", {"HEAD": "0" * 40}, {})
    with pytest.raises(InvalidInputError):
        replication.apply(git_dir, b"", {"refs/heads/x": 5}, {"gitmem.yaml": None})  # type: ignore[dict-item]
    assert (git_dir / "gitmem.yaml").read_text() == "kept\n"
    with pytest.raises(InvalidInputError):  # one ref name smuggling a second update-ref command
        replication.apply(git_dir, b"", {f"refs/heads/x {'0' * 40}\ndelete refs/heads/main": "0" * 40}, {})


def test_an_unsigned_or_oversized_replication_is_refused_before_its_body_is_read(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a signature nothing is read; a signed-looking request past the cap gets 413 after
    at most the cap is read (the body streams to a spooled file, never whole into memory)."""
    import httpx2 as httpx

    from gitmem.cluster import endpoints as node_mod

    monkeypatch.setattr(node_mod, "MAX_REPLICATION_BYTES", 1024)
    with cluster(database, tmp_path, n=2) as nodes:
        url = nodes[1].url + "/cluster/v1/stores/memstore_00000000000000000000000000/replicate"
        unsigned = httpx.post(url, content=b"x" * 100)
        assert unsigned.status_code == 403
        big = httpx.post(url, content=b"x" * 5000, headers={"x-gitmem-cluster-signature": "n0:1:" + "0" * 64})
        assert big.status_code == 413
        forged = httpx.post(
            url, content=b"x" * 100, headers={"x-gitmem-cluster-signature": "n0:1:" + "0" * 64}
        )
        assert forged.status_code == 403
