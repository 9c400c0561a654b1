"""git smart HTTP at ``/git/<store>.git``: ``git clone/fetch/push`` through ``git http-backend``.

The server authenticates with the same tokens as every other face (HTTP Basic with the token as the
password, so git's credential helpers work, or ``Authorization: Bearer``), decides access before git
runs, then runs ``git http-backend`` as a CGI child: the request body is streamed into its stdin and
its stdout is streamed back, so neither a clone nor a push is ever held in memory whole.

- No or a bad token: 401 with ``WWW-Authenticate: Basic`` (git then asks its credential helper).
- A token that may not read the store, or a store that does not exist: the same 404, so a token
  learns nothing about stores it has no grant for.
- A read-only token: clone and fetch; a push gets 403 before ``git-receive-pack`` runs.
- A token limited to one scope: 403 (a git transfer carries every scope of the store).
- Only the smart protocol is served (``info/refs?service=``, ``git-upload-pack``,
  ``git-receive-pack``); anything else under ``/git/`` is 404.

The pre-receive hook sees the token's actor as ``REMOTE_USER`` (the git servers' own convention, so
the hook treats it as the server's identity of the pusher) and the token's session as
``GITMEM_PUSH_SESSION``. The server's own environment never leaks ``GITMEM_*``/``GIT_*`` variables
into git. ``GET /git/<store>.git/gitmem/settings`` returns the store's settings file to readers, so
that ``gitmem clone`` of an HTTP URL can keep its read-only copy as it does for a local store.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from starlette.types import Message, Receive, Scope, Send

from gitmem import config
from gitmem.errors import AmbiguousStoreError, AuthenticationError, GitmemError
from gitmem.server import door
from gitmem.server.tokens import Token, TokenStore
from gitmem.store import PUSH_REVIEW_ENV, PUSH_SESSION_ENV, resolve_store

log = logging.getLogger("gitmem.server.git")
PREFIX = "/git/"
SESSION_ENV = PUSH_SESSION_ENV  # GITMEM_PUSH_SESSION, read by the receive hooks (docs/git-servers.md)
REVIEW_ENV = PUSH_REVIEW_ENV  # GITMEM_PUSH_REVIEW: a review-mode token's push (refused by the hook)
PROPOSALS_REF = "refs/gitmem/proposals"  # engine.proposals.REF_PREFIX, without its slash
MAX_PUSH_BYTES = 1 << 30  # one push's request body at most (a store is at most a few 100 MB)
_PATH_RE = re.compile(r"^/git/([^/]+)\.git(/.*)\Z")
_SERVICES = ("git-upload-pack", "git-receive-pack")
# PYTHONPATH too: the hooks must run the gitmem the server runs (a source checkout on it included)
_KEEP_ENV = ("PATH", "PYTHONPATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "SYSTEMROOT")
_CHUNK = 1 << 16


@dataclass(frozen=True)
class GitRequest:
    """What a request under ``/git/`` asks for, once its path is understood."""

    store: str
    rest: str  # ``/info/refs``, ``/git-upload-pack``, ``/git-receive-pack``, ``/gitmem/settings``
    service: str | None  # the git service it runs, None for the settings file
    writes: bool


def parse_request(method: str, path: str, query: str) -> GitRequest | None:
    """The request's store and service, or None when it is nothing this server serves (404)."""
    m = _PATH_RE.match(path)
    if m is None:
        return None
    name, rest = m.group(1), m.group(2)
    if name.startswith(".") or "\\" in name:
        return None  # never a hidden directory (a store being made or deleted), never a path
    if rest == "/info/refs" and method in ("GET", "HEAD"):
        service = _query_value(query, "service")
        if service not in _SERVICES:
            return None  # the dumb protocol is not served
        return GitRequest(name, rest, service, service == "git-receive-pack")
    if method == "POST" and rest[1:] in _SERVICES:
        return GitRequest(name, rest, rest[1:], rest == "/git-receive-pack")
    if method == "GET" and rest == "/gitmem/settings":
        return GitRequest(name, rest, None, False)
    return None


def _query_value(query: str, key: str) -> str | None:
    for part in query.split("&"):
        k, _, v = part.partition("=")
        if k == key:
            return v
    return None


def secret_from_headers(headers: Mapping[str, str]) -> str | None:
    """The token a request carries (gitmem.server.door.credential: every face's forms)."""
    return door.credential(headers)


