"""C2SP tlog-proof (docs/transparency.md#receipts): an offline-verifiable proof of inclusion.

::

    c2sp.org/tlog-proof@v1
    extra <base64 opaque data>          (optional)
    index <zero-based leaf index>
    <base64 inclusion proof hash>       (zero or more, leaf's sibling first)

    <the checkpoint, verbatim, with its signatures and cosignatures>
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gitmem.errors import InvalidInputError
from gitmem.model.tlog import note
from gitmem.model.tlog.merkle import HASH_SIZE

HEADER = "c2sp.org/tlog-proof@v1"
_INDEX = re.compile(r"^index (0|[1-9][0-9]{0,19})$")
MAX_PROOF = 63


@dataclass(frozen=True)
class TlogProof:
    """A parsed tlog-proof: the leaf index, its inclusion proof, the checkpoint note, extra data."""

    index: int
    proof: tuple[bytes, ...]
    checkpoint: str
    extra: bytes | None = None

    def encode(self) -> str:
        lines = [HEADER]
        if self.extra is not None:
            lines.append(f"extra {note.b64(self.extra)}")
        lines.append(f"index {self.index}")
        lines += [note.b64(h) for h in self.proof]
        return "".join(f"{line}\n" for line in lines) + "\n" + self.checkpoint


def parse(text: str | bytes) -> TlogProof:
    """Parse a tlog-proof; InvalidInputError names what is wrong."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInputError("not a tlog-proof: not UTF-8") from None
    head, sep, checkpoint = text.partition("\n\n")
    lines = head.split("\n")
    if not sep or lines[0] != HEADER:
        raise InvalidInputError(f"not a tlog-proof: the first line must be {HEADER}")
    rest, extra = lines[1:], None
    if rest and rest[0].startswith("extra "):
        extra = note.b64decode(rest[0][len("extra ") :])
        rest = rest[1:]
    m = _INDEX.match(rest[0]) if rest else None
    if m is None:
        raise InvalidInputError("not a tlog-proof: no 'index N' line")
    hashes = tuple(note.b64decode(line) for line in rest[1:])
    if any(len(h) != HASH_SIZE for h in hashes) or len(hashes) > MAX_PROOF:
        raise InvalidInputError("not a tlog-proof: the inclusion proof lines are not SHA-256 hashes")
    note.parse(checkpoint)  # well-formed; verification is the verifier's, against its policy
    return TlogProof(int(m.group(1)), hashes, checkpoint, extra)
