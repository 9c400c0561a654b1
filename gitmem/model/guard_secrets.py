"""Secret detection of the write-time guard, part two: the rules gated by plain substring searches
(PEM private-key blocks, passwords in URLs, ``password = ...`` assignments) and the driver,
:func:`secret_hits`, that runs every rule (the token rules and the entropy test are in
:mod:`gitmem.model.guard_rules`) paragraph by paragraph (gitmem.model.guard_memo). Pure functions;
no I/O; offsets as in guard_rules (the text as ASCII bytes, see :func:`gitmem.model.guard_rules.ascii_view`).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator

from gitmem.model.guard_memo import ParagraphMemo, ScanRecord, by_paragraph
from gitmem.model.guard_rules import (
    DIGITS,
    LOWER,
    UPPER,
    Covered,
    Hit,
    Tokens,
    aws_secrets,
    count_of,
    high_entropy,
    token_rules,
)

# ------------------------------------------------------------------------ gated by substrings
_PEM_RE = re.compile(rb"-----BEGIN ([A-Z0-9 ]{0,40})-----")
_PEM_END = b"-----END "
_PEM_END_RE = re.compile(rb"-----END ([A-Z0-9 ]{0,40})-----")
_PEM_BODY = re.compile(rb"[A-Za-z0-9+/=\s\\n:,-]{0,300}?[A-Za-z0-9+/]{40}")


_PEM_SEARCHES = 8  # END lines searched for one by one; past that, all are indexed in one pass


def _pem_ends(data: bytes) -> dict[bytes, list[int]]:
    """The offsets of the ``-----END <label>-----`` lines by label, ascending (found with a
    substring search per occurrence, as END lines may share their dashes)."""
    ends: dict[bytes, list[int]] = {}
    q = data.find(_PEM_END)
    while q >= 0:
        m = _PEM_END_RE.match(data, q)
        if m:
            ends.setdefault(m.group(1), []).append(q)
        q = data.find(_PEM_END, q + 1)
    return ends


def pem_blocks(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(start, end, label) of each PEM block (``end`` is after its END line, or its header).

    A block ends at the first END line of its label after its header. The first few are searched
    for directly; many headers (thousands without an END, say) switch to an index of the END lines
    built in one pass, so that the work stays linear in the text."""
    ends: dict[bytes, list[int]] | None = None
    for n, m in enumerate(_PEM_RE.finditer(data)):
        label = m.group(1)
        if n < _PEM_SEARCHES:
            end_marker = data.find(_PEM_END + label + b"-----", m.end())
        else:
            if ends is None:
                ends = _pem_ends(data)
            markers = ends.get(label, [])
            k = bisect.bisect_left(markers, m.end())
            end_marker = markers[k] if k < len(markers) else -1
        end = end_marker + len(label) + 14 if end_marker >= 0 else m.end()
        yield m.start(), end, label


def _private_keys(data: bytes, blocks: list[tuple[int, int, bytes]]) -> Iterator[Hit]:
    for start, end, label in blocks:
        if not label.endswith((b"PRIVATE KEY", b"PRIVATE KEY BLOCK")):
            continue
        header_end = start + len(label) + 16
        if not _PEM_BODY.match(data, header_end):
            continue  # a header without key material: prose about the format
        before = data[max(0, start - 40) : start]
        rule = "gcp-service-account-key" if b'"private_key"' in before else "private-key"
        value = data[header_end:end].decode("ascii", "replace")
        preview = f"-----BEGIN {label.decode()}-----… ({end - start} chars)"
        yield Hit(rule, "secret", start, max(end, header_end), value, preview, 0)


_URL_AUTH = re.compile(rb"([^\s:/@?#\[\]\"'<>]{1,128}):([^\s/@?#\"'<>]{1,256})@[A-Za-z0-9.-]+")
_URL_REACH = 1 + 128 + 1 + 256 + 8  # from "://" to its "@": ":" user ":" password, and a margin
_SCHEME_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-"


_DUMMIES = re.compile(rb"xxx|\*\*\*|\.\.\.|example|placeholder|redacted|your|changeme")
_DUMMY_WORDS = frozenset(
    (b"password", b"passwd", b"pass", b"secret", b"token", b"none", b"null", b"true", b"false")
)


def _placeholder(value: bytes) -> bool:
    """An obvious stand-in: a template, a variable, a mask or a well-known dummy word."""
    if value[:1] in b"$<{%[(*" or len(set(value)) < 3 or value.isupper() and b"_" in value:
        return True
    low = value.lower()
    return _DUMMIES.search(low) is not None or low in _DUMMY_WORDS


def _schemes_before_at(data: bytes) -> Iterator[int]:
    """The offsets of the ``://`` that a user and password could join to an ``@`` (at most
    :data:`_URL_REACH` before it, as neither part holds an ``@``), ascending, each once. The
    windows searched do not overlap, so the whole text is searched at most once."""
    done = 0
    at = data.find(b"@")
    while at >= 0:
        i = data.find(b"://", max(done, at - _URL_REACH), at)
        while i >= 0:
            yield i
            i = data.find(b"://", i + 3, at)
        done = at
        at = data.find(b"@", at + 1)


def _url_passwords(data: bytes) -> Iterator[Hit]:
    for i in _schemes_before_at(data):
        m = _URL_AUTH.match(data, i + 3)
        if m and not _placeholder(m.group(2)):
            before = data[max(0, i - 32) : i]
            scheme = before[len(before.rstrip(_SCHEME_CHARS)) :].lstrip(b"0123456789+.-")
            if scheme:
                s, e = m.span(2)
                preview = f"{scheme.decode()}://…:… (password of {e - s} chars)"
                yield Hit("url-password", "secret", s, e, m.group(2).decode(), preview, 1)


