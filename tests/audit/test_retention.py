"""Retention compaction keeps exactly the promised versions, with the rewrite guarantees."""

from __future__ import annotations

import pytest

import gitmem
from gitmem.audit import retention
from gitmem.audit.retention import DAY
from gitmem.audit.verify import verify
from gitmem.config import Retention
from gitmem.engine import ledger
from gitmem.engine.writer import Change, ScopeState, commit_change
from gitmem.ids import new_id
from gitmem.store import Store
from tests.helpers import git

NOW = 1_800_000_000


def write_at(store: Store, path: str, content: str | None, days_ago: int, actor: str = "user:t") -> str:
    """One version written ``days_ago`` before NOW (content None: delete); returns its id."""
    tip = store.core.tip("main")
    state = ScopeState(store.core, "main", tip)
    exists = state.blob(path) is not None
    op = "deleted" if content is None else ("modified" if exists else "created")
    mid = state.memory_id(path) if exists else new_id("mem")
    data = None if content is None else content.encode()
    commit, row = commit_change(
        store.core, state, Change(op, path, data, mid), tip, actor, None, NOW - days_ago * DAY
    )
    assert store.core.cas_ref("main", tip, commit)
    return row.id


@pytest.fixture
def aged(store: Store) -> tuple[Store, dict[str, str]]:
    v = {
        "a1": write_at(store, "/a.md", "a one\n", 100),
        "b1": write_at(store, "/b.md", "b one\n", 95),
        "a2": write_at(store, "/a.md", "a two\n", 90, actor="user:old"),
        "bdel": write_at(store, "/b.md", None, 85),
        "a3": write_at(store, "/a.md", "a three\n", 80, actor="user:keep"),
        "a4": write_at(store, "/a.md", "a four\n", 70),
        "c1": write_at(store, "/c.md", "c young\n", 5),
    }
    store.update_settings(retention=Retention(min_days=10, max_days=30, keep_recent=2))
    return store, v


def test_prune_keeps_exactly_the_promised_versions(aged: tuple[Store, dict[str, str]]) -> None:
    store, v = aged
    a2_blob = store.core.index.version_rows("id=?", (v["a2"],))[0].blob
    old_commits = git(store.path, "rev-list", "main").stdout.split()
    result = retention.prune(store.core, actor="service:janitor", now=NOW)
    [c] = result.compactions
    assert sorted(c.dropped) == sorted([v["a1"], v["b1"], v["a2"], v["bdel"]])
    assert c.kept_in_root == 1
    assert {x.id for x in store.versions()} == {v["a3"], v["a4"], v["c1"]}
    a3 = store.version(v["a3"])
    assert (a3.actor, int(a3.created_at.timestamp())) == ("user:keep", NOW - 80 * DAY)
    assert store.read("/a.md", version=v["a3"]).content == "a three\n"
    assert store.read("/a.md").content == "a four\n" and store.read("/c.md").content == "c young\n"
    assert git(store.path, "rev-list", "--count", "main").stdout.strip() == "3"
    for oid in [a2_blob, *old_commits]:
        assert git(store.path, "cat-file", "-e", str(oid), check=False).returncode != 0
    entry = ledger.find(store.core, "compaction", "id", c.id)
    assert entry is not None and entry.actor == "service:janitor"
    assert set(old_commits) <= ledger.denied(store.core)
    verify(store.core)
    store.core.index.rebuild()
    assert {x.id for x in store.versions()} == {v["a3"], v["a4"], v["c1"]}


def test_nothing_younger_than_min_days_is_dropped(aged: tuple[Store, dict[str, str]]) -> None:
    store, _v = aged
    store.update_settings(retention=Retention(min_days=200, max_days=30, keep_recent=0))
    before = git(store.path, "rev-parse", "main").stdout
    result = retention.prune(store.core, now=NOW)
    assert result.compactions == [] and "main" in result.skipped
    assert git(store.path, "rev-parse", "main").stdout == before


def test_without_max_days_prune_does_nothing(store: Store) -> None:
    store.write("/a.md", "x\n")
    result = retention.prune(store.core)
    assert result.compactions == [] and result.skipped == {"main": "retention.max_days is not set"}


def test_plan_cut_stops_at_a_kept_superseded_version() -> None:
    from gitmem.engine.rows import VersionRow

    def row(vid: str, mid: str, t: int, op: str = "modified") -> list[VersionRow]:
        return [VersionRow(vid, mid, "main", "/p", None, op, "user:x", None, t, None, None, None, "c")]

    commits = [row("v1", "m", 1), row("v2", "m", 2), row("v3", "m", 50), row("v4", "m", 60)]
    assert retention.plan_cut(commits, {"m"}, 2, cutoff=40) == 3  # v3 kept: it is the root's state
    assert retention.plan_cut(commits, {"m"}, 10, cutoff=100) == 1  # v1 kept: v2 must stay after the cut
    assert retention.plan_cut(commits, set(), 10, cutoff=100) == 4  # deleted memory: nothing kept


@pytest.mark.parametrize("step", ["journal", "index"])
def test_compaction_killed_then_recovered(aged: tuple[Store, dict[str, str]], step: str) -> None:
    import os
    import signal
    import subprocess
    import sys

    store, v = aged
    script = "import sys, gitmem\nfrom gitmem.audit.retention import prune\nprune(gitmem.open_store(sys.argv[1]).core, now=int(sys.argv[2]))\n"
    env = dict(os.environ, GITMEM_FAULT=step)
    res = subprocess.run([sys.executable, "-c", script, str(store.path), str(NOW)], env=env, check=False)
    assert res.returncode == -signal.SIGKILL
    with gitmem.open_store(str(store.path)) as again:
        verify(again.core)
        ids = {x.id for x in again.versions()}
        if step == "journal":
            assert ids == set(v.values())
        else:
            assert ids == {v["a3"], v["a4"], v["c1"]}
            assert len(ledger.entries(again.core, kind="compaction")) == 1
        assert again.read("/a.md").content == "a four\n"
