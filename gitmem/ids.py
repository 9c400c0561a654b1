"""ULID-based identifiers: ``mem_``, ``memver_``, ``memstore_``, ``sesn_``, ``redact_``.

A ULID is 48 bits of milliseconds and 80 bits of randomness in Crockford base32, so ids sort by
creation time. Ids made in one process are strictly increasing (the random part is incremented
within a millisecond), which keeps version ids in write order.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_lock = threading.Lock()
_last = [0, 0]  # [ms, random]

ULID_RE = "[0-9A-HJKMNP-TV-Z]{26}"
_ID_RE = re.compile(rf"^(mem|memver|memstore|sesn|redact|compact|prop|drm)_{ULID_RE}\Z")


def _encode(value: int) -> str:
    out = []
    for _ in range(26):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def new_ulid(now_ms: int | None = None) -> str:
    """A new ULID, strictly greater than the previous one made by this process."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    with _lock:
        if ms <= _last[0]:
            ms = _last[0]
            rand = (_last[1] + 1) & ((1 << 80) - 1)
        else:
            rand = int.from_bytes(os.urandom(10), "big")
        _last[0], _last[1] = ms, rand
    return _encode((ms << 80) | rand)


def derived_ulid(ms: int, *parts: str) -> str:
    """A deterministic ULID: the time part from ``ms``, the rest from a hash of ``parts``.

    Used for versions of commits made with plain git, so that rebuilding the index gives the same ids.
    """
    digest = hashlib.sha256("\0".join(parts).encode("utf-8")).digest()
    rand = int.from_bytes(digest[:10], "big")
    return _encode((max(ms, 0) << 80) | rand)


def new_id(prefix: str) -> str:
    return f"{prefix}_{new_ulid()}"


def is_id(value: str, prefix: str) -> bool:
    m = _ID_RE.match(value)
    return bool(m) and m.group(1) == prefix  # type: ignore[union-attr]
