"""The store's deny-list: object ids that a redaction or compaction removed.

``$GIT_DIR/gitmem/denylist`` holds one 40-hex object id per line ('#' comments). ``denypatterns`` holds the regexes of
remembered pattern redactions. Writes refuse both (:func:`refuse_denied`), and so does the pre-receive hook, which imports this module on every push (keep it import-light).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pygit2

DENYLIST = "denylist"
HEX40 = re.compile(r"^[0-9a-f]{40}$")


def read_denylist(git_dir: Path) -> frozenset[str]:
    """The store's deny-list (redacted blobs, retired commits); empty when there is none."""
    try:
        text = (git_dir / "gitmem" / DENYLIST).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return frozenset()
    ids = set()
    for line in text.splitlines():
        item = line.split("#", 1)[0].strip().lower()
        if HEX40.match(item):
            ids.add(item)
    return frozenset(ids)


# ---------------------------------------------------------------------- redaction marks
MARK = re.compile(rb"\[redacted: (redact_[0-9A-HJKMNP-TV-Z]{26})\]")
_RECORDED = re.compile(r"^# redaction (redact_[0-9A-HJKMNP-TV-Z]{26})\s*$", re.M)


def recorded_redactions(git_dir: Path) -> frozenset[str]:
    """The redaction ids the deny-list has a block for (each redaction writes one)."""
    try:
        text = (git_dir / "gitmem" / DENYLIST).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return frozenset()
    return frozenset(_RECORDED.findall(text))


def forged_mark(git_dir: Path, path: str, data: bytes | None) -> str | None:
    """Why ``data`` may not be stored because it carries a ``[redacted: <id>]`` mark that no
    redaction of this store made (None: it may). Such text would make ``verify`` report a
    redaction the ledger lacks: an agent could raise a false tampering alarm at will."""
    if data is None or b"[redacted: redact_" not in data:
        return None
    unknown = sorted({m.decode() for m in MARK.findall(data)} - recorded_redactions(git_dir))
    if not unknown:
        return None
    return (
        f"{path}: the content holds the redaction mark [redacted: {unknown[0]}], which no redaction "
        "of this store made; write it differently"
    )


# ---------------------------------------------------------------------- deny-patterns
PATTERNS = "denypatterns"  # $GIT_DIR/gitmem/denypatterns: one JSON object a line, 0600
_pattern_cache: dict[str, tuple[tuple[int, int, int], tuple[re.Pattern[str], ...]]] = {}


def read_patterns(git_dir: Path) -> tuple[re.Pattern[str], ...]:
    """The regexes of remembered pattern redactions (deny-patterns); empty when there are none."""
    name = os.path.join(os.fspath(git_dir), "gitmem", PATTERNS)  # (a string: every write asks)
    try:
        st = os.stat(name)
    except (FileNotFoundError, NotADirectoryError):
        return ()
    path = Path(name)
    key = (st.st_mtime_ns, st.st_size, st.st_ino)
    cached = _pattern_cache.get(name)
    if cached is not None and cached[0] == key:
        return cached[1]
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(re.compile(str(json.loads(line)["pattern"])))
        except (ValueError, KeyError, TypeError, re.error):
            continue
    compiled = tuple(out)
    _pattern_cache[name] = (key, compiled)
    return compiled


def remember_pattern(git_dir: Path, redaction_id: str, pattern: str) -> None:
    """Add a redacted pattern to the store's deny-patterns (created 0600; idempotent)."""
    from gitmem.git.locks import file_lock

    d = git_dir / "gitmem"
    d.mkdir(parents=True, exist_ok=True)
    path = d / PATTERNS
    with file_lock(d / (PATTERNS + ".lock")):
        if any(p.pattern == pattern for p in read_patterns(git_dir)):
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, (json.dumps({"id": redaction_id, "pattern": pattern}) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(path, 0o600)


def denied_reason(
    denied: frozenset[str], patterns: tuple[re.Pattern[str], ...], path: str, data: bytes | None
) -> str | None:
    """Why ``data`` at ``path`` may not be stored (None: it may). The one content check every write
    path shares (library writes, batches, session syncs, conflict copies, imports, pushes, MCP, the
    memory tool); a write-time guard joins it here."""
    if data is not None and denied and str(pygit2.hash(data)) in denied:
        return f"{path}: this content was redacted from the store and may not be written back"
    if patterns:
        text = data.decode("utf-8", "surrogateescape") if data is not None else ""
        for p in patterns:
            if p.search(path) is not None:
                return f"{path}: the path matches a redacted pattern and may not be written"
            if text and p.search(text) is not None:
                return f"{path}: the content matches a redacted pattern and may not be written"
    return None


def refuse_denied(git_dir: Path, denied: frozenset[str], path: str, data: bytes | None) -> None:
    """Raise ForbiddenError when ``data`` at ``path`` is in ``denied`` (the store's deny-list, as
    ``StoreCore.denied_ids`` reads it) or matches a deny-pattern; InvalidInputError for a forged mark."""
    from gitmem.errors import ForbiddenError

    why = denied_reason(denied, read_patterns(git_dir), path, data)
    if why is not None:
        raise ForbiddenError(why + " (redact it, or write different content)")
    forged = forged_mark(git_dir, path, data)
    if forged is not None:
        from gitmem.errors import InvalidInputError

        raise InvalidInputError(forged)
