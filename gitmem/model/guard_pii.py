"""PII detection of the write-time guard: e-mail addresses, phone numbers, payment card numbers
(Luhn and issuer prefix checked) and IBANs (mod-97 checked). Pure functions on an ASCII view of the
text (see :func:`gitmem.model.guard_rules.ascii_view`).

Digits and letters are first folded by one ``bytes.translate`` (every digit to ``0``, every capital
to ``A``), so the searches start on a literal byte, which the regex engine finds quickly.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from gitmem.model.guard_memo import ParagraphMemo, ScanRecord, by_paragraph
from gitmem.model.guard_rules import Hit

_FOLD = bytes(
    0x30 if 0x30 <= i <= 0x39 else 0x41 if 0x41 <= i <= 0x5A else 0x61 if 0x61 <= i <= 0x7A else i
    for i in range(256)
)

# ---------------------------------------------------------------------------------- e-mail
_EMAIL = re.compile(rb"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24}")
_LOCAL_START = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._%+-")
_NOT_LOCAL = bytes(0x61 if i in _LOCAL_START else 0x20 for i in range(256))  # local part: a, else space
_LOCAL_MAX = 64


def _emails(data: bytes) -> Iterator[Hit]:
    """Each ``@`` is looked at once: the local part before it (at most 64 characters, found with
    one ``rfind`` on a folded window) and the domain after it.

    An e-mail holding the ``@`` at ``i`` has all of ``data[start:i]`` as its local part (an ``@`` is
    not a local character), and whether the domain after ``i`` matches does not depend on where
    the local part starts: so the leftmost match (what a search from ``s`` finds) holds ``i``
    exactly when the match at ``s`` does, the longest local part; one ``match``, no search."""
    end = 0
    i = data.find(b"@")
    while i >= 0:
        lo = max(0, i - _LOCAL_MAX)
        s = data[lo:i].translate(_NOT_LOCAL).rfind(b" ") + 1 + lo  # after the last non-local one
        s = max(s, end)
        m = _EMAIL.match(data, s, i + 300) if s < i else None
        if m:
            local, _, domain = m.group().partition(b"@")
            remote = local == b"git" and data[m.end() : m.end() + 1] == b":"  # git@host:repo
            if not remote and data[max(0, m.start() - 3) : m.start()] != b"://":  # user@ of a URL
                text = m.group().decode()
                yield Hit("email", "pii", m.start(), m.end(), text, f"{text[0]}…@{domain[:1].decode()}…", 3)
            end = m.end()
            i = data.find(b"@", m.end())
        else:
            i = data.find(b"@", i + 1)


# ------------------------------------------------------------------------- digit sequences
_NUMBER = re.compile(rb"0[0 ().-]{5,30}0")  # on the folded text: digits with separators


def luhn(digits: str) -> bool:
    """The Luhn checksum of a card number holds."""
    total = 0
    for n, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if n % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card_issuer(digits: str) -> bool:
    """The number starts with a card network's published issuer prefix, at a length it uses."""
    n = len(digits)
    two, four = int(digits[:2]), int(digits[:4])
    if digits[0] == "4":
        return n in (13, 16, 19)  # Visa
    if 51 <= two <= 55 or 2221 <= four <= 2720:
        return n == 16  # Mastercard
    if two in (34, 37):
        return n == 15  # American Express
    if digits.startswith(("6011", "65")) or 644 <= int(digits[:3]) <= 649 or two == 35:
        return 16 <= n <= 19  # Discover, JCB
    return two in (30, 36, 38) and n == 14  # Diners Club


_CARD_SHAPE = re.compile(rb"\d{13,19}|\d{4}(?:([ -])\d{4}){2}\1\d{1,7}|\d{4}([ -])\d{6}\2\d{4,5}")
_PHONE_SHAPE = re.compile(
    rb"\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,5}"  # international: +CC and groups
    rb"|\(\d{3}\) ?\d{3}[ .-]\d{4}|\d{3}([.-])\d{3}\1\d{4}"  # North American: (415) 555-0100, 415-555-0100
)


_NON_DIGITS = bytes(c for c in range(256) if not 0x30 <= c <= 0x39)


def _numbers(data: bytes, folded: bytes) -> Iterator[Hit]:
    n = len(data)
    for m in _NUMBER.finditer(folded):
        s, e = m.span()
        if s > 0 and data[s - 1] in b"+(":
            s -= 1
        if s > 0 and folded[s - 1] in b"0Aa_./" or e < n and folded[e] in b"0Aa_/":
            continue  # part of a longer word, version or path
        chunk = data[s:e].rstrip(b" .-(")
        raw = chunk.translate(None, _NON_DIGITS)
        if not 8 <= len(raw) <= 19:
            continue  # a card has 13-19 digits, a phone number 8-15
        digits = raw.decode()
        hit = _card(chunk, digits, s) or _phone(chunk, digits, s)
        if hit is not None:
            yield hit


def _card(chunk: bytes, digits: str, s: int) -> Hit | None:
    m = _CARD_SHAPE.fullmatch(chunk)
    if not m or not _card_issuer(digits) or not luhn(digits):
        return None
    return Hit(
        "card-number", "pii", s, s + len(chunk), chunk.decode(), f"…{digits[-4:]} ({len(digits)} digits)", 3
    )


def _phone(chunk: bytes, digits: str, s: int) -> Hit | None:
    m = _PHONE_SHAPE.fullmatch(chunk)
    if not m or not 8 <= len(digits) <= 15:
        return None
    if chunk[:1] != b"+" and len(digits) != 10:
        return None
    return Hit(
        "phone-number", "pii", s, s + len(chunk), chunk.decode(), f"{digits[:2]}… ({len(digits)} digits)", 3
    )


# -------------------------------------------------------------------------------------- IBAN
_IBAN = re.compile(rb"AA00(?: ?[A0]{4}){2,7}(?: ?[A0]{1,4})?")  # on the folded text


def iban_valid(iban: str) -> bool:
    """The mod-97 check of ISO 13616 holds (spaces removed, upper case)."""
    if not 15 <= len(iban) <= 34:
        return False
    moved = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in moved)) % 97 == 1


def _ibans(data: bytes, folded: bytes) -> Iterator[Hit]:
    for m in _IBAN.finditer(folded):
        s, e = m.span()
        if s > 0 and folded[s - 1] in b"0Aa":
            continue
        groups = data[s:e].decode().split(" ")
        while len(groups) > 1 and not iban_valid("".join(groups)):
            groups.pop()  # a capitalised word after the number joined the last group
        compact = "".join(groups)
        if iban_valid(compact):
            text = " ".join(groups)
            yield Hit("iban", "pii", s, s + len(text), text, f"{compact[:2]}… ({len(compact)} chars)", 3)


def _pii_families(data: bytes) -> list[list[Hit]]:
    emails = list(_emails(data)) if b"@" in data else []
    folded = data.translate(_FOLD)
    if b"00" not in folded:
        return [emails, [], []]
    return [emails, list(_numbers(data, folded)), list(_ibans(data, folded))]


def pii_hits(data: bytes, clean: ParagraphMemo | None = None, record: ScanRecord | None = None) -> list[Hit]:
    """Every PII hit in ``data`` (an ASCII view of the text). Each stays within a line, so the
    paragraphs in ``clean`` are skipped (see :func:`gitmem.model.guard_memo.by_paragraph`)."""
    emails, numbers, ibans = by_paragraph(data, _pii_families, clean, record)
    return emails + numbers + ibans