_KEYWORDS = (b"pass", b"pwd", b"secret", b"key", b"token")
_KEY_NAMES = (
    b"password", b"passwd", b"passphrase", b"pwd", b"_pass", b"secret", b"secret_key", b"secretkey",
    b"api_key", b"apikey", b"private_key", b"access_token", b"auth_token", b"refresh_token", b"_token",
)  # fmt: skip
_KEY_ALONE = {b"pass", b"token"}
# A keyword, the rest of the name, an assignment: each regex starts with its literal keyword, which
# the regex engine finds with a fast substring search; only assignments reach Python code.
_KEYWORD_RES = tuple(re.compile(w + rb"""([a-z0-9_.-]{0,64})["']?[ \t]*[=:]""") for w in _KEYWORDS)
_NAME_CHARS = b"abcdefghijklmnopqrstuvwxyz0123456789_.-"
_ASSIGN = re.compile(
    rb"""["']?[ \t]*(?::=|=>|=|:)[ \t]*(?:"([^"\s]{4,256})"|'([^'\s]{4,256})'|([^\s"',;`]{8,256}))"""
)


def occurrences(data: bytes, word: bytes) -> list[int]:
    """Every offset of ``word`` in ``data``, ascending."""
    out: list[int] = []
    find = data.find
    i = find(word)
    while i >= 0:
        out.append(i)
        i = find(word, i + 1)
    return out


def _keyword_matches(lower: bytes, n: int, secrets: list[int]) -> Iterator[re.Match[bytes]]:
    """The matches of keyword regex ``n``. For ``secret`` its offsets, found already, are matched
    one by one: besides the non-overlapping matches this yields the ones inside a match, which end
    their name where it does (and are dropped as seen)."""
    regex = _KEYWORD_RES[n]
    if _KEYWORDS[n] != b"secret":
        yield from regex.finditer(lower)
        return
    for i in secrets:
        m = regex.match(lower, i)
        if m is not None:
            yield m


def _assignments(data: bytes, lower: bytes, secrets: list[int]) -> Iterator[Hit]:
    seen: set[int] = set()
    for n in range(len(_KEYWORDS)):
        for ahead in _keyword_matches(lower, n, secrets):
            e = ahead.end(1)
            if e in seen:
                continue
            seen.add(e)
            at = ahead.start()
            left = max(0, at - 64)
            s = left + len(lower[left:at].rstrip(_NAME_CHARS))
            name = lower[s:e].replace(b"-", b"_").replace(b".", b"_")
            if not (name.endswith(_KEY_NAMES) or name in _KEY_ALONE):
                continue
            m = _ASSIGN.match(data, e)
            if not m:
                continue
            group = m.lastindex or 3  # the one alternative that matched: "...", '...' or bare
            value = m.group(group)
            if _placeholder(value) or group == 3 and not _plain_secret(value):
                continue
            vs, ve = m.span(group)
            preview = f"{data[s:e].decode()}=… ({ve - vs} chars)"
            yield Hit("password-assignment", "secret", vs, ve, value.decode(), preview, 1)


def _plain_secret(value: bytes) -> bool:
    """An unquoted value that looks like a secret rather than code: letters and digits, no call."""
    return bool(count_of(value, DIGITS)) and bool(count_of(value, UPPER + LOWER)) and b"(" not in value


# ------------------------------------------------------------------------------------ driver
def _line_rules(data: bytes) -> list[list[Hit]]:
    """The hits of the rules that stay within a line: token formats, AWS keys, high-entropy pieces
    (PEM public blocks not yet left out), URL passwords, assignments; in that order."""
    lower = data.lower()
    secrets = occurrences(lower, b"secret")
    tokens = Tokens(data)
    token_hits: list[Hit] = []
    aws_hits: list[Hit] = []
    entropy_hits: list[Hit] = []
    if tokens.spans:
        token_hits = list(token_rules(tokens))
        aws_hits = list(aws_secrets(data, lower, tokens, secrets))
        entropy_hits = list(high_entropy(data, tokens, Covered([])))
    return [
        token_hits,
        aws_hits,
        entropy_hits,
        list(_url_passwords(data)),
        list(_assignments(data, lower, secrets)),
    ]


def secret_hits(
    data: bytes, clean: ParagraphMemo | None = None, record: ScanRecord | None = None
) -> list[Hit]:
    """Every secret-kind hit in ``data`` (an :func:`ascii_view`), overlapping ones included;
    paragraphs in ``clean`` are skipped (see :func:`gitmem.model.guard_memo.by_paragraph`)."""
    families = by_paragraph(data, _line_rules, clean, record)
    token_hits, aws_hits, entropy_hits, url_hits, assignment_hits = families
    blocks = list(pem_blocks(data)) if b"-----BEGIN " in data else []
    if blocks:  # a certificate's or public key's body is not a secret
        public = Covered([(s, e) for s, e, label in blocks if b"PRIVATE" not in label])
        if record is not None:
            record.withheld.extend(h for h in entropy_hits if h.start in public)
        entropy_hits = [h for h in entropy_hits if h.start not in public]
    hits = token_hits + aws_hits + entropy_hits
    if blocks:
        hits.extend(_private_keys(data, blocks))
    return hits + url_hits + assignment_hits
