"""Secret detection of the write-time guard: well-known credential formats, passwords in URLs and
assignments, private-key blocks and high-entropy strings. Pure functions; no I/O.

Everything works on the text as ASCII bytes, each non-ASCII character replaced by one ``?`` (see
:func:`ascii_view`), so byte offsets are character offsets. Speed comes from a prefilter: one
``bytes.translate`` marks the characters a token can be made of, and only runs of at least
:data:`MIN_TOKEN` of them are looked at by the token rules and the entropy test. Rules that need
context (URLs, ``password = ...``, PEM blocks) are gated by plain substring searches; those, and
the driver :func:`gitmem.model.guard_secrets.secret_hits`, are in :mod:`gitmem.model.guard_secrets`.
This module holds the hit type, the token rules (with AWS keys) and the entropy test. The paragraph
memo lives in guard_memo.py.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from typing import NamedTuple


class Hit(NamedTuple):
    """One match before the policy's allow-list: ``value`` is the sensitive text and never leaves
    the guard; ``preview`` is what may be shown."""

    rule: str
    kind: str
    start: int
    end: int
    value: str
    preview: str
    rank: int  # lower wins when two hits overlap


def ascii_view(text: str) -> bytes:
    """``text`` as bytes with one byte per character (non-ASCII and lone surrogates become ``?``)."""
    if text.isascii():
        return text.encode("ascii")
    return text.encode("ascii", "replace")


def mask(value: str | bytes, visible: int = 0) -> str:
    """``value`` shown as its first ``visible`` characters (at most a quarter of it), an ellipsis
    and its length: never the value itself."""
    raw = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    keep = min(visible, len(raw) // 4)
    return f"{raw[:keep]}… ({len(raw)} chars)"


# ------------------------------------------------------------------------------------ tokens
_TOKEN_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_=.-")
_TOKEN_TABLE = bytes(0x61 if i in _TOKEN_CHARS else 0x20 for i in range(256))
MIN_TOKEN = 20
_RUN = b"a" * MIN_TOKEN
_ALNUM = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")


def token_spans(data: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of every run of at least :data:`MIN_TOKEN` token characters."""
    marked = data.translate(_TOKEN_TABLE)
    find = marked.find
    i = find(_RUN)
    while i >= 0:
        j = find(b" ", i + MIN_TOKEN)
        if j < 0:
            j = len(marked)
        yield i, j
        i = find(_RUN, j)


def _has_random_mix(value: bytes) -> bool:
    return count_of(value, DIGITS) > 0 and count_of(value, UPPER) > 0 and count_of(value, LOWER) > 0


def _jwt_header(value: bytes) -> bool:
    head = value.split(b".", 1)[0]
    try:
        decoded = json.loads(base64.urlsafe_b64decode(head + b"=" * (-len(head) % 4)))
    except (ValueError, binascii.Error):
        return False
    return isinstance(decoded, dict)


def _slack_ids(value: bytes) -> bool:
    return count_of(value, DIGITS) > 0


class _Rule(NamedTuple):
    id: str
    pattern: bytes
    reveal: int  # length of the published prefix that the preview may show
    fixed: bool = False  # a fixed-length format: the next character must not be alphanumeric
    check: Callable[[bytes], bool] | None = None  # a test of the part after the prefix


