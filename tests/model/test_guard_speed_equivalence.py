"""The guard's fast paths find exactly what straightforward code finds, and stay linear on hostile
input.

The scanner avoids passes over the text (PEM blocks found once, AWS keys looked for only among the
40-character runs of the tokens, URL passwords only before an ``@``, one ``match`` per ``@`` for
e-mails, overlaps removed by bisection...). Here each of those is compared with the plain version
it replaces (written below the obvious way: every line, every ``://``, a walk back from each
``@``, every pair of hits) on many generated texts: corpus positives and negatives shuffled
together with noise, and random text over an alphabet of the characters the rules key on. A hit
lost, added or moved fails the comparison. The second half feeds the scanner inputs built to make
careless code quadratic and checks the work done, not the time taken."""

from __future__ import annotations

import base64
import importlib.util
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitmem.model import guard, guard_memo, guard_pii, guard_rules, guard_secrets
from gitmem.model.guard import MAX_FINDINGS, GuardPolicy, scan
from gitmem.model.guard_rules import Hit

DATA = Path(__file__).parents[1] / "data" / "guard"
EVERYTHING = GuardPolicy(pii="flag")


def _positives() -> list[Any]:
    spec = importlib.util.spec_from_file_location("guard_positives_eq", DATA / "positives.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.positives())


def _negatives() -> list[str]:
    lines = (DATA / "negatives.txt").read_text(encoding="utf-8").split("\n")
    text = "\n".join(line for line in lines if not line.startswith("#:"))
    return [e.strip("\n") for e in text.split("\n%%\n") if e.strip()]


POSITIVES = _positives()
NEGATIVES = _negatives()


# ------------------------------------------------------------------ the plain versions
def ref_pem_blocks(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    for m in guard_secrets._PEM_RE.finditer(data):
        label = m.group(1)
        end_marker = data.find(b"-----END " + label + b"-----", m.end())
        end = end_marker + len(label) + 14 if end_marker >= 0 else m.end()
        yield m.start(), end, label


def ref_aws_secrets(data: bytes, lower: bytes) -> Iterator[Hit]:
    i = lower.find(b"aws")
    while i >= 0:
        start = lower.rfind(b"\n", 0, i) + 1
        end = lower.find(b"\n", i)
        end = len(lower) if end < 0 else end
        if b"secret" in lower[start:end]:
            for m in guard_rules._AWS_SECRET_RE.finditer(data, start, end):
                s = m.start()
                context = lower[max(start, s - 120) : s]
                if (
                    b"aws" in context
                    and b"secret" in context
                    and guard_rules.count_of(m.group(), b"0123456789")
                ):
                    value = m.group()
                    yield Hit(
                        "aws-secret-access-key",
                        "secret",
                        s,
                        s + 40,
                        value.decode(),
                        guard_rules.mask(value),
                        0,
                    )
        i = lower.find(b"aws", end)


REF_PIECE_RE = re.compile(
    rb"(?<![A-Za-z0-9+/_-])(?=[A-Za-z+/_-]*[0-9])[A-Za-z0-9][A-Za-z0-9+/_-]{%d,}[A-Za-z0-9]"
    % (guard_rules.MIN_TOKEN - 2)
)


def ref_high_entropy(data: bytes, tokens: Any, skip: list[tuple[int, int]]) -> Iterator[Hit]:
    for m in REF_PIECE_RE.finditer(tokens.joined):
        piece = m.group()
        if piece.startswith(guard_rules._SSH_PUBLIC) or not guard_rules._random_piece(piece):
            continue
        s = tokens.at(m.start())
        if data[max(0, s - 7) : s] == b"base64," or any(a <= s < b for a, b in skip):
            continue
        yield Hit(
            "high-entropy-string", "secret", s, s + len(piece), piece.decode(), guard_rules.mask(piece, 3), 2
        )


def ref_url_passwords(data: bytes) -> Iterator[Hit]:
    i = data.find(b"://")
    if i < 0 or b"@" not in data:
        return
    while i >= 0:
        m = guard_secrets._URL_AUTH.match(data, i + 3)
        if m and not guard_secrets._placeholder(m.group(2)):
            before = data[max(0, i - 32) : i]
            scheme = before[len(before.rstrip(guard_secrets._SCHEME_CHARS)) :].lstrip(b"0123456789+.-")
            if scheme:
                s, e = m.span(2)
                preview = f"{scheme.decode()}://…:… (password of {e - s} chars)"
                yield Hit("url-password", "secret", s, e, m.group(2).decode(), preview, 1)
        i = data.find(b"://", i + 3)


def ref_assignments(data: bytes, lower: bytes) -> Iterator[Hit]:
    seen: set[int] = set()
    for keyword in guard_secrets._KEYWORD_RES:
        for ahead in keyword.finditer(lower):
            at, e = ahead.start(), ahead.end(1)
            left = max(0, at - 64)
            s = left + len(lower[left:at].rstrip(guard_secrets._NAME_CHARS))
            if e in seen:
                continue
            seen.add(e)
            name = lower[s:e].decode().replace("-", "_").replace(".", "_")
            names = tuple(k.decode() for k in guard_secrets._KEY_NAMES)
            if not (name.endswith(names) or name in {"pass", "token"}):
                continue
            m = guard_secrets._ASSIGN.match(data, e)
            if not m:
                continue
            group = 1 if m.group(1) else 2 if m.group(2) else 3
            value = m.group(group)
            if ref_placeholder(value) or group == 3 and not guard_secrets._plain_secret(value):
                continue
            vs, ve = m.span(group)
            preview = f"{data[s:e].decode()}=… ({ve - vs} chars)"
            yield Hit("password-assignment", "secret", vs, ve, value.decode(), preview, 1)


def ref_placeholder(value: bytes) -> bool:
    low = value.lower()
    if value[:1] in b"$<{%[(*" or len(set(value)) < 3 or value.isupper() and b"_" in value:
        return True
    dummies = (b"xxx", b"***", b"...", b"example", b"placeholder", b"redacted", b"your", b"changeme")
    if any(d in low for d in dummies):
        return True
    return low in {b"password", b"passwd", b"pass", b"secret", b"token", b"none", b"null", b"true", b"false"}


def ref_private_keys(data: bytes) -> Iterator[Hit]:
    return guard_secrets._private_keys(data, list(ref_pem_blocks(data)))


def ref_secret_hits(data: bytes) -> list[Hit]:
    hits: list[Hit] = []
    lower = data.lower()
    pem = b"-----BEGIN " in data
    tokens = guard_rules.Tokens(data)
    if tokens.spans:
        hits.extend(guard_rules.token_rules(tokens))
        hits.extend(ref_aws_secrets(data, lower))
        public = [(s, e) for s, e, label in ref_pem_blocks(data) if b"PRIVATE" not in label] if pem else []
        hits.extend(ref_high_entropy(data, tokens, public))
    if pem:
        hits.extend(ref_private_keys(data))
    hits.extend(ref_url_passwords(data))
    hits.extend(ref_assignments(data, lower))
    return hits


def ref_emails(data: bytes) -> Iterator[Hit]:
    end = 0
    i = data.find(b"@")
    while i >= 0:
        s = i
        while s > 0 and data[s - 1] in guard_pii._LOCAL_START and i - s < 64:
            s -= 1
        s = max(s, end)
        m = guard_pii._EMAIL.search(data, s, i + 300)
        if m and m.start() <= i < m.end():
            local, _, domain = m.group().partition(b"@")
            remote = local == b"git" and data[m.end() : m.end() + 1] == b":"
            if not remote and data[max(0, m.start() - 3) : m.start()] != b"://":
                text = m.group().decode()
                yield Hit("email", "pii", m.start(), m.end(), text, f"{text[0]}…@{domain[:1].decode()}…", 3)
            end = m.end()
            i = data.find(b"@", m.end())
        else:
            i = data.find(b"@", i + 1)


def ref_numbers(data: bytes, folded: bytes) -> Iterator[Hit]:
    for m in guard_pii._NUMBER.finditer(folded):
        s, e = m.span()
        if s > 0 and data[s - 1] in b"+(":
            s -= 1
        if s > 0 and folded[s - 1] in b"0Aa_./" or e < len(data) and folded[e] in b"0Aa_/":
            continue
        chunk = data[s:e].rstrip(b" .-(")
        digits = re.sub(rb"\D", b"", chunk).decode()
        hit = guard_pii._card(chunk, digits, s) or guard_pii._phone(chunk, digits, s)
        if hit is not None:
            yield hit


def ref_pii_hits(data: bytes) -> list[Hit]:
    hits: list[Hit] = []
    if b"@" in data:
        hits.extend(ref_emails(data))
    folded = data.translate(guard_pii._FOLD)
    if b"00" in folded:
        hits.extend(ref_numbers(data, folded))
        hits.extend(guard_pii._ibans(data, folded))
    return hits


def ref_without_overlaps(hits: list[Hit]) -> list[Hit]:
    kept: list[Hit] = []
    for hit in sorted(hits, key=lambda h: (h.rank, h.start)):
        if not any(hit.start < k.end and k.start < hit.end for k in kept):
            kept.append(hit)
    return sorted(kept, key=lambda h: h.start)


def ref_scan(text: str) -> list[tuple[str, int, int, str]]:
    """Findings of the plain versions, with every rule on, no allow-list."""
    data = guard_rules.ascii_view(text)
    kept = ref_without_overlaps(ref_secret_hits(data) + ref_pii_hits(data))[:MAX_FINDINGS]
    return [(h.rule, h.start, h.end, h.preview) for h in kept]


def fast_scan(text: str) -> list[tuple[str, int, int, str]]:
    return [(f.rule, f.start, f.end, f.preview) for f in scan(text, EVERYTHING)]


def assert_same(text: str) -> None:
    data = guard_rules.ascii_view(text)
    guard_rules._NOT_RANDOM.clear()  # the cache must not decide anything either way
    assert guard_secrets.secret_hits(data) == ref_secret_hits(data)
    assert guard_pii.pii_hits(data) == ref_pii_hits(data)
    assert fast_scan(text) == ref_scan(text)


# ------------------------------------------------------------------------ generated texts
NOISE = [
    " ", "\n", "\t", "=", ":", "@", "://", "'", '"', "-", "_", ".", "/", "+", "(", ")",
    "aws", "secret", "AWS_SECRET_ACCESS_KEY=", "password", "pass", "pwd", "token", "key", "api_key: ",
    "-----BEGIN ", "-----END ", "PRIVATE KEY-----", "PUBLIC KEY-----", "CERTIFICATE-----",
    "base64,", "https://", "user:", "git@", "x@example.org", "+44 ", "(415) ", "4111 ", "DE89 ",
    "sk-", "ghp_", "eyJ", "AKIA", "xoxb-", "0", "7", "12", "A", "z",
]  # fmt: skip


def mixed_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    pool = [p.text for p in POSITIVES] + NEGATIVES
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    out = []
    for k in range(n):
        parts = rng.sample(pool, rng.randint(1, 8))
        pieces: list[str] = []
        for part in parts:
            pieces.append("".join(rng.choice(NOISE) for _ in range(rng.randint(0, 6))))
            if rng.random() < 0.3:  # cut a positive or a negative anywhere
                a, b = sorted(rng.randrange(len(part) + 1) for _ in range(2))
                part = part[:a] + rng.choice(NOISE) + part[b:]
            pieces.append(part)
            if rng.random() < 0.2:
                pieces.append("".join(rng.choice(alphabet) for _ in range(rng.choice((20, 39, 40, 41, 64)))))
        sep = rng.choice(["", "\n", " ", "\n\n", " = ", ": "])
        out.append(sep.join(pieces) if k % 2 else "".join(pieces))
    return out


def test_corpus_entries_scan_the_same_as_the_plain_versions() -> None:
    for text in [p.text for p in POSITIVES] + NEGATIVES:
        assert_same(text)


@pytest.mark.parametrize("seed", range(4))
def test_shuffled_corpus_with_noise_scans_the_same(seed: int) -> None:
    for text in mixed_texts(150, seed):
        assert_same(text)


def test_many_pem_blocks_and_aws_keys_scan_the_same() -> None:
    """Past the first few headers, END lines come from an index: it must agree with searching."""
    rng = random.Random(3)
    key = "".join(
        rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") for _ in range(64)
    )
    blocks = []
    for _ in range(40):
        label = rng.choice(["PUBLIC KEY", "CERTIFICATE", "RSA PRIVATE KEY", "PRIVATE KEY", "X"])
        body = "\n".join(key[i:] + key[:i] for i in range(rng.randint(0, 3)))
        end = f"-----END {label}-----" if rng.random() < 0.7 else ""
        blocks.append(f"-----BEGIN {label}-----\n{body}\n{end}")
        if rng.random() < 0.3:
            blocks.append(f"aws secret {key[:40]} and AWS_SECRET_ACCESS_KEY={key[1:41]}")
    text = "\n".join(blocks)
    assert_same(text)
    assert_same(text.replace("\n", " "))


SCAN_ALPHABET = st.sampled_from(NOISE + list("abcdefXYZ0123456789 \n"))


@settings(max_examples=300, deadline=None)
@given(st.lists(SCAN_ALPHABET, max_size=120).map("".join))
def test_random_rule_shaped_text_scans_the_same(text: str) -> None:
    assert_same(text)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 400), st.integers(1, 60), st.integers(0, 3)), max_size=80))
