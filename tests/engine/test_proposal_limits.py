"""The store's limits against open proposals (docs/review.md#limits): a proposed write counts what
every other open proposal holds, so sessions (one open proposal each) cannot multiply
``max_store_bytes`` or a scope's ``max_memories``; published writes do not count proposals."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import gitmem
from gitmem import config
from gitmem.audit import review
from gitmem.engine import proposal_usage, proposals
from gitmem.errors import LimitExceededError
from gitmem.model.caller import Caller

BIG = "x" * 2500 + "\n"


def agent(n: int) -> Caller:
    return Caller(actor="user:agent", session=f"sesn_agent{n}", review=True, rights=frozenset({"write"}))


def held(s: gitmem.Store) -> int:
    """Bytes the open proposals' chains add over their bases."""
    total = 0
    for p in proposals.proposals(s.core, status="open"):
        tip = proposals.tip_of(s.core, p)
        base = proposals.pygit2.Oid(hex=p.base) if p.base else None
        total += max(proposal_usage.totals(proposal_usage.chain_delta(s.core, base, tip))[1], 0)
    return total


@pytest.fixture
def small(workspace: Path) -> gitmem.Store:
    s = gitmem.create_store("notes", home=workspace)
    s.update_settings(limits=config.Limits(max_memory_bytes=2600, max_store_bytes=3000, max_memories=4))
    s.write("/keep.md", "kept\n", actor="user:alice")
    return s


def test_sessions_share_the_room_published_content_leaves(small: gitmem.Store) -> None:
    small.write("/big0.md", BIG, caller=agent(0))
    with pytest.raises(LimitExceededError, match="max_store_bytes|limit is 3000"):
        small.write("/big1.md", BIG, caller=agent(1))
    with pytest.raises(LimitExceededError):  # the same in another scope: the limit is the store's
        small.write("/big2.md", BIG, scope="team", caller=agent(2))
    assert held(small) == len(BIG)
    small.write("/small.md", "fits\n", caller=agent(1))  # what fits still does
    small.write("/big0.md", BIG.replace("x", "y"), caller=agent(0))  # a rewrite does not grow it


def test_a_decision_frees_the_room(small: gitmem.Store) -> None:
    small.write("/big0.md", BIG, caller=agent(0))
    (p,) = small.proposals()
    small.reject(p.id, reviewer="user:lead", reason="no")
    small.write("/big1.md", BIG, caller=agent(1))  # a rejected proposal no longer counts
    (q,) = [x for x in small.proposals() if x.status == "open"]
    small.accept(q.id, reviewer="user:lead")
    assert small.read("/big1.md").content == BIG
    with pytest.raises(LimitExceededError):  # accepted: it is published content now
        small.write("/big2.md", BIG, caller=agent(2))


def test_published_writes_do_not_count_proposals(small: gitmem.Store) -> None:
    """A review-mode caller cannot block the writers who publish by filling proposals."""
    small.write("/big0.md", BIG, caller=agent(0))
    small.write("/pub.md", "y" * 2500 + "\n", actor="user:alice")
    assert small.read("/pub.md").size == 2501


def test_memory_counts_of_a_scope_s_proposals_add_up(small: gitmem.Store) -> None:
    small.update_settings(limits=config.Limits(max_memories=4))
    small.write("/a.md", "a\n", caller=agent(0))
    small.write("/b.md", "b\n", caller=agent(1))
    small.write("/c.md", "c\n", caller=agent(2))  # keep + 3 proposed = 4
    with pytest.raises(LimitExceededError):
        small.write("/d.md", "d\n", caller=agent(3))
    small.write("/d.md", "d\n", scope="team", caller=agent(3))  # another scope has its own count


def test_a_decided_path_of_an_open_proposal_is_not_counted_twice(small: gitmem.Store) -> None:
    small.update_settings(limits=config.Limits(max_memory_bytes=2600, max_store_bytes=5200))
    small.write("/big0.md", BIG, caller=agent(0))
    small.write("/other.md", "o\n", caller=agent(0))
    (p,) = small.proposals()
    small.accept(p.id, reviewer="user:lead", paths=["/big0.md"])  # published; /other.md still open
    assert [x.status for x in small.proposals()] == ["open"]
    small.write("/big1.md", BIG, caller=agent(1))  # 5 + 2501 published + 2 + 2501 proposed <= 5200


def test_concurrent_sessions_cannot_both_take_the_last_room(small: gitmem.Store) -> None:
    """Near the limit a proposal's publish checks that no other open proposal moved since its
    write was planned: of writers racing in separate sessions, one gets the room."""
    n = 4
    start = threading.Barrier(n)
    outcomes: list[str] = []

    def write(k: int) -> None:
        with gitmem.open_store(small.id, small.path.parent.parent) as s:
            start.wait()
            try:
                s.write(f"/race{k}.md", BIG, caller=agent(10 + k))
                outcomes.append("stored")
            except LimitExceededError:
                outcomes.append("refused")

    threads = [threading.Thread(target=write, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["refused"] * (n - 1) + ["stored"], outcomes
    assert held(small) == len(BIG)


def test_a_write_diffs_only_the_chains_that_moved(small: gitmem.Store) -> None:
    """What a chain holds is computed once per (base, tip): with many open proposals, a write
    adds its own chain to the cache, not every other one again."""
    small.update_settings(limits=config.Limits(max_store_bytes=10**6))
    for k in range(12):
        small.write(f"/p{k}.md", f"proposal {k}\n", caller=agent(k))
    small.write("/p0.md", "again\n", caller=agent(0))  # every chain seen once by now
    before = set(proposal_usage._cache)
    small.write("/p1.md", "again\n", caller=agent(1))
    added = set(proposal_usage._cache) - before
    assert len(added) <= 1, added  # agent 1's chain at its previous tip (planned on); no other


def test_review_erase_frees_the_room(small: gitmem.Store) -> None:
    small.write("/big0.md", BIG, caller=agent(0))
    (p,) = small.proposals()
    review.erase(small.core, p.id, reviewer="user:lead", reason="too big")
    small.write("/big1.md", BIG.replace("x", "z"), caller=agent(1))  # (the erased bytes are deny-listed)