def cgi_environment(
    base: Mapping[str, str],
    *,
    project_root: Path,
    request: GitRequest,
    method: str,
    query: str,
    headers: Mapping[str, str],
    token: Token,
    client: str,
) -> dict[str, str]:
    """The environment of ``git http-backend`` for one request (only what it and the hooks need).

    A caller without the ``review`` right (gitmem.server.door.rights_of) does not receive the
    store's proposals (``refs/gitmem/proposals/*``: ``transfer.hideRefs``, for fetch and push
    alike); a review-mode token's push is marked for the pre-receive hook, which refuses it."""
    env = {k: base[k] for k in _KEEP_ENV if k in base}
    env.update(
        {
            "GIT_PROJECT_ROOT": str(project_root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": f"/{request.store}.git{request.rest}",
            "REQUEST_METHOD": method,
            "QUERY_STRING": query,
            "REMOTE_USER": token.actor,
            "REMOTE_ADDR": client,
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "GIT_HTTP_MAX_REQUEST_BUFFER": str(64 << 20),
        }
    )
    if token.session:
        env[SESSION_ENV] = token.session
    if token.review:
        env[REVIEW_ENV] = "1"
    caller = door.caller_for(token)
    # the one rule of who receives proposals (gitmem.model.caller.Caller.reviews), by handle
    if not (caller.reviewer and token.may_write(request.store)):
        env.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "transfer.hideRefs"})
        env["GIT_CONFIG_VALUE_0"] = PROPOSALS_REF
    for header, var in (
        ("content-type", "CONTENT_TYPE"),
        ("content-length", "CONTENT_LENGTH"),
        ("content-encoding", "HTTP_CONTENT_ENCODING"),
        ("git-protocol", "GIT_PROTOCOL"),
    ):
        value = headers.get(header)
        if value:
            env[var] = value
    return env


def parse_cgi_headers(raw: bytes) -> tuple[int, list[tuple[bytes, bytes]]]:
    """The status and headers of a CGI response head (without the blank line)."""
    status = 200
    out: list[tuple[bytes, bytes]] = []
    for line in raw.replace(b"\r\n", b"\n").split(b"\n"):
        if not line:
            continue
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip()
        if name == b"status":
            try:
                status = int(value.split()[0])
            except (IndexError, ValueError):
                status = 502
        else:
            out.append((name, value))
    return status, out