def test_overlap_removal_matches_the_pairwise_version(spans: list[tuple[int, int, int]]) -> None:
    hits = [Hit("r", "secret", s, s + n, "", "", rank) for s, n, rank in spans]
    assert guard._without_overlaps(hits) == ref_without_overlaps(hits)


# ------------------------------------------------------------------- hostile inputs
class Counting(bytes):
    """Bytes that add up how much of themselves each find/rfind reads: from where the search
    starts to where it stops (the end of what it found, or the end of its range)."""

    scanned = 0

    def find(self, sub: Any, start: Any = None, end: Any = None) -> int:
        lo, hi = self._range(start, end)
        found = super().find(sub, start, end)
        Counting.scanned += max(0, (found + len(sub) if found >= 0 else hi) - lo)
        return found

    def rfind(self, sub: Any, start: Any = None, end: Any = None) -> int:
        lo, hi = self._range(start, end)
        found = super().rfind(sub, start, end)
        Counting.scanned += max(0, hi - (found if found >= 0 else lo))
        return found

    def _range(self, start: int | None, end: int | None) -> tuple[int, int]:
        return (0 if start is None else max(0, start)), (len(self) if end is None else min(len(self), end))


def scanned_by(func: Any, data: bytes) -> int:
    Counting.scanned = 0
    func(Counting(data))
    return Counting.scanned


