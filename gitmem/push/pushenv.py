"""What a receive hook learns from its environment: who pushes (the git server's identity variables,
``GITMEM_ACTOR``, trusted ``-o actor=``), the push options, the push's id, whose trailers the store
believes, and the repository as git shows it during the push (the quarantine included).

Standard library only at import: the pre-receive hook imports this on every push (docs/architecture.md#hooks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pygit2

    from gitmem.engine.core import StoreCore


#: The git server's own identity of the pusher, in this order (docs/identity.md): Apache/nginx
#: ``git http-backend`` (and ``gitmem serve``), GitLab, Gitea/Forgejo, gitolite. Each outranks
#: ``GITMEM_ACTOR``, which on a local or file:// push is whatever the client set.
SERVER_IDENTITY = ("REMOTE_USER", "GL_USERNAME", "GITEA_PUSHER_NAME", "GL_USER")


CLIENT_IDENTITY = "GITMEM_ACTOR"


UNKNOWN = "unknown"


#: Set by ``gitmem serve`` (git over HTTP) to the pushing token's session; a client cannot set it.
SERVER_SESSION_ENV = "GITMEM_PUSH_SESSION"


#: Set by ``gitmem serve`` for a push by a review-mode token: the hook refuses it (docs/access.md).
SERVER_REVIEW_ENV = "GITMEM_PUSH_REVIEW"


def push_options(env: Mapping[str, str]) -> list[str]:
    """The ``git push -o`` options git passes to receive hooks."""
    try:
        count = int(env.get("GIT_PUSH_OPTION_COUNT", "0"))
    except ValueError:
        return []
    return [env.get(f"GIT_PUSH_OPTION_{i}", "") for i in range(count)]


def option(options: Sequence[str], name: str) -> str | None:
    """The value of the last ``-o name=value`` push option (None: not given)."""
    found = None
    for opt in options:
        if opt.startswith(name + "="):
            found = opt[len(name) + 1 :]
    return found


ACTOR_KINDS = ("session", "user", "api", "service", "git")  # gitmem.model.versions._ACTOR_RE


def as_actor(value: str) -> str | None:
    """An identity as a valid actor: ``kind:name`` when it names one of :data:`ACTOR_KINDS` (gitmem
    serve's tokens do), else ``user:<value>`` (``cn:bob`` is ``user:cn:bob``). Whitespace, control
    and format characters (a newline, a right-to-left override) become ``_``; a value with no name
    left (empty, blank, ``user:``) is None: nobody."""
    import unicodedata

    text = value.strip()
    kind, sep, rest = text.partition(":")
    if not (sep and kind in ACTOR_KINDS):
        kind, rest = "user", text
    name = "".join(
        "_" if ch.isspace() or ch in "<>" or unicodedata.category(ch)[0] == "C" else ch for ch in rest
    )[:200]
    return f"{kind}:{name}" if name.strip("_") else None


def pusher(env: Mapping[str, str], options: Sequence[str], trust_options: bool) -> str | None:
    """Who pushes: the server's identity variable (:data:`SERVER_IDENTITY`, in that order) as
    ``user:<name>``, else ``GITMEM_ACTOR``, else (only when the store's acl sets
    ``trust_push_actor``) a ``-o actor=...`` push option; None when nobody said (``unknown``).
    A variable whose value names nobody (see :func:`as_actor`) counts as unset."""
    for var in (*SERVER_IDENTITY, CLIENT_IDENTITY):
        actor = as_actor(env.get(var) or "")
        if actor is not None:
            return actor
    if trust_options:
        return as_actor(option(options, "actor") or "")
    return None


def push_session(env: Mapping[str, str], options: Sequence[str], actor: str | None) -> str | None:
    """The session a push's versions carry (docs/access.md, session binding): the one the server
    bound (``gitmem serve``: the token's); else ``-o session=<id>``, which, when a git server
    named the pusher (:data:`SERVER_IDENTITY`), is put under the pusher's own namespace
    (:func:`session_namespace` ``.<id>``): a pusher can never write in another's session. A local or file://
    push (full trust) names any session."""
    bound = env.get(SERVER_SESSION_ENV)
    if bound:
        return bound
    named = option(options, "session")
    if named is None or actor is None or identity_source(env) not in SERVER_IDENTITY:
        return named
    own = session_namespace(actor)
    return named if named == own or named.startswith(own + ".") else f"{own}.{named}"


def session_namespace(actor: str) -> str:
    """A pusher's own session namespace: ``sesn_<actor, readable>_<10 hex of its hash>``. The
    hash makes it one actor's alone (``user:a.b`` and ``user:a_b`` read alike), and with no ``.``
    in it no namespace is a prefix of another's sub-sessions."""
    import hashlib

    slug = "".join(c if c.isalnum() or c in "_-" else "_" for c in actor)[:40]
    return f"sesn_{slug}_{hashlib.sha256(actor.encode('utf-8')).hexdigest()[:10]}"


def identity_source(env: Mapping[str, str]) -> str:
    """Which variable named the pusher (for the audit)."""
    for var in (*SERVER_IDENTITY, CLIENT_IDENTITY):
        if as_actor(env.get(var) or "") is not None:
            return var
    return "none"


def push_id(text: str) -> str:
    """One id for a push that both hooks compute from the same ref-update lines."""
    import hashlib

    return "push_" + hashlib.sha256(text.strip().encode("utf-8", "surrogateescape")).hexdigest()[:24]


def trusted_for_trailers(acl: Mapping[str, object], actor: str | None) -> bool:
    """Whether the store believes this pusher's trailers (``acl.trust_trailers``: actor patterns)."""
    import fnmatch

    globs = acl.get("trust_trailers") or []
    if actor is None or not isinstance(globs, list):
        return False
    return any(fnmatch.fnmatchcase(actor, str(g)) for g in globs)


def open_repo() -> pygit2.Repository:
    """The store as git sees it during the push: ``FROM_ENV`` honours ``GIT_DIR`` and the
    quarantine (``GIT_OBJECT_DIRECTORY`` + ``GIT_ALTERNATE_OBJECT_DIRECTORIES``)."""
    import pygit2

    return pygit2.Repository(".", flags=pygit2.enums.RepositoryOpenFlag.FROM_ENV)


def store_of(repo: pygit2.Repository) -> StoreCore:
    from gitmem.engine.opening import handle

    return handle(repo, Path(repo.path).resolve())
