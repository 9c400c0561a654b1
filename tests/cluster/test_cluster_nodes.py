"""Three real ``gitmem serve`` nodes on 127.0.0.1 sharing one real PostgreSQL: any node answers any
request (proxied to the store's home), one token works on every node and a revocation on one is
refused on all, real git clones and pushes through a node that is not the home."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anthropic
import pytest
import uvicorn

import gitmem
from gitmem.cluster.node import ClusterNode
from gitmem.cluster.serving import node_app
from gitmem.cluster.state import ClusterState
from gitmem.cluster.tokens import ClusterTokenStore
from tests.helpers import patience
from tests.serverkit import free_port

_MISSING = object()


def the_copy(home: Path, default: object = _MISSING) -> Path:
    """The one store's repository in a node's workspace (named by its id)."""
    found = sorted((home / "stores").glob("*.git")) if (home / "stores").is_dir() else []
    if not found:
        if default is _MISSING:
            raise AssertionError(f"no store in {home}")
        return default  # type: ignore[return-value]
    assert len(found) == 1, found
    return found[0]


@dataclass
class Running:
    node: ClusterNode
    url: str
    server: uvicorn.Server
    thread: threading.Thread


def serving(node: ClusterNode, *, start: bool = True) -> Running:
    """Start ``node`` (unless it runs) and serve its app on its URL's port (in a thread)."""
    if start:
        node.start()
    port = int(node.url.rsplit(":", 1)[1])
    server = uvicorn.Server(uvicorn.Config(node_app(node), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = patience(60)
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "a node did not start"
        time.sleep(0.02)
    return Running(node, node.url, server, thread)


def halt(r: Running, *, node: bool = True) -> None:
    """Stop serving ``r`` (and, with ``node``, its heartbeats: it is down)."""
    r.server.should_exit = True
    r.thread.join(timeout=60)
    if node:
        r.node.stop()


def hang(r: Running) -> socket.socket:
    """Stop serving ``r`` (its heartbeats go on: it stays healthy) and hold its port with a socket
    that completes connections in its backlog and never accepts them: every request to it hangs.
    Closing the socket resets the connections queued there."""
    halt(r, node=False)
    hung = socket.socket()
    hung.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    hung.bind(("127.0.0.1", int(r.url.rsplit(":", 1)[1])))
    hung.listen(64)
    return hung


@contextmanager
def cluster(
    database: str,
    root: Path,
    n: int = 3,
    lease_seconds: float = 10.0,
    healthy_seconds: float = 15.0,
    replicas: int = 1,
    sync: bool = False,
) -> Iterator[list[Running]]:
    with ClusterState(database) as s:
        s.init()
    nodes: list[Running] = []
    try:
        for i in range(n):
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            node = ClusterNode(
                root / f"n{i}", database, f"n{i}", url, replicas=replicas, heartbeat_seconds=0.5,
                lease_seconds=lease_seconds, healthy_seconds=healthy_seconds, sync=sync,
            )  # fmt: skip
            (root / f"n{i}").mkdir(parents=True)
            nodes.append(serving(node))
        yield nodes
    finally:
        for r in nodes:
            r.server.should_exit = True
            r.thread.join(timeout=30)
            r.node.stop()  # stopping twice is harmless


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


def test_any_node_answers_and_writes_land_once_at_the_home(database: str, tmp_path: Path) -> None:
    with cluster(database, tmp_path) as nodes:
        tokens = ClusterTokenStore(nodes[0].node.state)
        _admin, admin = tokens.create(actor="user:admin", admin=True)
        sdk = [anthropic.Anthropic(base_url=r.url, api_key=admin, max_retries=0) for r in nodes]
        store = sdk[0].beta.memory_stores.create(name="notes", description="team notes")
        placement = nodes[0].node.state.placement(store.id)
        assert placement.home == "n0" and len(placement.replicas) == 1
        for i, c in enumerate(sdk):  # through every node, home or not
            c.beta.memory_stores.memories.create(
                store.id, path=f"/via/n{i}.md", content=f"written through n{i}\n"
            )
        assert nodes[1].node.forwarded >= 1 and nodes[2].node.forwarded >= 1
        with gitmem.open_store(the_copy(tmp_path / "n0")) as s:  # every write landed at the home, once
            assert sorted(m.path for m in s.list("/via/")) == ["/via/n0.md", "/via/n1.md", "/via/n2.md"]
            assert len([v for v in s.versions() if v.path.startswith("/via/")]) == 3
            assert {v.actor for v in s.versions() if v.path.startswith("/via/")} == {"user:admin"}
        # a copy is only at the home and at its one replica, and the replica's copy takes no write
        nodes[0].node.tick()
        holders = sorted(n for n in ("n0", "n1", "n2") if the_copy(tmp_path / n, None) is not None)
        assert holders == sorted(("n0", *placement.replicas))
        replica_git = the_copy(tmp_path / placement.replicas[0])
        with gitmem.open_store(replica_git) as copy, pytest.raises(gitmem.errors.ForbiddenError):
            copy.write("/x.md", "a replica never takes a write\n")
        # reads through any node see the same memories
        listed = [
            sorted(m.path for m in c.beta.memory_stores.memories.list(store.id) if m.type == "memory")
            for c in sdk
        ]
        assert listed[0] == listed[1] == listed[2]


def test_a_token_revoked_on_one_node_is_refused_on_all(database: str, tmp_path: Path) -> None:
    with cluster(database, tmp_path) as nodes:
        gitmem.create_store("notes", home=tmp_path / "n1").close()
        nodes[1].node.sync_placements()
        tokens = ClusterTokenStore(nodes[2].node.state)
        reader, secret = tokens.create(actor="user:bob", stores={"notes": "ro"})
        sdk = [anthropic.Anthropic(base_url=r.url, api_key=secret, max_retries=0) for r in nodes]
        assert all([s.name for s in c.beta.memory_stores.list()] in (["notes"], []) for c in sdk)
        ClusterTokenStore(nodes[0].node.state).revoke(reader.id)
        for c in sdk:
            with pytest.raises(anthropic.AuthenticationError):
                c.beta.memory_stores.list()


def test_git_clone_and_push_through_a_node_that_is_not_the_home(database: str, tmp_path: Path) -> None:
    with cluster(database, tmp_path) as nodes:
        with gitmem.open_store(gitmem.create_store("notes", home=tmp_path / "n0").path) as s:
            s.write("/seed.md", "seed\n", actor="user:seed")
        nodes[0].node.sync_placements()
        _t, secret = ClusterTokenStore(nodes[0].node.state).create(actor="user:carol", stores={"notes": "rw"})
        via = nodes[2].url.replace("http://", f"http://x:{secret}@") + "/git/notes.git"
        work = tmp_path / "clone"
        res = _git("clone", "-q", via, str(work))
        assert res.returncode == 0, res.stderr
        assert (work / "seed.md").read_text() == "seed\n"
        (work / "pushed.md").write_text("pushed through n2\n")
        _git("-C", str(work), "add", "pushed.md")
        _git(
            "-C", str(work), "-c", "user.name=c", "-c", "user.email=c@example.com", "commit", "-qm", "pushed"
        )
        res = _git("-C", str(work), "push", "-q", "origin", "main")
        assert res.returncode == 0, res.stderr
        with gitmem.open_store(the_copy(tmp_path / "n0")) as s:
            assert s.read("/pushed.md").content == "pushed through n2\n"  # type: ignore[union-attr]
            assert s.versions(path="/pushed.md")[0].actor == "user:carol"


def test_a_forged_forwarding_header_is_not_believed(database: str, tmp_path: Path) -> None:
    import httpx2 as httpx

    with cluster(database, tmp_path, n=2) as nodes:
        gitmem.create_store("notes", home=tmp_path / "n0").close()
        nodes[0].node.sync_placements()
        _t, secret = ClusterTokenStore(nodes[0].node.state).create(actor="user:eve", admin=True)
        sid = nodes[0].node.state.placements()[0].store_id
        forged = {"authorization": f"Bearer {secret}", "x-gitmem-forwarded": "n0:" + "0" * 64,
                  "anthropic-version": "2023-06-01", "anthropic-beta": "managed-agents-2026-04-01"}  # fmt: skip
        reply = httpx.get(f"{nodes[1].url}/v1/memory_stores/{sid}", headers=forged)
        # n1 does not believe the header: it forwards to the home, which answers with the store
        assert reply.status_code == 200, reply.text
        assert reply.json()["id"] == sid and nodes[1].node.forwarded == 1


def test_a_captured_forwarding_header_serves_no_other_request_and_expires() -> None:
    """The header a node forwards with is bound to its method, path, query and minute, once."""
    from gitmem.cluster import proxy

    secret = b"s" * 32
    app = proxy.ClusterProxy(None, node="n1", secret=secret, home_of=lambda _s: None, client=None)  # type: ignore[arg-type]

    def scope(header: str, path: str = "/v1/memory_stores/x", query: bytes = b"") -> dict[str, object]:
        return {
            "method": "GET",
            "path": path,
            "query_string": query,
            "headers": [(proxy.FORWARDED, header.encode())],
        }

    now = int(time.time())
    good = proxy.forward_mac(secret, "n0", "GET", "/v1/memory_stores/x", "", now)
    assert app._forwarded_by_peer(scope(good))
    assert not app._forwarded_by_peer(scope(good, path="/v1/memory_stores/y"))  # another path
    assert not app._forwarded_by_peer(scope(good, query=b"at=2026-01-01"))  # another query
    old = proxy.forward_mac(secret, "n0", "GET", "/v1/memory_stores/x", "", now - 3600)
    assert not app._forwarded_by_peer(scope(old))  # replayed an hour later
    assert not app._forwarded_by_peer(scope("n0:" + "0" * 64))  # the old, timeless form
    assert not app._forwarded_by_peer(scope(good))  # replayed at once: believed once only
    again = proxy.forward_mac(secret, "n0", "GET", "/v1/memory_stores/x", "", now)
    assert app._forwarded_by_peer(scope(again))  # a new nonce: a new request
    nonce = again.split(":")[2]
    forged = proxy.forward_mac(b"x" * 32, "n0", "GET", "/v1/memory_stores/x", "", now, nonce)
    assert not app._forwarded_by_peer(scope(forged))  # signed with another secret


def test_a_write_to_a_store_placed_since_the_last_beat_is_not_refused(database: str, tmp_path: Path) -> None:
    """A store placed at its home (sync_placements) before a beat took its lease: a write through
    another node is served (the home beats once for it), not refused with 503."""
    with cluster(database, tmp_path, n=2) as nodes:
        n0 = nodes[0].node
        n0.heartbeat_seconds = 3600.0  # the next wait of n0's beat thread outlasts the test
        time.sleep(2.0)  # (the wait under way, 0.5 s, ends and the long one begins)
        gitmem.create_store("fresh", home=tmp_path / "n0").close()
        n0.sync_placements()
        assert not n0.epochs  # placed, no lease taken yet
        _t, admin = ClusterTokenStore(n0.state).create(actor="user:admin", admin=True)
        sdk = anthropic.Anthropic(base_url=nodes[1].url, api_key=admin, max_retries=0)
        sid = n0.state.placements()[0].store_id
        sdk.beta.memory_stores.memories.create(sid, path="/first.md", content="first\n")
        assert n0.epochs and nodes[1].node.forwarded >= 1
        with gitmem.open_store(the_copy(tmp_path / "n0")) as s:
            assert s.read("/first.md").content == "first\n"  # type: ignore[union-attr]
