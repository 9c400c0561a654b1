"""The store's deny-list: object ids that a redaction or compaction removed.

``$GIT_DIR/gitmem/denylist`` holds one 40-hex object id per line ('#' comments). ``denypatterns`` holds the regexes of
remembered pattern redactions. Writes refuse both (:func:`refuse_denied`), and so does the pre-receive hook, which imports this module on every push (keep it import-light).

A redaction's block ends with a ``#@ scopes [...]`` line followed by its blob ids: those are
refused in the scopes named there, the scopes the redaction rewrote (docs/redaction.md#by-scope);
every other id (retired commits, blocks without the line) is refused in every scope.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
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
    return denylist_of(text)


def denylist_of(text: str) -> frozenset[str]:
    """:func:`read_denylist` of the deny-list's text."""
    ids = set()
    for line in text.splitlines():
        item = line.split("#", 1)[0].strip().lower()
        if HEX40.match(item):
            ids.add(item)
    return frozenset(ids)


SCOPED = "#@ scopes "  # a block's line that scopes the ids after it (a JSON list of scope names)


def read_scoped(git_dir: Path) -> dict[str, frozenset[str]]:
    """Of the deny-listed ids, those refused only in some scopes: id -> the scopes that refuse it
    (the scopes its redactions rewrote). An id also listed without scopes is refused everywhere and
    is not in the answer."""
    try:
        text = (git_dir / "gitmem" / DENYLIST).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return {}
    return scoped_of(text)


def scoped_of(text: str) -> dict[str, frozenset[str]]:
    """:func:`read_scoped` of the deny-list's text."""
    scoped: dict[str, set[str]] = {}
    everywhere: set[str] = set()
    scopes: frozenset[str] | None = None
    for line in text.splitlines():
        if line.startswith(SCOPED):
            try:
                names = json.loads(line[len(SCOPED) :])
                scopes = frozenset(str(n) for n in names) if isinstance(names, list) else None
            except ValueError:
                scopes = None  # unreadable: the ids after it are refused everywhere
            continue
        if line.startswith("#"):
            scopes = None  # a new block
            continue
        item = line.split("#", 1)[0].strip().lower()
        if not HEX40.match(item):
            continue
        if scopes is None:
            everywhere.add(item)
        else:
            scoped.setdefault(item, set()).update(scopes)
    return {o: frozenset(s) for o, s in scoped.items() if o not in everywhere}


def denied_in(denied: frozenset[str], scoped: dict[str, frozenset[str]], scope: str) -> frozenset[str]:
    """The deny-listed ids a write to ``scope`` refuses: all but the scoped ids of other scopes."""
    if not scoped:
        return denied
    return frozenset(o for o in denied if o not in scoped or scope in scoped[o])


_SCOPED_REFS = ("refs/heads/", "refs/gitmem/proposals/")


def _scope_of_ref(ref: str) -> str:
    """The scope a branch (``refs/heads/<scope>``) or a proposal (``.../proposals/<scope>/<id>``) is of."""
    if ref.startswith("refs/heads/"):
        return ref[len("refs/heads/") :]
    return ref[len("refs/gitmem/proposals/") :].rpartition("/")[0]


def readmitted(git_dir: Path, scoped: dict[str, frozenset[str]], present: Iterable[str]) -> set[str]:
    """Of the deny-listed ids ``present`` in the repository at ``git_dir``, the scoped ones that a
    branch of a scope outside their redaction reaches: content written there again, which the
    redaction does not cover (no purge removes it). Whether a scope it covers reaches it too (then
    the redaction's proof fails all the same) is :func:`leaked`'s; a proof subtracts
    :func:`excused`, never this alone."""
    return _reached_by(git_dir, scoped, present, inside=False)


def leaked(git_dir: Path, scoped: dict[str, frozenset[str]], present: Iterable[str]) -> set[str]:
    """Of the scoped deny-listed ids ``present``, those a branch (or proposal) of a scope their
    redaction rewrote reaches again: redacted bytes back where they were redacted from (a plain
    ``git update-ref``, a hook bypassed), which no other scope's copy excuses."""
    return _reached_by(git_dir, scoped, present, inside=True)


