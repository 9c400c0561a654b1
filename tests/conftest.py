"""Test isolation: every test gets its own HOME, workspace and git config, and a fixed identity."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import gitmem
from gitmem.store import Store

# Shared fixtures, taken as parameters without importing them (an imported fixture trips ruff F811):
# dreamkit.model, the scripted model of the dream tests.
pytest_plugins = ["dreamkit"]

# ---------------------------------------------------------------------- HTTP clients' patience
# httpx's default timeout (5 s to connect, to read) is a wall-clock limit a loaded CI machine
# reaches: a first request to a server just started, at load 13 on the 2 cores, timed out. The
# tests' httpx calls and clients that name no timeout of their own get HTTP_TIMEOUT seconds instead
# (a hang still fails). The SDKs name their own.
HTTP_TIMEOUT = 120.0


def _patient_http_clients() -> None:
    import httpx2

    patient = httpx2.Timeout(HTTP_TIMEOUT)
    for fn in (
        httpx2.request, httpx2.get, httpx2.post, httpx2.put, httpx2.patch, httpx2.delete,
        httpx2.head, httpx2.options, httpx2.stream, httpx2.Client.__init__, httpx2.AsyncClient.__init__,
    ):  # fmt: skip
        defaults = fn.__kwdefaults__
        if defaults is not None and isinstance(defaults.get("timeout"), httpx2.Timeout):
            defaults["timeout"] = patient


_patient_http_clients()


# ---------------------------------------------------------------------- nothing left in the temp dir
# The run gets its own temporary directory (TMPDIR, inherited by xdist workers and every subprocess);
# pytest's own tmp_path roots stay where they were. Whatever is left in it at the end fails the run.
_RUN_TMP = "GITMEM_TEST_RUN_TMP"
_leftovers = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        'slow: a slow scenario test (a real cluster failing over); `pytest -m "not slow"` skips them',
    )
    if hasattr(config, "workerinput") or os.environ.get(_RUN_TMP):
        return  # an xdist worker (or a nested run): the controller made the directory
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", _fast_tmp() or tempfile.gettempdir())
    run_tmp = tempfile.mkdtemp(prefix="gitmem-tests-")
    os.environ[_RUN_TMP] = os.environ["TMPDIR"] = run_tmp
    tempfile.tempdir = None  # gettempdir() looks at TMPDIR again
    config.stash[_leftovers] = []


# The run's files on tmpfs when there is one with room: the library fsyncs every write, and on a
# disk those waits were a good part of the run (a write 33 ms against 7 ms, a store's creation 380
# against 110 ms, on the loaded test machine). A SIGKILLed process leaves the page cache as it
# leaves a disk, so what the crash tests prove is the same; the syncs are still made (and counted
# where a test counts them). PYTEST_DEBUG_TEMPROOT set by the caller wins.
FAST_TMP = "/dev/shm"
FAST_TMP_ROOM = 4 << 30  # bytes free on it, or the run stays on the disk


def _fast_tmp() -> str | None:
    try:
        st = os.statvfs(FAST_TMP)
    except OSError:
        return None
    if not os.access(FAST_TMP, os.W_OK) or st.f_bavail * st.f_frsize < FAST_TMP_ROOM:
        return None
    return FAST_TMP


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput") or _leftovers not in config.stash:
        return
    run_tmp = Path(os.environ[_RUN_TMP])
    left = sorted(str(p.relative_to(run_tmp)) for p in run_tmp.iterdir()) if run_tmp.is_dir() else []
    config.stash[_leftovers] = left
    shutil.rmtree(run_tmp, ignore_errors=True)
    if left and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        skipped = _ci_skipped(session)
        config.stash[_ci_skips] = skipped
        if skipped and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


# ---------------------------------------------------------------------- no silent skips in CI
# In CI (CI=true, as `.ci/run` runs) a skipped test is a failure: a real-component test that skipped
# (no nginx, no gitolite, no Chromium, no PostgreSQL) proved nothing. A skip whose reason starts with
# OPTIONAL_SKIP (e.g. a run against a real hosted API when no key is set) is the only one allowed.
OPTIONAL_SKIP = "optional:"
_ci_skips = pytest.StashKey[list[str]]()


def _skip_reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _ci_skipped(session: pytest.Session) -> list[str]:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = getattr(reporter, "stats", {}) if reporter is not None else {}
    bad = []
    for report in stats.get("skipped", []):
        if getattr(report, "wasxfail", None) is not None:
            continue
        reason = _skip_reason(report)
        if not reason.startswith(OPTIONAL_SKIP):
            bad.append(f"{report.nodeid}: {reason}")
    return bad


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    for line in config.stash.get(_ci_skips, []):
        terminalreporter.write_line(f"FAILED (skipped in CI): {line}", red=True)
    left = config.stash.get(_leftovers, [])
    if left:
        terminalreporter.write_line(
            f"FAILED: the tests left {len(left)} entries in the temporary directory: {', '.join(left[:20])}",
            red=True,
        )


# ---------------------------------------------------------------------- the longest tests first
# `make test` runs two xdist workers and ends when the later one does: a long test handed out near
# the end kept one worker busy while the other had finished. The tests measured longest
# (--durations, seconds of their call on a loaded machine; a prefix names every test under it) run
# first, longest first; the rest keep their order. A test missing here only runs in its usual place.
LONGEST: dict[str, float] = {
    "tests/project/test_cli_demo.py::test_demo_tour_shows_every_headline_feature": 141,
    "tests/bench/test_server_bench_smoke.py::test_serve_bench_quick": 112,
    "tests/engine/test_index_scale.py::test_catch_up_of_5000_commits": 106,
    "tests/bench/test_cluster_bench_smoke.py::test_cluster_bench_quick": 68,
    "tests/project/test_packaging.py::test_wheel_installs_into_a_fresh_venv": 57,
    "tests/server/test_webhooks_restart.py::test_sigkill_mid_stream": 53,
    "tests/bench/test_serve_many_smoke.py::test_serve_bench_many_quick": 49,
    "tests/cluster/test_cluster_sigkill.py::test_sigkill_of_the_home": 48,
    "tests/server/test_server_dream_inputs.py::test_a_create_new_dream_killed_mid_run": 47,
    "tests/server/test_server_dreams.py::test_a_server_killed_mid_run": 45,
    "tests/bench/test_hook_bench_smoke.py::test_hook_bench_quick_runs": 45,
    "tests/integrations/test_mcp_for_models.py::test_list_memories_pages_cover_a_3000": 44,
    "tests/project/test_packaging.py::test_build_makes_wheel_and_sdist": 43,
    "tests/bench/test_bench_smoke.py::test_run_quick_prints_its_table": 39,
    "tests/server/test_conversations_attacks.py::test_sigkill_of_the_server": 30,
    "tests/bench/test_rebuild_bench_smoke.py::test_rebuild_bench_quick_runs": 30,
    "tests/engine/test_identity.py::test_audit_of_a_scripted_day": 26,
    "tests/cli/test_cli_conventions.py::test_colour_on_a_terminal": 25,
    "tests/git/test_consolidate_races.py::test_pushes_landing_as_packs": 24,
    "tests/engine/test_identity.py::test_settings_are_validated_by_type": 24,
    "tests/bench/test_console_bench_smoke.py::test_console_bench_quick": 23,
    "tests/server/test_console_attacks.py::test_no_field_an_agent_writes_runs_as_script": 22,
    "tests/engine/test_semantic_search.py::test_a_killed_catch_up": 21,
    "tests/engine/test_index_scale.py::test_catch_up_in_big_directories": 20,
    "tests/git/test_object_writers.py::test_writers_beside_git_maintenance_and_a_kill": 20,
    "tests/server/test_server_attacks.py::test_mixed_concurrent_requests_never_500": 19,
    "tests/engine/test_group_processes.py::test_sigkill_of_a_leader_at_each_step": 18,
    "tests/cluster/test_cluster_moves.py::test_a_sync_failover": 18,
    "tests/integrations/test_langgraph_checkpoint.py::test_sigkill_during_put_writes": 17,
    "tests/bench/test_tlog_bench_smoke.py::test_tlog_bench_quick": 17,
    "tests/server/test_console_review.py::test_review_in_the_browser": 16,
    "tests/git/test_consolidate_races.py::test_verify_beside_writes_and_merges": 16,
    "tests/push/test_forge_identity.py::test_gitea_pusher_through_gitea_hook_layout": 14,
    "tests/integrations/test_examples_adapters.py::test_agents_example": 14,
    "tests/model/test_model.py::test_store_behaves_like_the_dict_model": 13,
    "tests/engine/test_identity_attacks.py::test_verify_finds_an_edited_or_truncated": 13,
    "tests/engine/test_group_processes.py::test_writer_processes_share_group_commits": 13,
    "tests/cli/test_server_cli.py::test_gitmem_serve_subprocess": 13,
    "tests/cli/test_cli_conventions.py::test_verbose_logs_writes": 13,
    "tests/engine/test_xqueue_attacks.py::test_two_leaders_when_the_scope_lock_file": 12,
    "tests/engine/test_xqueue_attacks.py::test_sigkill_of_a_leader_with_its_index_record": 12,
    "tests/engine/test_search.py::test_escaped_queries_are_always_valid_fts5": 12,
    "tests/cluster/test_cluster_moves.py::test_an_async_failover": 12,
    "tests/git/test_durability.py::test_sigkill_at_each_step": 10,
}


def _expected_seconds(nodeid: str) -> float:
    return max((s for prefix, s in LONGEST.items() if nodeid.startswith(prefix)), default=0.0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long tests first, dealt alternately to the first chunk of tests each of the two workers
    is sent (xdist's load scheduling sends each worker len/8 consecutive tests to begin with): one
    worker is not handed every long test. The others keep their order."""
    long = sorted(
        (i for i in items if _expected_seconds(i.nodeid)), key=lambda i: -_expected_seconds(i.nodeid)
    )
    if not long:
        return
    rest = [i for i in items if not _expected_seconds(i.nodeid)]
    first, second = long[0::2], long[1::2]
    chunk = len(items) // 2 // 4
    if chunk < len(first):  # a small selection: longest first is all there is to do
        items[:] = long + rest
        return
    fill = chunk - len(first)
    items[:] = first + rest[:fill] + second + rest[fill:]


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GITMEM_HOME", str(tmp_path / "workspace"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Tester")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "tester@example.com")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Tester")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "tester@example.com")
    for var in ("GITMEM_ACTOR", "GITMEM_SESSION", "XDG_DATA_HOME", "GIT_DIR", "GIT_WORK_TREE"):
        monkeypatch.delenv(var, raising=False)
    (home / ".gitconfig").write_text('[init]\n\tdefaultBranch = main\n[protocol "file"]\n\tallow = always\n')
    yield tmp_path
    os.environ.pop("GITMEM_TEST_SENTINEL", None)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path / "workspace"


@pytest.fixture
def store(workspace: Path) -> Iterator[Store]:
    s = gitmem.create_store("notes", description="Test notes", home=workspace)
    yield s
    s.close()
