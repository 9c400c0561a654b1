"""Point-in-time reads (gitmem.engine.past): a store with 1,000 versions over a simulated month, read
``at`` the end of every day, equals a replay of its history; the whole-store diff equals ``git diff``
of the two trees; redacted content reads as redacted at every moment; compaction's horizon is refused."""

from __future__ import annotations

import datetime as dt
import random
import subprocess

import pytest

from gitmem.engine import past
from gitmem.errors import InvalidInputError, NotFoundError
from gitmem.ids import derived_ulid
from gitmem.model.versions import format_message
from gitmem.store import Store

T0 = int(dt.datetime(2026, 3, 1, tzinfo=dt.UTC).timestamp())
DAY = 86400
ACTOR = "user:alice"


def _history(n: int = 1000, memories: int = 120, seed: int = 5) -> list[tuple[int, str, str, bytes | None]]:
    """(time, operation, path, content) of ``n`` versions spread over 30 days, in time order."""
    rng = random.Random(seed)
    times = sorted(T0 + rng.randrange(30 * DAY) for _ in range(n))
    live: dict[str, int] = {}
    out = []
    for k, when in enumerate(times):
        m = rng.randrange(memories)
        path = f"/topic-{m % 7}/note-{m:03d}.md"
        if path in live and rng.random() < 0.1:
            out.append((when, "deleted", path, None))
            del live[path]
            continue
        op = "modified" if path in live else "created"
        live[path] = k
        out.append(
            (
                when,
                op,
                path,
                f"note {m} version {k}: word{rng.randrange(50)} word{rng.randrange(50)}\n".encode(),
            )
        )
    return out


def _import(store: Store, history: list[tuple[int, str, str, bytes | None]]) -> None:
    """Write the history as commits with gitmem's trailers and the given times (``git fast-import``)."""
    chunks = []
    mids: dict[str, str] = {}
    for k, (when, op, path, data) in enumerate(history):
        vid = "memver_" + derived_ulid(when * 1000, "pit-version", str(k))
        mid = mids.setdefault(path, "mem_" + derived_ulid(when * 1000, "pit-memory", path + str(k)))
        if op == "deleted":
            mids.pop(path)
        msg = format_message(op, path, vid, mid, ACTOR, None).encode()
        chunks.append(
            f"commit refs/heads/main\nauthor {ACTOR} <{ACTOR}> {when} +0000\n"
            f"committer gitmem <gitmem> {when} +0000\ndata {len(msg)}\n".encode()
            + msg
            + (
                f"D {path[1:]}\n".encode()
                if data is None
                else f"M 100644 inline {path[1:]}\ndata {len(data)}\n".encode() + data + b"\n"
            )
        )
    chunks.append(b"done\n")
    subprocess.run(
        ["git", "fast-import", "--quiet", "--done"], cwd=store.path, input=b"".join(chunks), check=True
    )


def _replay(history: list[tuple[int, str, str, bytes | None]], until: int) -> dict[str, bytes]:
    state: dict[str, bytes] = {}
    for when, _op, path, data in history:
        if when > until:
            break
        if data is None:
            state.pop(path, None)
        else:
            state[path] = data
    return state


def _iso(epoch: int) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat().replace("+00:00", "Z")


@pytest.fixture
def month(store: Store) -> tuple[Store, list[tuple[int, str, str, bytes | None]]]:
    history = _history()
    _import(store, history)
    return store, history


def test_every_days_end_equals_a_replay(
    month: tuple[Store, list[tuple[int, str, str, bytes | None]]],
) -> None:
    store, history = month
    assert len(store.versions(limit=2000)) == 1000
    for day in range(31):
        end = T0 + (day + 1) * DAY - 1
        expected = _replay(history, end)
        listed = store.list(at=_iso(end), with_content=True)  # type: ignore[call-arg]
        got = {m.path: (m.content or "").encode() for m in listed}  # type: ignore[union-attr]
        assert got == expected, f"day {day + 1}"
        for path in sorted(expected)[:5]:
            assert store.read(path, at=_iso(end)).content == expected[path].decode()  # type: ignore[call-arg]
        # the listed ids are the versions that wrote these contents
        for m in listed[:5]:
            assert m.version_id and store.version(m.version_id).path == m.path  # type: ignore[union-attr]


def test_at_a_version_and_before_the_first(
    month: tuple[Store, list[tuple[int, str, str, bytes | None]]],
) -> None:
    store, history = month
    v = store.versions(limit=2000)[500]  # newest first
    state = {m.path for m in store.list(at=v.id)}  # type: ignore[call-arg]
    assert v.path in state or v.operation == "deleted"
    assert store.list(at=_iso(T0 - 1)) == []  # type: ignore[call-arg]
    with pytest.raises(NotFoundError):
        store.read(history[0][2], at=_iso(T0 - 1))  # type: ignore[call-arg]
    with pytest.raises(InvalidInputError):
        store.list(at="last tuesday-ish")  # type: ignore[call-arg]
    with pytest.raises(NotFoundError):
        store.list(at="memver_" + "0" * 26)  # type: ignore[call-arg]


def test_whole_store_diff_equals_git_diff(
    month: tuple[Store, list[tuple[int, str, str, bytes | None]]],
) -> None:
    store, _history_ = month
    a, b = _iso(T0 + 5 * DAY), _iso(T0 + 20 * DAY)
    ours = past.diff_between(store.core, "main", a, b)
    ca = past.resolve(store.core, "main", a).commit
    cb = past.resolve(store.core, "main", b).commit
    assert ca is not None and cb is not None
    theirs = subprocess.run(
        ["git", "diff", str(ca.tree_id), str(cb.tree_id)], cwd=store.path, capture_output=True, check=True
    ).stdout.decode()
    assert ours and ours == theirs


def test_search_at_reads_the_past_state(store: Store) -> None:
    store.write("/a.md", "the kettle is blue")
    first = store.versions()[0]
    store.write("/a.md", "the kettle is red")
    assert [h.path for h in store.search("blue", at=first.id)] == ["/a.md"]  # type: ignore[call-arg]
    assert store.search("blue") == []
    assert [h.path for h in store.search("red")] == ["/a.md"]
    assert store.search("red", at=first.id) == []  # type: ignore[call-arg]


def test_redacted_reads_as_redacted_at_every_moment(store: Store) -> None:
    store.write("/s.md", "the door code is 4417")
    secret = store.versions()[0]
    store.write("/s.md", "the door code changed")
    store.redact(secret.id, reason="a secret", actor="user:admin")
    text = store.read("/s.md", at=secret.id).content  # type: ignore[call-arg]
    assert text is not None and "4417" not in text
    assert store.search("4417", at=secret.id) == []  # type: ignore[call-arg]
    assert "4417" not in past.diff_between(store.core, "main", "@0", _iso(2**31))


def test_before_a_compaction_horizon_is_refused(
    month: tuple[Store, list[tuple[int, str, str, bytes | None]]],
) -> None:
    from gitmem.audit import retention
    from gitmem.config import Retention

    store, _h = month
    store.update_settings(retention=Retention(min_days=1, max_days=1, keep_recent=0))
    done = retention.prune(store.core, actor="user:admin", now=T0 + 16 * DAY)
    assert done.compactions
    root = [c for c in past._line(store.core, "main")][-1]
    with pytest.raises(InvalidInputError, match="horizon"):
        store.list(at=_iso(T0 + DAY))  # type: ignore[call-arg]
    assert store.list(at=_iso(root.committer.time))  # type: ignore[call-arg]