def test_pem_headers_without_an_end_are_read_once() -> None:
    data = b"-----BEGIN X-----\n" * 2000 + b"-----BEGIN Y-----" * 2000
    scanned = scanned_by(lambda d: list(guard_secrets.pem_blocks(d)), data)
    assert scanned <= 12 * len(data)  # a search to the end per header would be 4000 times it
    assert list(guard_secrets.pem_blocks(data)) == list(ref_pem_blocks(data))


def test_many_distinct_pem_labels_are_read_once() -> None:
    data = b"".join(b"-----BEGIN L%d-----\n" % n for n in range(3000)) + b"-----END L2999-----"
    assert scanned_by(lambda d: list(guard_secrets.pem_blocks(d)), data) <= 12 * len(data)
    assert list(guard_secrets.pem_blocks(data)) == list(ref_pem_blocks(data))


def test_urls_and_at_signs_are_read_once() -> None:
    for data in (
        b"://" * 40_000 + b"@",
        b"@" * 100_000,
        b"a://b:c@" * 10_000,
        b"://a:b" * 10_000 + b"@" * 10_000,
    ):
        assert scanned_by(lambda d: list(guard_secrets._url_passwords(d)), data) <= 3 * len(data)


def test_aws_context_is_read_back_a_bounded_way_on_one_long_line() -> None:
    key = b"AbCdEfGhIjKlMnOpQrStUvWxYz0123456789/+Ab"
    data = b"aws secret " + (key + b" ") * 3000  # one line, 3000 candidates
    tokens = guard_rules.Tokens(data)
    secrets = guard_secrets.occurrences(data.lower(), b"secret")
    hits = list(guard_rules.aws_secrets(data, data.lower(), tokens, secrets))
    assert [h.start for h in hits] == [h.start for h in ref_aws_secrets(data, data.lower())]
    counting = Counting(data)
    Counting.scanned = 0
    list(guard_rules.aws_secrets(counting, data.lower(), guard_rules.Tokens(data), secrets))
    assert Counting.scanned <= 130 * 3000  # 120 characters back per key, not to the line's start