class GitHttp:
    """The ASGI app answering everything under ``/git/``."""

    def __init__(
        self, home: Path, tokens: TokenStore, *, max_push_bytes: int = MAX_PUSH_BYTES, git: str = "git"
    ) -> None:
        self.home = home
        self.tokens = tokens
        self.max_push_bytes = max_push_bytes
        self.git = shutil.which(git) or git
        self.project_root = home / "stores"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        method: str = scope["method"]
        query = scope.get("query_string", b"").decode("latin-1")
        request = parse_request(method, scope["path"], query)
        try:
            token = door.authenticate(self.tokens, headers)
        except AuthenticationError as exc:
            await _reply(send, 401, exc.message, [(b"www-authenticate", b'Basic realm="gitmem"')])
            return
        except GitmemError as exc:
            await _reply(send, 500, f"internal error: {exc.message}")
            return
        scope.setdefault("state", {})["token_id"] = token.id
        if request is None:
            await _reply(send, 404, "not found: only git smart HTTP is served under /git/")
            return
        try:  # /git/<id>.git, an old layout's /git/<name>.git, or a name one store carries
            ref = resolve_store(request.store, self.home)
        except AmbiguousStoreError as exc:
            mine = [c for c in exc.candidates if token.may_read(c)]  # never the ids of others' stores
            if mine:
                await _reply(
                    send,
                    409,
                    f"store name {request.store!r} is ambiguous: use /git/<id>.git ({', '.join(mine)})",
                )
                return
            ref = None
        except GitmemError:
            ref = None
        if ref is None or not token.may_read(ref.id):
            await _reply(send, 404, f"repository /git/{request.store}.git not found")
            return
        store_dir, asked = ref.path, request.store
        request = dataclasses.replace(request, store=ref.handle)  # the directory http-backend serves
        if token.scope is not None:
            await _reply(
                send,
                403,
                f"token {token.id} is limited to scope {token.scope!r}; a git transfer carries every "
                "scope of the store, so it needs a token without a scope",
            )
            return
        if request.writes and not token.may_write(ref.id):
            await _reply(send, 403, f"token {token.id} may read store {asked!r} but not push to it")
            return
        if request.service is None:
            await _send_file(send, store_dir / config.SETTINGS_FILE)
            return
        client = (scope.get("client") or ("", 0))[0]
        env = cgi_environment(
            config.env_snapshot(),
            project_root=self.project_root,
            request=request,
            method=method,
            query=query,
            headers=headers,
            token=token,
            client=client,
        )
        cap = self.max_push_bytes
        if request.writes:
            try:
                limits = config.load_settings(store_dir / config.SETTINGS_FILE).limits
                cap = door.push_cap(limits.max_store_bytes, self.max_push_bytes)
            except GitmemError:
                pass  # the hook refuses a push to a store whose settings are broken
        await self._run_backend(env, receive, send, cap)

    async def _run_backend(
        self, env: dict[str, str], receive: Receive, send: Send, cap: int | None = None
    ) -> None:
        proc = await asyncio.create_subprocess_exec(
            self.git,
            "http-backend",
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(self.project_root),
        )
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        too_large = asyncio.Event()
        feeder = asyncio.create_task(self._feed(proc, receive, too_large, cap or self.max_push_bytes))
        errors = asyncio.create_task(_drain(proc.stderr))
        completed = False
        try:
            head = await _read_head(proc.stdout)
            if too_large.is_set():
                await _reply(send, 413, f"the push is over {cap or self.max_push_bytes} bytes")
                return
            if head is None:
                await _reply(send, 502, "git http-backend sent no response")
                return
            raw, rest = head
            status, headers = parse_cgi_headers(raw)
            headers.append((b"cache-control", b"no-cache"))
            await send({"type": "http.response.start", "status": status, "headers": headers})
            if rest:
                await send({"type": "http.response.body", "body": rest, "more_body": True})
            while chunk := await proc.stdout.read(_CHUNK):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            completed = True
        finally:
            if proc.returncode is None:
                if not completed:  # the client went away, or the push was too large
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                await proc.wait()
            feeder.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await feeder
            message = await errors
            if message.strip():
                log.info("git http-backend: %s", message.strip()[:2000])

    async def _feed(
        self, proc: asyncio.subprocess.Process, receive: Receive, too_large: asyncio.Event, cap: int
    ) -> None:
        """Stream the request body into the CGI's stdin, then close it: at most ``cap`` bytes, and
        never more than the git face's idle timeout without a byte (gitmem.server.door.BODIES)."""
        assert proc.stdin is not None
        total = 0
        idle = door.BODIES["git"].idle
        try:
            while True:
                try:
                    message: Message = await asyncio.wait_for(receive(), idle)
                except TimeoutError:
                    log.info("git push body idle for %ss: cut off", idle)
                    proc.kill()
                    return
                if message["type"] == "http.disconnect":
                    proc.kill()
                    return
                body = message.get("body", b"")
                total += len(body)
                if total > cap:
                    too_large.set()
                    proc.kill()
                    return
                if body:
                    proc.stdin.write(body)
                    await proc.stdin.drain()
                if not message.get("more_body", False):
                    break
        except (BrokenPipeError, ConnectionResetError, ProcessLookupError):
            return
        finally:
            with contextlib.suppress(Exception):
                proc.stdin.close()


async def _read_head(stdout: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    """The CGI header block and whatever body bytes came with it (None: no complete head)."""
    buf = b""
    while True:
        for sep in (b"\r\n\r\n", b"\n\n"):
            i = buf.find(sep)
            if i >= 0:
                return buf[:i], buf[i + len(sep) :]
        if len(buf) > 65536:
            return None
        chunk = await stdout.read(4096)
        if not chunk:
            return None
        buf += chunk


async def _drain(stream: asyncio.StreamReader) -> str:
    kept = bytearray()
    while chunk := await stream.read(_CHUNK):
        if len(kept) < 65536:
            kept += chunk
    return kept.decode("utf-8", "replace")


async def _reply(
    send: Send, status: int, message: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = (message + "\n").encode("utf-8")
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _send_file(send: Send, path: Path) -> None:
    data = path.read_bytes()
    headers = [(b"content-type", b"application/yaml"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})