# Token prefixes and lengths are the providers' published formats; the regexes are this project's.
TOKEN_RULES: tuple[_Rule, ...] = (
    *(_Rule("aws-access-key-id", p + rb"[A-Z2-7]{16}", 4, fixed=True) for p in (b"AKIA", b"ASIA", b"ABIA", b"ACCA")),
    _Rule("gcp-api-key", rb"AIza[0-9A-Za-z_-]{35}", 4, fixed=True),
    _Rule("google-oauth-client-secret", rb"GOCSPX-[0-9A-Za-z_-]{28}", 7, fixed=True),
    _Rule("google-oauth-token", rb"ya29\.[0-9A-Za-z_-]{30,}", 5),
    _Rule("google-oauth-token", rb"1//0[0-9A-Za-z_-]{40,}", 4),
    _Rule("azure-storage-key", rb"AccountKey=[A-Za-z0-9+/]{86}==", 11),
    _Rule("azure-storage-key", rb"SharedAccessKey=[A-Za-z0-9+/]{43}=", 16),
    *(_Rule("github-token", b"gh" + c + rb"_[A-Za-z0-9]{36}", 4, fixed=True) for c in (b"p", b"o", b"u", b"s", b"r")),
    _Rule("github-token", rb"github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}", 11, fixed=True),
    _Rule("gitlab-token", rb"glpat-[A-Za-z0-9_-]{20,}", 6),
    *(_Rule("slack-token", b"xox" + c + rb"-[A-Za-z0-9-]{10,}", 5, check=_slack_ids) for c in (b"b", b"p", b"a", b"o", b"s", b"r")),
    _Rule("slack-webhook", rb"hooks\.slack\.com/services/T[A-Z0-9]{8,}/B[A-Z0-9]{8,}/[A-Za-z0-9]{24}", 16),
    _Rule("stripe-live-key", rb"sk_live_[A-Za-z0-9]{24,}", 8),
    _Rule("stripe-live-key", rb"rk_live_[A-Za-z0-9]{24,}", 8),
    _Rule("anthropic-api-key", rb"sk-ant-[A-Za-z0-9_-]{32,}", 7),
    _Rule("openai-api-key", rb"sk-(?!ant-)[A-Za-z0-9_-]{20,}", 3, check=_has_random_mix),
    _Rule("twilio-api-key", rb"SK[0-9a-fA-F]{32}", 2, fixed=True),
    _Rule("sendgrid-api-key", rb"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}", 3, fixed=True),
    _Rule("npm-token", rb"npm_[A-Za-z0-9]{36}", 4, fixed=True),
    _Rule("pypi-token", rb"pypi-AgE[A-Za-z0-9_-]{50,}", 5),
    _Rule("gitmem-token", rb"gitmem_[0-9A-HJKMNP-TV-Z]{26}_[A-Za-z0-9_-]{43}", 7, fixed=True),
    _Rule("jwt", rb"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*", 3, check=_jwt_header),
)  # fmt: skip


# Every branch starts with a literal byte and holds no group, so the regex engine skips a position
# on its first byte; which rule matched is found afterwards (the first whose own regex matches).
def _grouped(patterns: list[bytes]) -> bytes:
    """One alternation with the branches grouped by their first byte: ``a(?:x|y)|b(?:z)``."""
    groups: dict[bytes, list[bytes]] = {}
    for p in patterns:
        groups.setdefault(p[:1], []).append(p[1:])
    return b"|".join(re.escape(k) + b"(?:" + b"|".join(rest) + b")" for k, rest in groups.items())


_TOKEN_RE = re.compile(_grouped([r.pattern for r in TOKEN_RULES]))
_RULE_RES = tuple((r, re.compile(r.pattern)) for r in TOKEN_RULES)
RULE_IDS: tuple[str, ...] = tuple(dict.fromkeys(r.id for r in TOKEN_RULES)) + (
    "aws-secret-access-key",
    "gcp-service-account-key",
    "private-key",
    "url-password",
    "password-assignment",
    "high-entropy-string",
)


class Tokens:
    """The candidate tokens joined by newlines, so that each regex runs once over all of them;
    positions in the joined bytes map back to the text with :meth:`at`."""

    def __init__(self, data: bytes) -> None:
        # token_spans, inlined: one loop finds the spans and their offsets in the joined bytes
        marked = data.translate(_TOKEN_TABLE)
        find = marked.find
        size = len(marked)
        spans: list[tuple[int, int]] = []
        starts: list[int] = []
        pos = 0
        i = find(_RUN)
        while i >= 0:
            j = find(b" ", i + MIN_TOKEN)
            if j < 0:
                j = size
            spans.append((i, j))
            starts.append(pos)
            pos += j - i + 1
            i = find(_RUN, j)
        self.spans = spans
        self.starts = starts
        self.joined = b"\n".join([data[s:e] for s, e in spans])

    def at(self, pos: int) -> int:
        """The text offset of joined position ``pos``."""
        k = bisect.bisect_right(self.starts, pos) - 1
        return self.spans[k][0] + pos - self.starts[k]


def token_rules(tokens: Tokens) -> Iterator[Hit]:
    joined = tokens.joined
    for m in _TOKEN_RE.finditer(joined):
        s, e = m.span()
        rule = next(r for r, regex in _RULE_RES if regex.match(joined, s, e))
        if s > 0 and joined[s - 1] in _ALNUM:
            continue
        if rule.fixed and e < len(joined) and joined[e] in _ALNUM:
            continue
        value = m.group()
        tail = value[rule.reveal :]
        if len(set(tail)) < 6 or (
            rule.check is not None and not rule.check(tail if rule.id != "jwt" else value)
        ):
            continue
        start = tokens.at(s)
        yield Hit(rule.id, "secret", start, start + e - s, value.decode(), mask(value, rule.reveal), 0)


