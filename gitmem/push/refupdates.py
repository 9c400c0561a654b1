"""What a push is, for the checks behind the receive hooks: its ``old new ref`` lines
(:class:`RefUpdate`, :func:`parse_updates`), what the checks know besides the repository
(:class:`PushContext`), the objects of the push's quarantine, and violations placed on a ref."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pygit2

from gitmem.config import StoreSettings
from gitmem.engine.denylist import HEX40 as _HEX40
from gitmem.errors import InvalidInputError
from gitmem.model.policy import Violation

ZERO = "0" * 40


HEADS = "refs/heads/"


@dataclass(frozen=True)
class RefUpdate:
    """One ``old new ref`` line of a push."""

    old: str
    new: str
    ref: str

    @property
    def is_create(self) -> bool:
        return self.old == ZERO

    @property
    def is_delete(self) -> bool:
        return self.new == ZERO

    @property
    def scope(self) -> str:
        return self.ref[len(HEADS) :] if self.ref.startswith(HEADS) else ""


@dataclass(frozen=True)
class PushContext:
    """What the checks need besides the repository: settings, pusher, deny-list, clock."""

    settings: StoreSettings
    pusher: str | None = None
    denylist: frozenset[str] = frozenset()
    denyscoped: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)  # blob -> its scopes
    now: int | None = None  # seconds since the epoch; None: the current time
    quarantine: Sequence[str] = ()  # object ids found in the quarantine directory, when known
    patterns: tuple[re.Pattern[str], ...] = ()  # remembered redaction patterns (deny-patterns)
    trusted: bool = False  # the pusher's trailers are believed (acl.trust_trailers)
    session: str | None = None  # the ``-o session=...`` push option
    git_dir: Path | None = None  # the store, for the redaction marks it made (read only when needed)
    review: bool = False  # the pusher is in review mode (a ``--review`` token behind /git)


def parse_updates(stdin: str | Iterable[str]) -> list[RefUpdate]:
    """Parse the ``<old> <new> <ref>`` lines git feeds pre-receive and post-receive.

    Raises:
        InvalidInputError: on a malformed line (the hook then rejects the push).
    """
    lines = stdin.splitlines() if isinstance(stdin, str) else list(stdin)
    out = []
    for n, line in enumerate(lines, 1):
        line = line.rstrip("\r\n")
        if not line:
            continue
        parts = line.split(" ", 2)
        if len(parts) != 3 or not _HEX40.match(parts[0]) or not _HEX40.match(parts[1]) or not parts[2]:
            raise InvalidInputError(f"malformed ref update on line {n}: {line[:200]!r}")
        out.append(RefUpdate(parts[0], parts[1], parts[2]))
    return out


def quarantine_objects(path: str | None) -> list[str]:
    """Every object id in a receive-pack quarantine directory (``$GIT_QUARANTINE_PATH``)."""
    if not path or not Path(path).is_dir():
        return []
    return [str(oid) for oid in pygit2.Odb(path)]


def at_ref(v: Violation, ref: str, commit: str | None = None) -> Violation:
    return dataclasses.replace(v, ref=ref, commit=commit)


def violation(
    rule: str, message: str, ref: str, commit: str | None = None, path: str | None = None
) -> Violation:
    return Violation(rule, message, path, ref=ref, commit=commit)