def test_many_hits_are_deduplicated_in_n_log_n() -> None:
    """20 000 hits: the pairwise version would compare 200 million pairs (minutes)."""
    hits = [Hit("r", "secret", 3 * n, 3 * n + 2, "", "", n % 3) for n in range(20_000)]
    hits += [Hit("r", "secret", 3 * n + 1, 3 * n + 4, "", "", 3) for n in range(20_000)]
    kept = guard._without_overlaps(hits)
    assert len(kept) == 20_000 and all(h.rank < 3 for h in kept)


HOSTILE = {
    "long line of equals and colons": "=:" * 100_000,
    "long line of key names": "password_token_secret_key_" * 8_000,
    "key names with assignments": "password=" * 20_000,
    "a keyword then spaces": "password" + " " * 200_000 + "= x",
    "huge base64 blob": base64.b64encode(random.Random(1).randbytes(150_000)).decode(),
    "at signs": "a@" * 100_000,
    "local parts and at signs": ("x" * 63 + "@") * 3_000,
    "digits and separators": "0-" * 100_000,
    "many schemes": "http://u:p@h " * 15_000,
    "pem headers": "-----BEGIN PRIVATE KEY-----" * 7_000,
    "tokens": ("ghp_" + "a1" * 18 + " ") * 5_000,
    "deeply repeated names": "api_key." * 25_000 + ": 'x'",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_inputs_finish_with_bounded_findings(name: str) -> None:
    """Each input is 100-200 kB: a quadratic step would take minutes here, not milliseconds."""
    text = HOSTILE[name]
    for policy in (GuardPolicy(), EVERYTHING):
        findings = scan(text, policy)
        assert len(findings) <= MAX_FINDINGS
        assert all(0 <= f.start < f.end <= len(text) for f in findings)
        starts = [f.start for f in findings]
        assert starts == sorted(starts) and len(set(starts)) == len(starts)


def test_the_piece_fold_keeps_the_piece_regex() -> None:
    """The class fold marks exactly the characters of the piece regex (letters, digits, +/_-)."""
    for c in range(256):
        cls = guard_rules._PIECE_FOLD[c]
        ch = bytes([c])
        assert (cls == 0x61) == bool(re.fullmatch(rb"[A-Za-z]", ch))
        assert (cls == 0x30) == bool(re.fullmatch(rb"[0-9]", ch))
        assert (cls == 0x62) == bool(re.fullmatch(rb"[+/_-]", ch))


# ------------------------------------------------------------- paragraphs remembered clean
def test_a_memo_changes_no_finding_cold_warm_or_shared() -> None:
    """One memo across all the mixes (paragraphs reappear in other texts, other places, other
    neighbours): every scan, first or repeated, finds what a scan without a memo finds."""
    memo = guard_memo.CleanParagraphs()
    rng = random.Random(11)
    texts = mixed_texts(120, 5) + [p.text for p in POSITIVES] + NEGATIVES
    for text in texts:
        paragraphs = text.split("\n\n")
        rng.shuffle(paragraphs)
        for variant in (text, "\n\n".join(paragraphs), f"# edited\n{text}\n\nnew tail"):
            for policy in (GuardPolicy(), EVERYTHING):
                plain = scan(variant, policy)
                assert scan(variant, policy, memo=memo) == plain
                assert scan(variant, policy, memo=memo) == plain  # now warm


def test_a_memo_holds_no_paragraph_with_a_finding() -> None:
    memo = guard_memo.CleanParagraphs()
    note = "\n\n".join(NEGATIVES[:6])
    for positive in POSITIVES:
        text = f"{note}\n\n{positive.text}\n\n{note}"
        for _ in range(2):
            assert positive.rule in {f.rule for f in scan(text, EVERYTHING, memo=memo)}
    for family in (memo.secrets, memo.pii):
        assert len(family) > 0
        assert not any(p.secret.encode() in chunk for p in POSITIVES for chunk in family._seen)


def test_a_paragraph_clean_for_secrets_is_still_checked_for_pii() -> None:
    email = next(p for p in POSITIVES if p.rule == "email")
    memo = guard_memo.CleanParagraphs()
    text = f"intro\n\n{email.text}\n\noutro"
    assert scan(text, GuardPolicy(), memo=memo) == []  # secrets only: the e-mail's paragraph is clean
    assert [f.rule for f in scan(text, EVERYTHING, memo=memo)] == ["email"]


def test_a_memo_stays_bounded() -> None:
    memo = guard_memo.ParagraphMemo()
    for n in range(3 * guard_memo.CLEAN_MAX):
        memo.add(b"paragraph %d " % n + b"x" * (n % 700))
        assert len(memo) <= guard_memo.CLEAN_MAX and memo._bytes <= guard_memo.CLEAN_BYTES
    big = b"y" * (guard_memo.CHUNK_MAX + 1)
    memos = guard_memo.CleanParagraphs()
    scan(big.decode() + "\n\nsmall", EVERYTHING, memo=memos)
    for clean in (memos.secrets, memos.pii):
        assert big not in clean and b"small" in clean  # paragraphs longer than CHUNK_MAX are not kept


def test_rewrites_of_a_store_find_what_a_fresh_scan_finds(store: Any) -> None:
    """Through the write path (which keeps a memo per store): a secret added to a rewritten note
    is refused, a flagged paragraph that stays is flagged again, clean rewrites pass."""
    from gitmem.errors import GuardRejectedError

    token = next(p for p in POSITIVES if p.rule == "github-token").text
    email = next(p for p in POSITIVES if p.rule == "email").text
    note = "\n\n".join(NEGATIVES[:8])
    store.update_settings(guard={"secrets": "reject", "pii": "flag"})
    store.write("/n.md", note)
    for n in range(3):
        store.write("/n.md", f"# v{n}\n\n{note}")
    with pytest.raises(GuardRejectedError):
        store.write("/n.md", f"{note}\n\n{token}")
    with pytest.raises(GuardRejectedError):  # the secret inside a known-clean paragraph's line
        store.write("/n.md", note.replace("\n", f" {token}\n", 1))
    flagged = store.write("/n.md", f"{note}\n\n{email}")
    again = store.write("/n.md", f"# again\n\n{note}\n\n{email}")
    for version in (flagged, again):
        message = store.core.repo[__import__("pygit2").Oid(hex=version.commit)].message
        assert "Gitmem-Flag: pii email" in message


def test_a_public_key_body_left_out_by_its_header_is_not_remembered_clean() -> None:
    """High-entropy lines inside a PEM public block are left out because of the header around
    them: the paragraph must not be remembered clean, or the same lines without the header (a
    secret now) would be skipped."""
    rng = random.Random(5)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    body = "\n".join("".join(rng.choice(alphabet) for _ in range(64)) for _ in range(3))
    memo = guard_memo.CleanParagraphs()
    framed = f"-----BEGIN PUBLIC KEY-----\n\n{body}\n\n-----END PUBLIC KEY-----"
    assert scan(framed, GuardPolicy(), memo=memo) == scan(framed, GuardPolicy()) == []
    bare = f"notes\n\n{body}\n\nmore notes"
    assert scan(bare, GuardPolicy(), memo=memo) == scan(bare, GuardPolicy()) != []


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(["a", "Z", "7", "0", "+", "/", "_", "-", "=", ".", "\n", "ab9", "x" * 19]),
        max_size=80,
    )
)
def test_pieces_on_the_class_fold_are_the_pieces_of_the_plain_regex(parts: list[str]) -> None:
    joined = "".join(parts).encode()
    folded = [
        (m.start(), m.end() - 1)
        for m in guard_rules._PIECE_RE.finditer(b" " + joined.translate(guard_rules._PIECE_FOLD))
    ]
    assert folded == [m.span() for m in REF_PIECE_RE.finditer(joined)]


