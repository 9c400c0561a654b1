"""Repo.cas when libgit2 cannot see the new target (docs/durability.md): a pack swap by a concurrent
``git repack`` can hide a written, flushed object from this thread's object database, and a write
then failed with "target OID for the reference doesn't exist" (seen beside git maintenance on a
loaded machine). The retry reopens the thread's repository (a target that is truly missing is
refused: test_object_writers.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pygit2

import gitmem


class _HidingReferences:
    def __init__(self, real: Any, misses: list[int]) -> None:
        self._real = real
        self._misses = misses

    def create(self, *args: Any, **kwargs: Any) -> Any:
        self._misses.append(1)
        raise pygit2.GitError("target OID for the reference doesn't exist on the repository")

    def get(self, name: str) -> Any:
        return self._real.get(name)


class _StaleRepository:
    """This thread's repository as a pack swap left it: it cannot see the new target."""

    def __init__(self, real: pygit2.Repository, misses: list[int]) -> None:
        self._real = real
        self.references = _HidingReferences(real.references, misses)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def test_a_target_a_pack_swap_hid_is_found_in_a_reopened_repository(workspace: Path) -> None:
    with gitmem.create_store("hidden", home=workspace) as store:
        store.write("/a.md", "one\n")
        core = store.core
        tip = core.ref_target(core.ref_name("main"))
        assert tip is not None
        misses: list[int] = []
        stale = _StaleRepository(core._repo, misses)
        core._local.repo = stale
        assert core.cas("refs/heads/elsewhere", None, tip) is True
        assert len(misses) >= 1  # the stale view was asked, then replaced
        assert core._local.repo is not stale
        assert core.ref_target("refs/heads/elsewhere") == tip
