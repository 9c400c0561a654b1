"""What the LangGraph and Agents SDK adapters share: names as path segments, and who writes.

Arbitrary strings as single gitmem path segments, and back.

A LangGraph namespace label, key or an Agents SDK session id may hold any character, but a gitmem
path segment may not contain ``/``, control or format characters, must be NFC and must not name
git's own directory. :func:`encode_segment` percent-encodes (UTF-8, upper-case hex) exactly what
would break those rules, plus ``%`` itself, so the mapping is injective and readable names stay
readable: ``("users", "alice")`` is ``users/alice``, a label ``a/b`` is ``a%2Fb``.
:func:`decode_segment` inverts it and returns None for a name that :func:`encode_segment` would
never produce (a file someone else put there).
"""

from __future__ import annotations

import threading
import unicodedata
import weakref
from typing import TYPE_CHECKING
from urllib.parse import unquote

from gitmem.errors import InvalidInputError
from gitmem.model.paths import validate_path

if TYPE_CHECKING:
    from gitmem.store import Store

_BAD_CATEGORIES = ("Cc", "Cf", "Cs", "Zl", "Zp")


def _quote(ch: str) -> str:
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))


def _needs_quoting(ch: str) -> bool:
    return ch in "/%" or unicodedata.category(ch) in _BAD_CATEGORIES


def encode_segment(text: str) -> str:
    """``text`` as one path segment (may still be too long: the path check then says so)."""
    out = "".join(_quote(ch) if _needs_quoting(ch) else ch for ch in text)
    if unicodedata.normalize("NFC", out) != out:
        # Not NFC (or made non-NFC by a quoted neighbour): plain ASCII always is.
        out = "".join(_quote(ch) if _needs_quoting(ch) or ord(ch) > 127 else ch for ch in out)
    if out in ("", ".", ".."):
        return out  # refused by the caller's path rules, or (keys) given a suffix first
    try:
        validate_path("/" + out)
    except InvalidInputError:
        if len(out.encode("utf-8", "surrogatepass")) <= 255:
            # git's own directory names (".git", "git~1", NTFS variants): quote the first character.
            return _quote(out[0]) + out[1:]
        raise
    return out


def decode_segment(segment: str) -> str | None:
    """The string :func:`encode_segment` turned into ``segment``, or None if it never would."""
    text = unquote(segment, errors="surrogatepass")
    try:
        return text if encode_segment(text) == segment else None
    except InvalidInputError:
        return None


# ---------------------------------------------------------------------- checks done at construction
def valid_scope(scope: str) -> str:
    """``scope``, or InvalidInputError naming the rule it breaks."""
    from gitmem.model.paths import validate_scope

    return validate_scope(scope)


def valid_identity(actor: str | None, session: str | None) -> tuple[str | None, str]:
    """The actor (checked) and gitmem session (checked, else a new ``sesn_...``) of every version."""
    from gitmem.ids import new_id
    from gitmem.model.versions import validate_actor, validate_session

    if actor is not None:
        validate_actor(actor)
    return actor, validate_session(session) or new_id("sesn")


# ---------------------------------------------------------------------- one lock per Store object
_LOCKS: weakref.WeakKeyDictionary[Store, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def store_lock(store: Store) -> threading.RLock:
    """The lock every adapter holds while it uses ``store`` (a ``Store`` is not thread-safe), so
    several adapters sharing one ``Store`` object from worker threads take turns."""
    with _LOCKS_GUARD:
        lock = _LOCKS.get(store)
        if lock is None:
            lock = _LOCKS[store] = threading.RLock()
        return lock


# ---------------------------------------------------------------------- the guard, kept in the turn
MASK = "[masked by gitmem's guard: {rule}]"


def mask_findings(text: str, findings: tuple[object, ...]) -> tuple[str, list[str]]:
    """``text`` with every refused finding's span (``start``/``end`` character offsets, as
    :class:`gitmem.model.guard.Finding` gives them) replaced by :data:`MASK`; and the rules masked.
    The adapters use it so that a conversation keeps its turn when the guard refuses a secret in
    it: the item is stored with the secret masked, and the adapter reports what it masked."""
    spans = sorted(
        (
            (int(getattr(f, "start", -1)), int(getattr(f, "end", -1)), str(getattr(f, "rule", "?")))
            for f in findings
        ),
        reverse=True,
    )
    rules: list[str] = []
    last = len(text) + 1
    for start, end, rule in spans:
        if not (0 <= start < end <= len(text)) or end > last:
            continue  # overlapping or out of range: the next attempt's findings say what is left
        text = text[:start] + MASK.format(rule=rule) + text[end:]
        rules.append(rule)
        last = start
    return text, sorted(rules)
