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
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    run_tmp = tempfile.mkdtemp(prefix="gitmem-tests-")
    os.environ[_RUN_TMP] = os.environ["TMPDIR"] = run_tmp
    tempfile.tempdir = None  # gettempdir() looks at TMPDIR again
    config.stash[_leftovers] = []


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
