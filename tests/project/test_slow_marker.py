"""The `slow` marker is registered and carried: `pytest -m "not slow"` is the quick loop (docs/testing notes)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
# Scenario tests timed past ~15 s (``--durations``: real clusters, servers or processes killed and
# recovered): each carries the marker, on the whole module or on the test itself.
SLOW: dict[str, set[str] | None] = {  # module -> its slow tests (None: the whole module)
    "cluster/test_cluster_failover.py": None,
    "cluster/test_cluster_sigkill.py": None,
    "cluster/test_cluster_purges.py": {"test_a_redaction_drops_the_lost_tail_bundle_that_kept_the_secret"},
    "cluster/test_cluster_refgen.py": {"test_the_beat_lists_refs_only_when_the_ref_generation_moved"},
    "cluster/test_cluster_moves.py": None,  # moves under load, sync and async failovers
    "cluster/test_cluster_dream_failover.py": {"test_a_promoted_replica_lists_the_same_dreams"},
    "cluster/test_cluster_webhooks.py": {
        "test_a_promoted_replica_and_a_moved_home_deliver_every_event_once",
        "test_a_store_event_queued_on_a_home_that_fails_over_is_sent_once_by_the_new_home",
    },
    "audit/test_redact_stress.py": None,  # writers, pushes and redactions at once
    "bench/test_bench_smoke.py": {"test_run_quick_prints_its_table"},
    **{f"bench/test_{b}_smoke.py": None for b in (  # each runs a benchmark script end to end
        "clone_bench", "cluster_bench", "console_bench", "hook_bench", "rebuild_bench", "redact_bench",
        "serve_many", "server_bench", "sync_bench", "tlog_bench")},
    "server/test_server_dreams.py": {"test_a_server_killed_mid_run_ends_the_dream_failed_and_nothing_reaches_the_scope"},
    "engine/test_xqueue_attacks.py": {"test_sigkill_of_a_leader_with_its_index_record_staged"},
}  # fmt: skip


def test_the_slow_marker_is_registered(pytestconfig: pytest.Config) -> None:
    assert any(line.startswith("slow:") for line in pytestconfig.getini("markers"))


def test_some_scenario_tests_carry_the_slow_marker() -> None:
    marked = [p for p in TESTS.rglob("test_*.py") if "pytest.mark.slow" in p.read_text()]
    assert any(p.parent.name == "cluster" for p in marked)


def _is_slow(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "slow" and "mark" in ast.unparse(node)


@pytest.mark.parametrize("module", sorted(SLOW))
def test_the_slow_scenario_tests_carry_the_marker(module: str) -> None:
    tree = ast.parse((TESTS / module).read_text(encoding="utf-8"))
    whole = any(
        isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)
        and _is_slow(n.value)
        for n in tree.body
    )
    tests = SLOW[module]
    if tests is None:
        assert whole, f"{module} should carry pytestmark = pytest.mark.slow"
        return
    marked = {
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and any(_is_slow(d) for d in n.decorator_list)
    }
    assert whole or tests <= marked, f"{module}: not marked slow: {sorted(tests - marked)}"
