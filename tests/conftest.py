"""Test isolation: every test gets its own HOME, workspace and git config, and a fixed identity."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import gitmem
from gitmem.store import Store


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
