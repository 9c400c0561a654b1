"""C2SP tlog-checkpoint and tlog-cosignature (cosignature/v1) (docs/transparency.md#checkpoints).

A checkpoint's note text is ``<origin>\\n<tree size>\\n<base64 root hash>\\n`` and optional extension
lines. A cosignature/v1 (signature type 0x04, key id ``SHA-256(name || 0x0A || 0x04 || key)[:4]``) is
``u64 big-endian timestamp || Ed25519 signature`` over
``cosignature/v1\\ntime <timestamp>\\n`` followed by the checkpoint's note text.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gitmem.errors import InvalidInputError
from gitmem.model.tlog import note
from gitmem.model.tlog.merkle import EMPTY_ROOT, HASH_SIZE

_SIZE = re.compile(r"^(0|[1-9][0-9]{0,19})$")
MAX_TIMESTAMP = 2**63 - 1


@dataclass(frozen=True)
class Checkpoint:
    """A log's tree head: origin line, tree size, root hash and (not recommended) extension lines."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = field(default=())

    def body(self) -> str:
        """The note text, byte-exact as tlog-checkpoint defines it."""
        lines = [self.origin, str(self.size), note.b64(self.root), *self.extensions]
        return "".join(f"{line}\n" for line in lines)


def parse_body(text: str) -> Checkpoint:
    """The checkpoint a note text holds; InvalidInputError when it is not one (memoised: a
    Checkpoint is immutable; one this process :func:`remember`-ed is not parsed at all)."""
    return _made.get(text) or _parse_body(text)


_made: dict[str, Checkpoint] = {}


def remember(cp: Checkpoint) -> str:
    """``cp.body()``, and :func:`parse_body` of it gives ``cp`` without parsing (a checkpoint this
    process just built to sign it)."""
    text = cp.body()
    if cp.extensions or not cp.origin or "\n" in cp.origin or len(cp.root) != HASH_SIZE:
        return text  # parse_body decides about those
    if cp.size == 0 and cp.root != EMPTY_ROOT:
        return text
    if len(_made) >= 16:
        _made.clear()
    _made[text] = cp
    return text


@functools.lru_cache(maxsize=64)
def _parse_body(text: str) -> Checkpoint:
    if not text.endswith("\n"):
        raise InvalidInputError("malformed checkpoint: the text does not end in a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3 or any(not line for line in lines):
        raise InvalidInputError("malformed checkpoint: origin, size and root hash lines are required")
    origin, size, root = lines[0], lines[1], lines[2]
    if not _SIZE.match(size) or int(size) > 2**63 - 1:
        raise InvalidInputError(f"malformed checkpoint: bad tree size {size[:30]!r}")
    raw = note.b64decode(root)
    if len(raw) != HASH_SIZE:
        raise InvalidInputError("malformed checkpoint: the root hash is not 32 bytes")
    if int(size) == 0 and raw != EMPTY_ROOT:
        raise InvalidInputError("malformed checkpoint: a tree of size 0 has the empty root hash")
    return Checkpoint(origin, int(size), raw, tuple(lines[3:]))


def cosigned_message(body: str, timestamp: int) -> bytes:
    """What a cosignature/v1 signs."""
    return f"cosignature/v1\ntime {timestamp}\n{body}".encode()


@dataclass(frozen=True)
class CosignatureVerifier:
    """Verifies cosignature/v1 signatures (type 0x04) of one witness key."""

    name: str
    key_id: int
    public_key: bytes

    @functools.cached_property
    def _key(self) -> Ed25519PublicKey:
        return Ed25519PublicKey.from_public_bytes(self.public_key)

    def verify(self, text: str, sig: bytes) -> bool:
        if len(sig) != 72:
            return False
        ts = int.from_bytes(sig[:8], "big")
        if ts > MAX_TIMESTAMP:
            return False
        try:
            self._key.verify(sig[8:], cosigned_message(text, ts))
        except (InvalidSignature, ValueError):
            return False
        return True

    def vkey(self) -> str:
        return note.encode_vkey(self.name, note.ALG_COSIGNATURE_V1, self.public_key)


@dataclass(frozen=True)
class Cosigner:
    """A witness's signing key for cosignature/v1."""

    name: str
    seed: bytes = field(repr=False)

    @property
    def public_key(self) -> bytes:
        return note.raw_public(Ed25519PrivateKey.from_private_bytes(self.seed).public_key())

    @property
    def key_id(self) -> int:
        return note.key_id(self.name, note.ALG_COSIGNATURE_V1, self.public_key)

    def cosign(self, body: str, timestamp: int) -> note.Signature:
        if not 0 < timestamp <= MAX_TIMESTAMP:
            raise InvalidInputError("a cosignature's timestamp is a positive POSIX time")
        sig = Ed25519PrivateKey.from_private_bytes(self.seed).sign(cosigned_message(body, timestamp))
        return note.Signature(self.name, self.key_id, timestamp.to_bytes(8, "big") + sig)

    def verifier(self) -> CosignatureVerifier:
        return CosignatureVerifier(self.name, self.key_id, self.public_key)

    def skey(self) -> str:
        return note.encode_skey(self.name, note.ALG_COSIGNATURE_V1, self.seed, self.public_key)


def cosignature_verifier(vkey: str) -> CosignatureVerifier:
    name, kid, alg, public = note.parse_vkey(vkey)
    if alg != note.ALG_COSIGNATURE_V1:
        raise InvalidInputError(f"verifier key {name!r} is not a cosignature/v1 (0x04) key")
    return CosignatureVerifier(name, kid, public)


def cosigner(skey: str) -> Cosigner:
    name, alg, seed = note.parse_skey(skey)
    if alg != note.ALG_COSIGNATURE_V1:
        raise InvalidInputError(f"private key {name!r} is not a cosignature/v1 (0x04) key")
    return Cosigner(name, seed)


def timestamp_of(sig: note.Signature) -> int:
    """The timestamp a cosignature/v1 carries."""
    return int.from_bytes(sig.sig[:8], "big")
