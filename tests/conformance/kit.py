"""What every driver of the conformance matrix shares: the world it runs in (one workspace, one
server, the tokens of every caller), what a driver reports (:class:`Got`), and how a write's
outcome and attribution are read back from the store (docs/access.md)."""

from __future__ import annotations

import hashlib
import os
import random
import string
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
from matrix import Cell

from gitmem.engine import proposals as P
from gitmem.errors import NotFoundError
from gitmem.model.caller import Caller
from gitmem.server.door import caller_for
from gitmem.server.tokens import TokenStore
from gitmem.store import Store

NAME = "cat.s.notes"  # a Databricks-shaped name, so that every face serves the same store
DBX = f"/api/2.1/unity-catalog/memory-stores/{NAME}"
ACL_REVIEWED = "user:aclrev"  # the store's acl.review names this actor: its writes are proposals
TOKENS: dict[str, dict[str, Any]] = {
    "ro": {"actor": "user:ro", "stores": {NAME: "ro"}},
    "rw": {"actor": "user:rw", "stores": {NAME: "rw"}, "session": "sesn_rw"},
    "scoped": {"actor": "user:scoped", "stores": {NAME: "rw"}, "scope": "team"},
    "review": {"actor": "user:review", "stores": {NAME: "rw"}, "review": True, "session": "sesn_review"},
    "admin": {"actor": "user:admin", "admin": True},
    "redactor": {"actor": "user:redactor", "stores": {NAME: "rw"}, "rights": ("write", "redact")},
    "other": {"actor": "user:other", "stores": {"other": "rw"}},
}
ACTORS = {k: v["actor"] for k, v in TOKENS.items()} | {"local": "user:lib"}
SESSIONS = {"rw": "sesn_rw", "review": "sesn_review"}
#: Operations that make versions: an allowed or proposed cell of these must say who made them.
NONE = "-"  # want_session: the versions carry no session
WRITES = ("create", "update", "rename", "delete", "restore", "revert-session", "review-accept")


def fake_token(seed: int) -> str:
    """A GitHub-token-shaped string made at run time (no secret-shaped literal in the repository)."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    while True:
        body = "".join(rng.choice(alphabet) for _ in range(36))
        if (
            any(c.isdigit() for c in body)
            and any(c.isupper() for c in body)
            and any(c.islower() for c in body)
        ):
            return "ghp_" + body


def needle_of(cell: Cell) -> str:
    """A word only this cell's memory holds (a search for it finds that one memory first)."""
    return "zq" + hashlib.sha256(cell.id.encode()).hexdigest()[:12]


def sid_of(cell: Cell, kind: str) -> str:
    """A session id of this cell's own (stable within a run)."""
    safe = "".join(ch if ch.isalnum() else "_" for ch in cell.id)
    return f"sesn_{kind}_{safe}"[:120]


@dataclass
class Got:
    """What a driver saw: the outcome, its code, and the attribution of the versions it made.
    ``want_actor``/``want_session``: the attribution this face must give (default: the caller's
    token actor and session, :data:`ACTORS`, :data:`SESSIONS`)."""

    expect: str
    code: int | str | None = None
    detail: str = ""
    actor: str | None = None
    session: str | None = None
    want_actor: str | None = None
    want_session: str | None = None


@dataclass
class World:
    home: Path
    url: str
    store: Store
    sid: str
    secrets: dict[str, str]
    ids: dict[str, str] = field(default_factory=dict)  # caller -> token id
    model_url: str = ""
    prep: dict[str, dict[str, Any]] = field(default_factory=dict)  # cell id -> what prepare made
    extra: dict[str, Any] = field(default_factory=dict)  # what a face's own fixture made

    def client(self, caller: str) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.url, api_key=self.secrets[caller], max_retries=0)

    def caller(self, name: str) -> Caller | None:
        """The library face's caller: the local actor, or the same Caller a token is."""
        if name == "local":
            return None
        return caller_for(TokenStore(self.home).get(self.ids[name]))

    def headers(self, caller: str) -> dict[str, str]:
        return {} if caller == "none" else {"authorization": f"Bearer {self.secrets[caller]}"}

    # ------------------------------------------------------------ what happened
    def published(
        self, path: str, text: str | None = None, scope: str = "main", store: Store | None = None
    ) -> bool:
        try:
            m = (store or self.store).read(path, scope=scope)
        except NotFoundError:
            return False
        return text is None or text in (m.content or "")

    def latest(self, path: str, scope: str = "main", store: Store | None = None) -> Any:
        return (store or self.store).versions(path, scope=scope, limit=1)[0]

    def seed(self, path: str, text: str = "seed\n", scope: str = "main") -> Any:
        return self.store.write(path, text, scope=scope, actor="user:seed")