def excused(git_dir: Path, scoped: dict[str, frozenset[str]], present: Iterable[str]) -> set[str]:
    """Of the deny-listed ids ``present`` in the repository at ``git_dir`` (the store, a copy or a
    replica of it; ``scoped``: :func:`read_scoped` of the store whose deny-list it is), those that
    repository may legitimately hold: a branch (or proposal) of a scope outside their redaction
    reaches them (:func:`readmitted`: that scope's content) and, checked for each redaction's
    scopes, none of those scopes' branches there does (:func:`leaked`). What every purge proof
    subtracts from the deny-list (``gitmem verify``, a copy's purge, a replica's proof), so they
    cannot disagree on what another scope's copy excuses (docs/redaction.md#by-scope)."""
    held = readmitted(git_dir, scoped, present)
    return held - leaked(git_dir, scoped, held)


def _reached_by(
    git_dir: Path, scoped: dict[str, frozenset[str]], present: Iterable[str], *, inside: bool
) -> set[str]:
    import subprocess

    want = {o for o in present if o in scoped}
    if not want:
        return set()
    res = subprocess.run(
        ["git", "--git-dir", os.fspath(git_dir), "for-each-ref", "--format=%(refname)", *_SCOPED_REFS],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    refs = {r: _scope_of_ref(r) for r in res.stdout.split() if r}
    out: set[str] = set()
    for covered in {scoped[o] for o in want}:
        chosen = [r for r, scope in refs.items() if (scope in covered) == inside]
        if not chosen:
            continue
        walk = subprocess.run(
            ["git", "--git-dir", os.fspath(git_dir), "rev-list", "--objects", "--stdin"],
            input="\n".join(chosen) + "\n", capture_output=True, text=True, check=False,
        )  # fmt: skip
        if walk.returncode != 0:  # (a missing object under a ref: nothing is excused, the proof says so)
            if inside:
                out |= {o for o in want if scoped[o] == covered}
            continue
        reached = {line[:40] for line in walk.stdout.splitlines()}
        out |= {o for o in want if scoped[o] == covered and o in reached}
    return out


def append_block(
    git_dir: Path,
    comment: str,
    oids: Iterable[str],
    *,
    scoped: Iterable[str] = (),
    scopes: Iterable[str] = (),
) -> int:
    """Append a block to the deny-list (created 0600; idempotent): ``# <comment>``, the ``oids`` not
    listed yet (refused in every scope), then, when there are ``scoped`` ids (a redaction's blobs),
    a ``#@ scopes`` line naming ``scopes`` and all of them, even ids listed already (this block
    covers other scopes). Returns how many ids were new."""
    from gitmem.git.locks import file_lock

    path = git_dir / "gitmem" / DENYLIST
    blobs = list(dict.fromkeys(scoped))
    with file_lock(path.with_name(DENYLIST + ".lock")):
        known = read_denylist(git_dir)
        new = [o for o in dict.fromkeys(oids) if o not in known and o not in set(blobs)]
        if blobs and re.search(rf"^# {re.escape(comment)}\s*$", _text(path), re.M):
            blobs = []  # a recovery: this block was written already
        for o in [*new, *blobs]:
            if not HEX40.match(o):
                raise ValueError(f"not an object id: {o!r}")
        if not new and not blobs:
            return 0
        text = f"# {comment}\n" + "".join(f"{o}\n" for o in new)
        if blobs:
            text += f"{SCOPED}{json.dumps(sorted(set(scopes)))}\n" + "".join(f"{o}\n" for o in blobs)
        # 0600 from its creation: short redacted values could be brute-forced from the ids.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with open(fd, "a", encoding="ascii") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(path, 0o600)
    return len(new) + len([o for o in blobs if o not in known])


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return ""


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
    """Raise ForbiddenError when ``data`` at ``path`` is in ``denied`` (the deny-list of the scope
    written, as ``StoreCore.denied_in`` reads it) or matches a deny-pattern; InvalidInputError for
    a forged mark."""
    from gitmem.errors import ForbiddenError

    why = denied_reason(denied, read_patterns(git_dir), path, data)
    if why is not None:
        raise ForbiddenError(why + " (redact it, or write different content)")
    forged = forged_mark(git_dir, path, data)
    if forged is not None:
        from gitmem.errors import InvalidInputError

        raise InvalidInputError(forged)
