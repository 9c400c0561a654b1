"""C2SP tlog-policy (docs/transparency.md#policies): known logs, witnesses, groups and the quorum.

Lines: ``log <vkey> [url]``, ``witness <name> <vkey> [url]``, ``group <name> all|any|<k> <member>...``,
``quorum <name>`` (or ``none``); ``#`` comments and blank lines are ignored; names are defined before
use; duplicate keys and duplicate members are refused.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from gitmem.errors import InvalidInputError
from gitmem.model.tlog import note
from gitmem.model.tlog.checkpoint import CosignatureVerifier, cosignature_verifier

NONE = "none"


@dataclass(frozen=True)
class Group:
    threshold: int
    members: tuple[str, ...]


@dataclass(frozen=True)
class Policy:
    """A parsed policy; :meth:`satisfied` evaluates the quorum over the witnesses that cosigned."""

    logs: tuple[note.Ed25519Verifier, ...]
    witnesses: dict[str, CosignatureVerifier]
    groups: dict[str, Group] = field(default_factory=dict)
    quorum: str = NONE
    urls: dict[str, str] = field(default_factory=dict)

    def satisfied(self, cosigned: Collection[str]) -> bool:
        """Whether witnesses named ``cosigned`` (policy names) meet the quorum."""
        return self._holds(self.quorum, set(cosigned))

    def _holds(self, name: str, cosigned: set[str]) -> bool:
        if name == NONE:
            return True
        if name in self.witnesses:
            return name in cosigned
        group = self.groups[name]
        return sum(self._holds(m, cosigned) for m in group.members) >= group.threshold


def parse(text: str) -> Policy:
    """Parse a policy file's text; InvalidInputError names the line at fault."""
    logs: list[note.Ed25519Verifier] = []
    witnesses: dict[str, CosignatureVerifier] = {}
    groups: dict[str, Group] = {}
    urls: dict[str, str] = {}
    keys: set[bytes] = set()
    quorum: str | None = None
    for number, raw in enumerate(text.split("\n"), 1):
        if any(ord(ch) < 0x20 and ch != "\t" for ch in raw) or "\x7f" in raw:
            raise InvalidInputError(f"policy line {number}: control character")
        words = raw.replace("\t", " ").split()
        if not words or words[0].startswith("#"):
            continue
        kind, args = words[0], words[1:]

        def bad(why: str, n: int = number) -> InvalidInputError:
            return InvalidInputError(f"policy line {n}: {why}")

        at = {"log": 0, "witness": 1}.get(kind)
        try:
            key = note.parse_vkey(args[at]) if at is not None and len(args) > at else None
        except InvalidInputError as exc:
            raise bad(exc.message) from None
        if key is not None:
            want = note.ALG_ED25519 if kind == "log" else note.ALG_COSIGNATURE_V1
            if key[2] != want:
                raise bad(f"a {kind} key must be of signature type 0x{want:02x}")
        if kind == "log" and len(args) in (1, 2):
            v = note.ed25519_verifier(args[0])
            if v.public_key in keys:
                raise bad("duplicate key")
            keys.add(v.public_key)
            logs.append(v)
        elif kind == "witness" and len(args) in (2, 3):
            name = args[0]
            if name in witnesses or name in groups or name == NONE:
                raise bad(f"name {name!r} is already defined")
            w = cosignature_verifier(args[1])
            if w.public_key in keys:
                raise bad("duplicate key")
            keys.add(w.public_key)
            witnesses[name] = w
            if len(args) == 3:
                urls[name] = args[2]
        elif kind == "group" and len(args) >= 3:
            name, k, members = args[0], args[1], tuple(args[2:])
            if name in witnesses or name in groups or name == NONE:
                raise bad(f"name {name!r} is already defined")
            if len(set(members)) != len(members):
                raise bad("a member is listed twice")
            for m in members:
                if m not in witnesses and m not in groups:
                    raise bad(f"member {m!r} is not defined above")
            threshold = {"all": len(members), "any": 1}.get(k)
            if threshold is None:
                if not k.isdigit() or not 1 <= int(k) <= len(members):
                    raise bad(f"threshold {k!r}: all, any or 1..{len(members)}")
                threshold = int(k)
            groups[name] = Group(threshold, members)
        elif kind == "quorum" and len(args) == 1:
            if quorum is not None:
                raise bad("a second quorum line")
            if args[0] != NONE and args[0] not in witnesses and args[0] not in groups:
                raise bad(f"quorum {args[0]!r} is not defined above")
            quorum = args[0]
        else:
            raise bad(f"cannot read {raw.strip()[:60]!r}")
    if quorum is None:
        raise InvalidInputError("the policy has no quorum line")
    return Policy(tuple(logs), witnesses, groups, quorum, urls)