def test_the_write_path_keeps_one_memo_per_scope_and_a_few_scopes(store: Any) -> None:
    """A rewrite in one scope never makes a scan in another scope faster (a token may be confined
    to one scope: its write timings must not tell what another scope holds), and a store keeps
    the memos of its last MEMO_SCOPES scopes written, not one per scope it ever saw."""
    from gitmem.engine import guard as engine_guard

    note = "\n\n".join(NEGATIVES[:8])
    paragraph = NEGATIVES[3].encode()
    store.write("/n.md", note, scope="alice")
    store.write("/n.md", f"# v1\n\n{note}", scope="alice")  # a rewrite: alice's memo learns the note
    memos = engine_guard._MEMOS[store.core]
    assert paragraph in memos["alice"].secrets
    store.write("/n.md", note, scope="bob")
    store.write("/n.md", f"# v1\n\n{note}", scope="bob")
    assert paragraph in memos["bob"].secrets and memos["bob"] is not memos["alice"]
    for n in range(engine_guard.MEMO_SCOPES + 2):
        store.write("/m.md", "first\n", scope=f"s{n}")
        store.write("/m.md", "second\n", scope=f"s{n}")
    assert len(memos) == engine_guard.MEMO_SCOPES
    assert "alice" not in memos and f"s{engine_guard.MEMO_SCOPES + 1}" in memos
