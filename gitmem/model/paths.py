"""Rules for memory paths, scope names and store names (docs/architecture.md#memories-and-paths).

Paths that break a rule are refused with an error naming the rule, never silently normalised.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from gitmem.errors import InvalidInputError, PathTooLongError

MAX_PATH_BYTES = 1024
MAX_SEGMENT_BYTES = 255  # NAME_MAX: a checkout (git clone, session mount) fails on longer names
RESERVED_PREFIX = "/.gitmem/"
#: Files git itself reads from a tree (identities ``git log`` shows, attributes and filters, ignore
#: rules, submodules): a memory of that name would change what git does with the store or a clone.
GIT_INTERPRETED = frozenset({".mailmap", ".gitattributes", ".gitignore", ".gitmodules"})
#: Scope names git treats specially (``git clone`` and rev parsing would drop or misread them).
RESERVED_SCOPES = frozenset(
    {
        "HEAD",
        "FETCH_HEAD",
        "ORIG_HEAD",
        "MERGE_HEAD",
        "CHERRY_PICK_HEAD",
        "REVERT_HEAD",
        "BISECT_HEAD",
        "AUTO_MERGE",
        "REBASE_HEAD",
        "stash",
    }
)

_STORE_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}\Z")
_SCOPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}\Z")


def _bad_char(text: str) -> str | None:
    if text.isascii() and text.isprintable():  # no ASCII character is Cf, Cs, Zl or Zp; Cc is not printable
        return None
    for ch in text:
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            return ch
    return None


def _is_git_dir_name(segment: str) -> bool:
    # The names git and libgit2 refuse in trees (".git" in any case, with NTFS's trailing dots and
    # spaces, alternate streams and short name "git~1"); tested against libgit2's own check.
    base = segment.split("\\", 1)[0].split(":", 1)[0].rstrip(" .").lower()
    return base in (".git", "git~1")


@functools.lru_cache(maxsize=8192)
def validate_path(path: str, *, max_bytes: int = MAX_PATH_BYTES) -> str:
    """Check a memory path (``/notes/todo.md``) and return it unchanged.

    Raises:
        InvalidInputError: naming the rule the path breaks.
    """
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidInputError(f"invalid path {path!r}: a memory path must start with '/'")
    size = len(path.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise PathTooLongError(f"invalid path: {size} bytes is over the limit of {max_bytes} bytes")
    bad = _bad_char(path)
    if bad is not None:
        raise InvalidInputError(
            f"invalid path {path!r}: control or format character U+{ord(bad):04X} is not allowed"
        )
    if not path.isascii() and not unicodedata.is_normalized("NFC", path):  # ASCII is NFC
        raise InvalidInputError(f"invalid path {path!r}: the path must be NFC-normalised")
    segments = path[1:].split("/")
    if path == "/" or path.endswith("/"):
        raise InvalidInputError(f"invalid path {path!r}: a memory path must not end with '/'")
    for seg in segments:
        if seg == "":
            raise InvalidInputError(f"invalid path {path!r}: empty path segment")
        if seg in (".", ".."):
            raise InvalidInputError(f"invalid path {path!r}: '{seg}' segments are not allowed")
        if _is_git_dir_name(seg):
            raise InvalidInputError(f"invalid path {path!r}: '{seg}' names git's own directory")
        if seg.rstrip(" .").lower() in GIT_INTERPRETED:
            raise InvalidInputError(f"invalid path {path!r}: '{seg}' is a file git itself interprets")
        if len(seg.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES:
            raise InvalidInputError(
                f"invalid path: a segment of {len(seg.encode('utf-8', 'surrogatepass'))} bytes; file names "
                f"are at most {MAX_SEGMENT_BYTES} bytes (longer ones cannot be cloned or mounted)"
            )
    if (path + "/").startswith(RESERVED_PREFIX):
        raise InvalidInputError(f"invalid path {path!r}: paths under {RESERVED_PREFIX} are reserved")
    return path


def validate_prefix(prefix: str) -> str:
    """Check a listing prefix: ``/`` or a segment-aligned directory path ending in ``/``."""
    if prefix == "/":
        return prefix
    if not prefix.endswith("/"):
        raise InvalidInputError(
            f"invalid prefix {prefix!r}: a prefix must end with '/' (e.g. {prefix + '/'!r})"
        )
    validate_path(prefix[:-1])
    return prefix


def tree_path(path: str) -> str:
    """The path inside the git tree: the API path without its leading ``/``."""
    return path[1:]


def api_path(tree_relative: str) -> str:
    return "/" + tree_relative


def is_valid_tree_path(tree_relative: str) -> str | None:
    """For paths found in git trees: None when valid, else the reason (used by index and hook)."""
    try:
        validate_path("/" + tree_relative)
    except InvalidInputError as exc:
        return exc.message
    return None


@functools.lru_cache(maxsize=1024)
def validate_scope(scope: str) -> str:
    """Check a scope (branch) name and return it unchanged."""
    if not isinstance(scope, str) or not _SCOPE_RE.match(scope):
        raise InvalidInputError(
            f"invalid scope {scope!r}: scopes are 1-128 characters of letters, digits and ._@+- "
            "starting with a letter or digit"
        )
    if ".." in scope or scope.endswith(".lock") or scope.endswith("."):
        raise InvalidInputError(f"invalid scope {scope!r}: no '..', and no '.lock' or '.' at the end")
    if scope in RESERVED_SCOPES or scope.endswith("_HEAD") or "@{" in scope:
        raise InvalidInputError(f"invalid scope {scope!r}: git treats that name specially")
    return scope


def validate_store_name(name: str) -> str:
    """Check a store name (a directory name and mount slug)."""
    if not isinstance(name, str) or not _STORE_RE.match(name) or name.endswith(".git"):
        raise InvalidInputError(
            f"invalid store name {name!r}: 1-63 characters of a-z, 0-9 and ._- "
            "starting with a letter or digit"
        )
    return name


# ---------------------------------------------------------------------- store names and handles
MAX_STORE_NAME = 255
_HANDLE_RE = re.compile(r"^(?:[a-z0-9][a-z0-9._-]{0,62}|memstore_[0-9A-HJKMNP-TV-Z]{26})\Z")
_SLUG_RUN = re.compile(r"[^a-z0-9]+")


def validate_display_name(name: str) -> str:
    """Check a store's display name (Anthropic's rule): 1-255 characters, no control characters.

    Names are free text and need not be unique; a store's directory follows its id (docs/stores.md)."""
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_STORE_NAME:
        raise InvalidInputError(f"invalid store name {name!r}: a name is 1-{MAX_STORE_NAME} characters")
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in name) or "\u2028" in name or "\u2029" in name:
        raise InvalidInputError(f"invalid store name {name!r}: no control characters")
    return name


def is_store_handle(text: str) -> bool:
    """Whether ``text`` can be a store directory's stem: a store id (``memstore_<ULID>``, every
    store this release makes) or a name of the old layout (``[a-z0-9][a-z0-9._-]{0,62}``)."""
    return isinstance(text, str) and bool(_HANDLE_RE.match(text)) and not text.endswith(".git")


def mount_slug(name: str) -> str:
    """The mount directory of a store named ``name``: lowercased, every run of characters other
    than a-z and 0-9 one hyphen, no hyphen at either end ("Demo Memory" -> ``demo-memory``);
    ``store`` when nothing is left. Collisions are settled by the session (docs/stores.md)."""
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii").lower()
    slug = _SLUG_RUN.sub("-", folded).strip("-")
    return slug[:63].rstrip("-") or "store"