_AWS_CONTEXT = 120
_AWS_SECRET_RE = re.compile(rb"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])")  # what is found
_AWS_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/+")
_AWS_FOLD = bytes(0x61 if i in _AWS_CHARS else 0x20 for i in range(256))
_AWS_RUN = b" " + b"a" * 40 + b" "


def aws_secrets(data: bytes, lower: bytes, tokens: Tokens, secrets: list[int]) -> Iterator[Hit]:
    """A 40-character AWS secret access key (``_AWS_SECRET_RE``), when its line names AWS and a
    secret in the 120 characters before it.

    A key's characters are token characters, so a key is a run of exactly 40 of them in the joined
    tokens: with those characters folded to ``a`` and the others to a space, a substring search for
    a space, 40 ``a`` and a space finds every one. Only the 120 characters before a key are read
    (a long line is never walked back to its start). ``secrets``: the offsets of ``secret`` in
    ``lower``; a key without one in the 120 characters before it is not looked at further."""
    if not secrets:
        return
    classed = b" " + tokens.joined.translate(_AWS_FOLD) + b" "
    i = classed.find(_AWS_RUN)
    while i >= 0:
        s = tokens.at(i)  # classed[i + 1] is joined[i]
        k = bisect.bisect_right(secrets, s - 6)
        if k and secrets[k - 1] >= s - _AWS_CONTEXT:
            lo = max(0, s - _AWS_CONTEXT)
            newline = data.rfind(b"\n", lo, s)
            context = lower[newline + 1 if newline >= 0 else lo : s]
            value = data[s : s + 40]
            if b"aws" in context and b"secret" in context and count_of(value, DIGITS):
                yield Hit("aws-secret-access-key", "secret", s, s + 40, value.decode(), mask(value), 0)
        i = classed.find(_AWS_RUN, i + 41)  # the next run may start on this one's closing space


# ----------------------------------------------------------------------------------- entropy
DIGITS = b"0123456789"
UPPER = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"
LOWER = b"abcdefghijklmnopqrstuvwxyz"
_HEX = b"0123456789abcdefABCDEF"
_LOWER_RUN = re.compile(rb"[a-z]{3,}")
# Public keys in the ssh wire format start with the key type's length and name, base64-encoded.
_SSH_PUBLIC = (b"AAAAB3NzaC1", b"AAAAC3NzaC1", b"AAAAE2VjZHNh")


def count_of(value: bytes, chars: bytes) -> int:
    return len(value) - len(value.translate(None, chars))


def entropy(value: bytes) -> float:
    """Shannon entropy of ``value`` in bits per character."""
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def _threshold(n: int, alphabet: int) -> float:
    """About the 1st percentile of the entropy of ``n`` random characters of a base64 (64) or
    single-case alphanumeric (36) alphabet: fitted on random samples, 20 <= n <= 64."""
    n = min(n, 64)
    if alphabet == 64:
        return math.log2(n) - 0.45 - 0.01 * n
    return math.log2(n) - 0.55 - 0.018 * n


def _decodes_to_text(value: bytes) -> bool:
    """``value`` is base64 of printable text (an encoded note, not a key)."""
    url = b"-" in value or b"_" in value
    if url and (b"+" in value or b"/" in value):
        return False
    body = value.rstrip(b"=")
    try:
        raw = (base64.urlsafe_b64decode if url else base64.b64decode)(body + b"=" * (-len(body) % 4))
    except (ValueError, binascii.Error):
        return False
    if not raw:
        return False
    printable = len(raw) - len(raw.translate(None, bytes(range(32, 127)) + b"\t\n\r"))
    return printable >= 0.9 * len(raw)


# gitmem's own public ids (a version, a memory, a redaction, a session, a token's public id, the
# session of a token's MCP writes, ``sesn_mcp_<its ULID>``): agents note them in memories ("see
# memver_..."), redaction marks carry them, and the ledger records sessions. A token's secret
# (gitmem_<ULID>_<random>) is not one of these. Only what gitmem could have minted passes: a ULID
# whose first 10 characters are a time between 2015 and 2100, which a random draw of 26 Crockford
# characters hits about once in 400 (docs/guard.md#rules).
_GITMEM_ID = re.compile(
    rb"(?:mem|memver|memstore|redact|sesn|sesn_mcp|prop|compact|req|apikey|drm)_([0-9A-HJKMNP-TV-Z]{26})\Z"
)
_CROCKFORD = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_ULID_TIMES = (1_420_070_400_000, 4_102_444_800_000)  # 2015-01-01 .. 2100-01-01, in ms


