"""C2SP signed-note (docs/transparency.md#signed-notes): notes, signature lines, key ids and vkeys.

A signed note is its text (ending in a newline), a blank line, then one or more lines
``— <key name> <base64(key id || signature)>``. For Ed25519 (type 0x01) the key id is
``SHA-256(name || 0x0A || 0x01 || public key)[:4]`` and the signature is over the text. Verifier
keys are ``<name>+<hex key id>+<base64(type || public key)>``; private keys use the Go note
package's form ``PRIVATE+KEY+<name>+<hex key id>+<base64(type || seed)>``. Cosignature keys
(type 0x04) are :mod:`gitmem.model.tlog.checkpoint`'s.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from gitmem.errors import IntegrityError, InvalidInputError

ALG_ED25519 = 0x01
ALG_COSIGNATURE_V1 = 0x04
DASH = "\u2014 "
MAX_SIGNATURES = 100  # the spec asks for at least 16; Go's note package takes 100
_NAME = re.compile(r"[^\s+]+")
_B64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")


def b64decode(text: str) -> bytes:
    """Strict standard base64 (RFC 4648 section 4); InvalidInputError otherwise."""
    if not _B64.fullmatch(text) or len(text) % 4:
        raise InvalidInputError(f"not standard base64: {text[:40]!r}")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInputError(f"not standard base64: {text[:40]!r}") from None


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def check_name(name: str) -> str:
    """A key name: non-empty, no Unicode space, no ``+``."""
    if not _NAME.fullmatch(name):  # \s is Unicode whitespace for str patterns
        raise InvalidInputError(f"bad key name {name!r}: non-empty, no spaces and no '+'")
    return name


def key_id(name: str, alg: int, public_key: bytes) -> int:
    """``SHA-256(name || 0x0A || alg || public key)[:4]`` as a big-endian uint32."""
    digest = hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([alg]) + public_key).digest()
    return int.from_bytes(digest[:4], "big")


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


@dataclass(frozen=True)
class Signature:
    """One signature line: key name, key id and the signature bytes after the key id."""

    name: str
    key_id: int
    sig: bytes

    def line(self) -> str:
        return f"{DASH}{self.name} {b64(self.key_id.to_bytes(4, 'big') + self.sig)}\n"


@dataclass(frozen=True)
class Note:
    """A parsed signed note: its text (with the final newline) and its signature lines, in order."""

    text: str
    sigs: tuple[Signature, ...] = field(default=())

    def encode(self) -> str:
        return self.text + "\n" + "".join(s.line() for s in self.sigs)


class Verifier(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def key_id(self) -> int: ...

    def verify(self, text: str, sig: bytes) -> bool: ...


class Signer(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def key_id(self) -> int: ...

    def sign(self, text: str) -> bytes: ...


@dataclass(frozen=True)
class Ed25519Verifier:
    """Verifies Ed25519 (type 0x01) note signatures."""

    name: str
    key_id: int
    public_key: bytes

    @functools.cached_property
    def _key(self) -> Ed25519PublicKey:
        return Ed25519PublicKey.from_public_bytes(self.public_key)

    def verify(self, text: str, sig: bytes) -> bool:
        if len(sig) != 64:
            return False
        try:
            self._key.verify(sig, text.encode("utf-8"))
        except (InvalidSignature, ValueError):
            return False
        return True

    def vkey(self) -> str:
        return encode_vkey(self.name, ALG_ED25519, self.public_key)


@dataclass(frozen=True)
class Ed25519Signer:
    """Signs notes with an Ed25519 key (type 0x01)."""

    name: str
    seed: bytes = field(repr=False)

    @functools.cached_property
    def _key(self) -> Ed25519PrivateKey:
        return Ed25519PrivateKey.from_private_bytes(self.seed)

    @functools.cached_property
    def public_key(self) -> bytes:
        return raw_public(self._key.public_key())

    @functools.cached_property
    def key_id(self) -> int:
        return key_id(self.name, ALG_ED25519, self.public_key)

    def sign(self, text: str) -> bytes:
        return self._key.sign(text.encode("utf-8"))

    def verifier(self) -> Ed25519Verifier:
        return Ed25519Verifier(self.name, self.key_id, self.public_key)

    @functools.cached_property
    def vkey(self) -> str:
        """The verifier key, as :meth:`Ed25519Verifier.vkey` spells it."""
        return self.verifier().vkey()

    def skey(self) -> str:
        return encode_skey(self.name, ALG_ED25519, self.seed, self.public_key)


def encode_vkey(name: str, alg: int, public_key: bytes) -> str:
    return f"{check_name(name)}+{key_id(name, alg, public_key):08x}+{b64(bytes([alg]) + public_key)}"


def encode_skey(name: str, alg: int, seed: bytes, public_key: bytes) -> str:
    return f"PRIVATE+KEY+{check_name(name)}+{key_id(name, alg, public_key):08x}+{b64(bytes([alg]) + seed)}"


def parse_vkey(vkey: str) -> tuple[str, int, int, bytes]:
    """``(name, key id, type, public key)`` of a vkey; the key id must match the key."""
    parts = vkey.strip().split("+", 2)
    if len(parts) != 3 or not re.fullmatch(r"[0-9a-f]{8}", parts[1]):
        raise InvalidInputError(f"not a verifier key (name+hex8+base64): {vkey[:60]!r}")
    name, kid = check_name(parts[0]), int(parts[1], 16)
    raw = b64decode(parts[2])
    if len(raw) != 33 or raw[0] not in (ALG_ED25519, ALG_COSIGNATURE_V1):
        raise InvalidInputError(f"verifier key {name!r}: not an Ed25519 (0x01) or cosignature/v1 (0x04) key")
    if key_id(name, raw[0], raw[1:]) != kid:
        raise InvalidInputError(f"verifier key {name!r}: the key id does not match the key")
    return name, kid, raw[0], raw[1:]


def parse_skey(skey: str) -> tuple[str, int, bytes]:
    """``(name, type, seed)`` of a ``PRIVATE+KEY+...`` string; the key id must match."""
    parts = skey.strip().split("+", 4)
    if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"] or not re.fullmatch(r"[0-9a-f]{8}", parts[3]):
        raise InvalidInputError("not a private key (PRIVATE+KEY+name+hex8+base64)")
    name, raw = check_name(parts[2]), b64decode(parts[4])
    if len(raw) != 33 or raw[0] not in (ALG_ED25519, ALG_COSIGNATURE_V1):
        raise InvalidInputError(f"private key {name!r}: not an Ed25519 key")
    public = raw_public(Ed25519PrivateKey.from_private_bytes(raw[1:]).public_key())
    if key_id(name, raw[0], public) != int(parts[3], 16):
        raise InvalidInputError(f"private key {name!r}: the key id does not match the key")
    return name, raw[0], raw[1:]


def ed25519_verifier(vkey: str) -> Ed25519Verifier:
    """A verifier of note signatures (type 0x01) from its vkey."""
    name, kid, alg, public = parse_vkey(vkey)
    if alg != ALG_ED25519:
        raise InvalidInputError(f"verifier key {name!r} is not an Ed25519 (0x01) note key")
    return Ed25519Verifier(name, kid, public)


def ed25519_signer(skey: str) -> Ed25519Signer:
    name, alg, seed = parse_skey(skey)
    if alg != ALG_ED25519:
        raise InvalidInputError(f"private key {name!r} is not an Ed25519 (0x01) note key")
    return Ed25519Signer(name, seed)


def parse(note: str | bytes) -> Note:
    """Split a signed note into text and signature lines (no verification). A note is immutable:
    the last ones parsed are memoised (a witness round and a checkpoint commit read the same few)."""
    if isinstance(note, bytes):
        try:
            note = note.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInputError("malformed note: not UTF-8") from None
    return _signed.get(note) or _parse(note)


_signed: dict[str, Note] = {}  # notes this process signed (their encoding), parsed already


def remember(signed: Note) -> str:
    """``signed.encode()``, and :func:`parse` of it gives ``signed`` without parsing (a note this
    process just signed: the witness round reads it next)."""
    text = signed.encode()
    if _CONTROL.search(text):  # parse would refuse it: it parses it (and refuses it) then
        return text
    if len(_signed) >= 16:
        _signed.clear()
    _signed[text] = signed
    return text


@functools.lru_cache(maxsize=64)
def _parse(note: str) -> Note:
    if _CONTROL.search(note):
        raise InvalidInputError("malformed note: control characters")
    split = note.rfind("\n\n")
    if split < 0 or not note.endswith("\n"):
        raise InvalidInputError("malformed note: no blank line before the signatures")
    text, block = note[: split + 1], note[split + 2 :]
    return Note(text, _signature_lines(block))


def _signature_lines(block: str) -> tuple[Signature, ...]:
    sigs: list[Signature] = []
    for line in block.splitlines():
        if not line.startswith(DASH):
            raise InvalidInputError(f"malformed note: not a signature line: {line[:60]!r}")
        name, sep, data = line[len(DASH) :].partition(" ")
        raw = b64decode(data) if sep else b""
        if not sep or len(raw) < 5:
            raise InvalidInputError(f"malformed note: bad signature line: {line[:60]!r}")
        sigs.append(Signature(check_name(name), int.from_bytes(raw[:4], "big"), raw[4:]))
    if not sigs or len(sigs) > MAX_SIGNATURES:
        raise InvalidInputError(f"malformed note: {len(sigs)} signatures (1 to {MAX_SIGNATURES})")
    return tuple(sigs)


def with_lines(parsed: Note, lines: str) -> Note:
    """``parsed`` with the signature lines ``lines`` (a witness's answer) after its own: what
    :func:`parse` gives for ``parsed.encode() + lines``, without parsing ``parsed`` again."""
    if _CONTROL.search(lines) or not lines.endswith("\n"):
        raise InvalidInputError("malformed note: the signature lines end in a newline, no control characters")
    got = _signature_lines(lines)
    if len(parsed.sigs) + len(got) > MAX_SIGNATURES:
        raise InvalidInputError(f"malformed note: more than {MAX_SIGNATURES} signatures")
    return Note(parsed.text, (*parsed.sigs, *got))


def verified(note: Note, verifiers: Iterable[Verifier]) -> list[Signature]:
    """The signatures of known keys, each verified: a known key's bad signature raises IntegrityError
    (the whole note is rejected); unknown keys are ignored (it may be empty)."""
    known: dict[tuple[str, int], Verifier] = {}
    for v in verifiers:
        known.setdefault((v.name, v.key_id), v)
    out: list[Signature] = []
    for s in note.sigs:
        found = known.get((s.name, s.key_id))
        if found is None:
            continue
        if not found.verify(note.text, s.sig):
            raise IntegrityError(f"the signature of {s.name}+{s.key_id:08x} does not verify")
        out.append(s)
    return out


def open_note(note: str | bytes, verifiers: Iterable[Verifier]) -> Note:
    """Parse and verify: at least one signature of a known key must verify (IntegrityError)."""
    parsed = parse(note)
    if not verified(parsed, verifiers):
        raise IntegrityError("the note has no verifiable signature from a trusted key")
    return parsed


def sign(text: str, signers: Sequence[Signer], keep: Iterable[Signature] = ()) -> Note:
    """A note of ``text`` signed by ``signers`` (after the signatures in ``keep``, minus theirs)."""
    if not text.endswith("\n") or text.endswith("\n\n") or text.startswith("\n"):
        raise InvalidInputError("a note text ends in one newline and starts with a non-empty line")
    if _CONTROL.search(text):
        raise InvalidInputError("a note text has no control characters")
    mine = {(s.name, s.key_id) for s in signers}
    kept = [s for s in keep if (s.name, s.key_id) not in mine]
    return Note(text, (*kept, *(Signature(s.name, s.key_id, s.sign(text)) for s in signers)))
