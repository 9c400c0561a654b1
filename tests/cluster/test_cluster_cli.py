"""``gitmem cluster init|join|status|move|drain`` against a real PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gitmem.cli.app import app
from gitmem.cluster import schema
from gitmem.server.tokens import TokenStore

runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_init_join_status_move_drain(database: str, tmp_path: Path) -> None:
    home = tmp_path / "ws"
    _token, secret = TokenStore(home).create(actor="user:alice", stores={"*": "rw"})
    code, out = _run(
        "cluster", "init", "--database", database, "--import-tokens", "--home", str(home), "--json"
    )
    assert code == 0, out
    assert json.loads(out) == {"migrations_applied": list(range(1, schema.LATEST + 1)), "tokens_imported": 1}
    code, out = _run("cluster", "init", "--database", database, "--json")
    assert code == 0 and json.loads(out)["migrations_applied"] == []
    for name in ("n1", "n2"):
        code, out = _run("cluster", "join", name, "--url", f"http://127.0.0.1/{name}", "--database", database)
        assert code == 0 and f"node {name} joined" in out
    from gitmem.cluster.state import ClusterState

    with ClusterState(database) as state:
        state.place("memstore_a", home="n1", replicas=["n2"])
    code, out = _run("cluster", "status", "--database", database, "--json")
    status = json.loads(out)
    assert [n["name"] for n in status["nodes"]] == ["n1", "n2"]
    assert status["placements"] == [
        {"store_id": "memstore_a", "home": "n1", "replicas": ["n2"], "moving_to": None}
    ]
    assert status["lost_writes"] == [] and status["purges_unproved"] == []
    # no node runs here to hand the store over: the move is asked for, and stays pending (the
    # handoff itself is tested on real nodes, test_cluster_moves.py)
    code, out = _run("cluster", "move", "memstore_a", "n2", "--wait", "0", "--database", database, "--json")
    assert code == 0, out
    assert json.loads(out)["home"] == "n1" and json.loads(out)["moving_to"] == "n2"
    code, out = _run("cluster", "move", "memstore_a", "n2", "--wait", "0.3", "--database", database)
    assert code == 0 and "handoff pending; home n1" in out
    code, out = _run("cluster", "drain", "n1", "--wait", "0", "--database", database)
    assert code == 0 and "moved 0 of 1 store(s) off n1" in out
    with ClusterState(database) as state:
        assert state.placement("memstore_a").moving_to == "n2"
        assert state.placement("memstore_a").home == "n1"


def test_no_database_is_a_usage_error_and_an_unreachable_one_says_so(database: str) -> None:
    code, out = _run("cluster", "status")
    assert code == 2 and "GITMEM_CLUSTER_DATABASE" in out
    dead = database.rsplit(":", 1)[0] + ":1/nowhere"
    code, out = _run("cluster", "status", "--database", dead)
    assert code == 8 and "cannot be reached" in out


def test_join_before_init_is_refused(database: str) -> None:
    code, out = _run("cluster", "join", "n1", "--url", "http://x", "--database", database)
    assert code == 2 and "cluster init" in out
