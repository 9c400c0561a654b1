"""The optional ``description:`` key in a memory's own YAML front matter (docs/architecture.md#memories-and-paths).

Reading never fails: a file without valid front matter simply has no description. Writing replaces
only the ``description`` line (or adds it, or adds a front-matter block), leaving the other keys and
the body byte for byte as they were.
"""

from __future__ import annotations

import json
import re

MAX_DESCRIPTION_CHARS = 1024

_BLOCK_RE = re.compile(r"\A---\r?\n(.*?)(?:^)---[ \t]*(?:\r?\n|\Z)", re.S | re.M)
_KEY_RE = re.compile(r"""^(?:description|"description"|'description')[ \t]*:""", re.M)


def _block(content: str) -> re.Match[str] | None:
    if not content.startswith("---"):
        return None
    return _BLOCK_RE.match(content)


# The common block, one line ``description: <value>`` that YAML reads as the text itself: a plain
# scalar that starts with a letter (no number, date or indicator) made of letters, digits, spaces
# and ``_.,/()-``, or a double-quoted one without escapes (what gitmem writes). Anything else goes
# to YAML.
_SIMPLE_RE = re.compile(
    r'description:[ ]+(?:([A-Za-z][A-Za-z0-9 _.,/()-]*?)|"([\x20\x21\x23-\x5b\x5d-\x7e]*)")[ ]*\n\Z'
)
# Plain scalars YAML 1.1 (PyYAML's resolver) reads as booleans or null, not as text.
_NOT_TEXT = frozenset(
    [
        "yes",
        "Yes",
        "YES",
        "no",
        "No",
        "NO",
        "true",
        "True",
        "TRUE",
        "false",
        "False",
        "FALSE",
        "on",
        "On",
        "ON",
        "off",
        "Off",
        "OFF",
        "null",
        "Null",
        "NULL",
    ]
)


def _simple(block: str) -> str | None:
    m = _SIMPLE_RE.match(block)
    if m is None:
        return None
    plain, quoted = m.groups()
    if quoted is not None:
        return quoted
    return None if plain in _NOT_TEXT else plain


def parse_description(content: str) -> str | None:
    """The ``description`` of a memory, or None."""
    m = _block(content)
    if m is None:
        return None
    fast = _simple(m.group(1))
    if fast is not None:
        return fast[:MAX_DESCRIPTION_CHARS]
    if not _KEY_RE.search(m.group(1)):
        return None
    import yaml  # lazy: only files with front matter pay for it

    try:
        data = yaml.safe_load(m.group(1))
    except (yaml.YAMLError, ValueError, TypeError, RecursionError):
        # ValueError: "date: 2024-02-30" and other bad typed scalars; RecursionError: deep nesting.
        # Another key being malformed must not lose the description: its own line, read alone.
        return _own_line(m.group(1))
    if not isinstance(data, dict):
        return None
    value = data.get("description")
    if value is None or isinstance(value, (list, dict)):
        return None  # not text; and str() of a YAML alias bomb would take forever
    return str(value)[:MAX_DESCRIPTION_CHARS]


_LINE_RE = re.compile(r"""^(?:description|"description"|'description')[ \t]*:.*$""", re.M)


def _own_line(block: str) -> str | None:
    """The description from its own top-level line of a block YAML cannot read as a whole (one
    line only: a value continued on the next lines is not guessed at)."""
    import yaml

    found = _LINE_RE.findall(block)
    if len(found) != 1:
        return None
    try:
        data = yaml.safe_load(found[0])
    except (yaml.YAMLError, ValueError, TypeError, RecursionError):
        return None
    value = data.get("description") if isinstance(data, dict) else None
    if value is None or value == "" or isinstance(value, (list, dict)):
        return None  # a block scalar (``description: >``) continues on lines not read here
    return str(value)[:MAX_DESCRIPTION_CHARS]


# Characters YAML does not read back as themselves inside a double-quoted scalar (C1 controls incl.
# NEL, DEL, U+FFFE/U+FFFF, line/paragraph separators): written as \uXXXX escapes instead.
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ufffe\uffff]")


def _render(description: str) -> str:
    # JSON strings are valid YAML scalars, and keep every character on one line.
    text = json.dumps(description, ensure_ascii=False)
    return "description: " + _YAML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def set_description(content: str, description: str) -> str:
    """``content`` with its front-matter description set to ``description``."""
    line = _render(description)
    m = _block(content)
    if m is None:
        return f"---\n{line}\n---\n{content}"
    body = m.group(1)
    start = m.start(1)
    spans = []  # each description entry: its first character to the end of its value
    for key in _KEY_RE.finditer(body):
        # The value runs to the next line that starts a new key (or the end of the block).
        rest = body[key.end() :]
        nxt = re.search(r"\r?\n(?=[^ \t\r\n])", rest)  # \r?: a CRLF block keeps its line endings
        spans.append((key.start(), key.end() + (nxt.start() if nxt else len(rest.rstrip("\r\n")))))
    if not spans:
        eol = "\r\n" if content.startswith("---\r\n") else "\n"
        return content[:start] + line + eol + content[start:]
    # A repeated key (YAML keeps the last one) is dropped, so the value written is the one read.
    for s, e in reversed(spans[1:]):
        e += len(re.match(r"\r?\n?", body[e:]).group())  # type: ignore[union-attr]
        body = body[:s] + body[e:]
    s, e = spans[0]
    return content[:start] + body[:s] + line + body[e:] + content[m.end(1) :]