def _gitmem_id(piece: bytes) -> bool:
    m = _GITMEM_ID.match(piece)
    if m is None:
        return False
    ms = 0
    for c in m.group(1)[:10]:
        ms = ms * 32 + _CROCKFORD.index(c)
    return _ULID_TIMES[0] <= ms < _ULID_TIMES[1]


def _random_piece(piece: bytes) -> bool:
    n = len(piece)
    if not piece.translate(None, _HEX):
        return False  # hex: digests, ids and UUIDs look exactly like random keys (see docs/guard.md)
    if _gitmem_id(piece):
        return False
    if count_of(piece, b"/-_") >= max(3, n // 16):
        return False  # words joined by separators: a path, a slug, a snake_case name
    digits, upper, lower = count_of(piece, DIGITS), count_of(piece, UPPER), count_of(piece, LOWER)
    if digits and upper and lower:
        alphabet = 64
        if sum(len(w) for w in _LOWER_RUN.findall(piece)) > 0.4 * n:
            return False  # camelCase words
    elif digits and (upper or lower) and n >= 32:
        alphabet = 36
    else:
        return False
    if entropy(piece) < _threshold(n, alphabet):
        return False
    if sum(b - a == 1 for a, b in zip(piece, piece[1:], strict=False)) > n // 4:
        return False  # an alphabet or a counting sequence, not a random draw
    return not _decodes_to_text(piece)


# A run of base64 / base64url characters, at least MIN_TOKEN long, holding a digit:
#   (?<![A-Za-z0-9+/_-])(?=[A-Za-z+/_-]*[0-9])[A-Za-z0-9][A-Za-z0-9+/_-]{18,}[A-Za-z0-9]
# matched on the joined tokens folded to classes (letter a, digit 0, one of +/_- b, anything else
# a space, and a space in front), so that each match starts on a literal space, which the regex
# engine finds quickly, instead of trying the lookbehind at every position.
_PIECE_CLASS = {
    **dict.fromkeys(UPPER + LOWER, 0x61),
    **dict.fromkeys(DIGITS, 0x30),
    **dict.fromkeys(b"+/_-", 0x62),
}
_PIECE_FOLD = bytes(_PIECE_CLASS.get(i, 0x20) for i in range(256))
_PIECE_RE = re.compile(rb" (?=[ab]*0)[a0][ab0]{%d,}[a0]" % (MIN_TOKEN - 2))


class Covered:
    """Is an offset inside one of some (possibly overlapping) ranges: a bisection, not a scan."""

    def __init__(self, ranges: list[tuple[int, int]]) -> None:
        ranges = sorted(ranges)
        self.starts = [a for a, _ in ranges]
        self.reach: list[int] = []
        best = -1
        for _, b in ranges:
            best = max(best, b)
            self.reach.append(best)

    def __contains__(self, pos: int) -> bool:
        k = bisect.bisect_right(self.starts, pos) - 1
        return k >= 0 and self.reach[k] > pos


# Pieces already judged not random (ids, digests, words): memories are rewritten with small edits,
# so most of a write's pieces were seen by the previous one. Only rejects are kept, so the cache
# never holds a secret; it is dropped whole when full.
_NOT_RANDOM: set[bytes] = set()
_NOT_RANDOM_MAX = 8192


def high_entropy(data: bytes, tokens: Tokens, skip: Covered) -> Iterator[Hit]:
    joined = tokens.joined
    for m in _PIECE_RE.finditer(b" " + joined.translate(_PIECE_FOLD)):
        start, end = m.start(), m.end() - 1
        piece = joined[start:end]
        if piece in _NOT_RANDOM:
            continue
        if piece.startswith(_SSH_PUBLIC) or not _random_piece(piece):
            if len(_NOT_RANDOM) >= _NOT_RANDOM_MAX:
                _NOT_RANDOM.clear()
            _NOT_RANDOM.add(piece)
            continue
        s = tokens.at(start)
        if data[max(0, s - 7) : s] == b"base64," or s in skip:
            continue  # a data: URI (an embedded image), or a certificate / public key block
        yield Hit("high-entropy-string", "secret", s, s + len(piece), piece.decode(), mask(piece, 3), 2)