def outcome(
    w: World,
    path: str,
    text: str | None,
    *,
    owner: str,
    gone: bool = False,
    store: Store | None = None,
    **want: Any,
) -> Got:
    """Published, proposed (on ``owner``'s proposal) or nothing, with the attribution of the
    version it made."""
    s = store or w.store
    if gone:
        try:
            s.read(path)
            published = False
        except NotFoundError:
            published = True
    else:
        published = w.published(path, text, store=s)
    if published:
        v = w.latest(path, store=s)
        return Got("allowed", actor=v.actor, session=v.session, **want)
    p = P.open_proposal(s.core, "main", owner)
    if p is not None and path in P.touched(s.core, p):
        mine = [v for v in P.versions(s.core, p.id) if v.path == path]
        last = mine[-1] if mine else None
        return Got(
            "proposed",
            actor=last.actor if last else None,
            session=last.session if last else None,
            **want,
        )
    return Got("nothing", detail=f"{path}: neither published nor proposed (owner {owner})")


def owner_of(cell: Cell) -> str:
    return SESSIONS.get(cell.caller, "sesn_libreview")


def path_of(cell: Cell, suffix: str = "") -> str:
    safe = "".join(ch if ch.isalnum() else "-" for ch in cell.id)
    if cell.op == "list":  # a directory of its own: a listing of it is short
        return f"{list_prefix(cell)}m{suffix}.md"
    return f"/m/{safe}{suffix}.md"


def list_prefix(cell: Cell) -> str:
    safe = "".join(ch if ch.isalnum() else "-" for ch in cell.id)
    return f"/l/{safe}/"


def prepare(store: Store, cell: Cell) -> dict[str, Any]:
    """What a cell's operation works on, written by the seed actor before the run."""
    path = path_of(cell)
    out: dict[str, Any] = {}
    if cell.face == "dreams":  # its dreams read session sesn_rw: a cell run alone (-k) needs its version
        store.write(path_of(cell, "-session"), "by a session\n", actor="user:rw", session=SESSIONS["rw"])
    if cell.op in ("update", "rename", "delete"):
        v = store.write(path, "seed\n", actor="user:seed")
        out["memory_id"] = v.memory_id if v is not None else None
    elif cell.op in ("restore", "redact"):
        scope = "team" if cell.caller == "scoped" and cell.op == "redact" else "main"
        v = store.write(path, f"old {path} {scope}\n", scope=scope, actor="user:seed")
        store.write(path, f"new {path}\n", scope=scope, actor="user:seed")
        if scope == "team":  # the same content in main's history too
            store.write(path, f"old {path} {scope}\n", actor="user:seed")
            store.write(path, "gone\n", actor="user:seed")
        assert v is not None
        out["version"] = v.id
    elif cell.op == "revert-session":
        sid = sid_of(cell, "bad")
        store.write(path, "by a session\n", actor=f"session:{sid}", session=sid)
        out["session"] = sid
    elif cell.op in ("search", "list"):
        store.write(path, f"conformance needle {needle_of(cell)}\n", actor="user:seed")
    return out


# ---------------------------------------------------------------------- git
def git(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "GITMEM_", "GL_"))}
    base.pop("REMOTE_USER", None)
    base.update(
        {
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.org",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.org",
        }
    )
    return subprocess.run(
        ["git", *args], cwd=cwd, env={**base, **(env or {})}, capture_output=True, text=True, timeout=120
    )


def push_change(
    url: str,
    work: Path,
    cell: Cell,
    message: str = "change",
    env: dict[str, str] | None = None,
    options: tuple[str, ...] = (),
) -> tuple[subprocess.CompletedProcess[str], str, str | None, bool]:
    """Clone ``url``, make the cell's change as a real commit (a new file, a modified, renamed or
    deleted one) and push it. Returns the push, the path to look at, the text it must hold, and
    whether the path must be gone."""
    r = git("clone", "-q", url, str(work), env=env)
    assert r.returncode == 0, r.stderr
    path = path_of(cell)
    file = work / path.lstrip("/")
    text: str | None = f"pushed {cell.id}\n"
    gone = False
    if cell.op == "create":
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)
    elif cell.op == "update":
        assert file.exists(), f"{path} is not in the clone"
        file.write_text(text)
    elif cell.op == "rename":
        new = path_of(cell, "-new")
        assert git("mv", path.lstrip("/"), new.lstrip("/"), cwd=work).returncode == 0
        path, text = new, None
    elif cell.op == "delete":
        assert git("rm", "-q", path.lstrip("/"), cwd=work).returncode == 0
        gone, text = True, None
    git("add", "-A", cwd=work)
    c = git("commit", "-qm", message, cwd=work)
    assert c.returncode == 0, c.stderr
    opts = [a for o in options for a in ("-o", o)]
    return git("push", "-q", *opts, "origin", "HEAD:refs/heads/main", cwd=work, env=env), path, text, gone


# ---------------------------------------------------------------------- webhooks
class _Hooks(BaseHTTPRequestHandler):
    """A webhook receiver on 127.0.0.1: it records every delivery's headers and body, answers 204."""

    got: list[tuple[dict[str, str], bytes]]

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        type(self).got.append(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def receiver(w: World) -> tuple[str, list[tuple[dict[str, str], bytes]]]:
    """The module's one webhook receiver (started by the first cell that needs it): its URL and
    what it received."""
    if "hooks" not in w.extra:
        handler = type("Hooks", (_Hooks,), {"got": []})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        w.extra.setdefault("cleanup", []).append(server.shutdown)
        w.extra["hooks"] = (f"http://127.0.0.1:{server.server_port}/hook", handler.got)
    url, got = w.extra["hooks"]
    return url, got
