"""``gitmem clone`` and ``gitmem fetch`` of a store served over HTTP(S) (``gitmem serve``'s ``/git/``).

The transfer is git's own (``git clone``/``git fetch`` subprocesses), so the credentials come from
git's usual places: a credential helper, ``http.extraHeader`` (``Authorization: Bearer ...``),
``~/.netrc``, or the URL. After the clone, the store's settings file is downloaded from
``<url>/gitmem/settings`` with the credentials ``git credential fill`` (or an ``extraHeader``)
gives, so read-only gitmem commands on the clone know the store's name, limits and description;
when it cannot be had, the clone works without it.
"""

from __future__ import annotations

import re
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from gitmem import config
from gitmem.engine.core import GITMEM_DIR
from gitmem.errors import GitmemError

_USERINFO = re.compile(r"(https?://)[^/@\s]*@")
TIMEOUT = 600


def redact_url(text: str) -> str:
    """``text`` with the user and password of any URL in it replaced by ``***``."""
    return _USERINFO.sub(r"\1***@", text)


def _env() -> dict[str, str]:
    env = config.env_snapshot()
    env.setdefault("GIT_TERMINAL_PROMPT", "0")  # fail with a message instead of waiting for a prompt
    return env


def _git(args: list[str], *, cwd: Path | None = None, stdin: str | None = None) -> str:
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=_env(),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitmemError(f"git {args[0]} failed: {exc}") from None
    if proc.returncode != 0:
        detail = redact_url(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "")
        raise GitmemError(f"git {args[0]} failed: {detail or 'exit ' + str(proc.returncode)}")
    return proc.stdout


def clone_url(url: str, target: Path, gitmem_refspec: str) -> tuple[list[str], list[str]]:
    """Clone ``url`` into ``target`` with the ledger refs; returns (scopes, gitmem refs)."""
    import shutil

    _git(["clone", "--quiet", "--", url, str(target)])
    try:
        _git(["config", "--add", "remote.origin.fetch", gitmem_refspec], cwd=target)
        _git(["fetch", "--quiet", "origin", gitmem_refspec], cwd=target)
        refs = _git(["for-each-ref", "--format=%(refname)"], cwd=target).split()
        settings = download_settings(url)
        if settings is not None:
            copy = target / ".git" / GITMEM_DIR / config.SETTINGS_FILE
            copy.parent.mkdir(exist_ok=True)
            copy.write_bytes(settings)
            copy.chmod(0o444)
    except (GitmemError, OSError):
        shutil.rmtree(target, ignore_errors=True)
        raise
    origin = "refs/remotes/origin/"
    scopes = sorted(r[len(origin) :] for r in refs if r.startswith(origin) and r != origin + "HEAD")
    return scopes, sorted(r for r in refs if r.startswith("refs/gitmem/"))


def fetch_url(workdir: Path, refspecs: list[str]) -> None:
    """``git fetch --prune origin REFSPECS`` in a clone of an HTTP(S) store."""
    _git(["fetch", "--quiet", "--prune", "origin", *refspecs], cwd=workdir)


def _credentials(url: str) -> dict[str, str]:
    """What ``git credential fill`` answers for ``url`` (empty when nothing is configured)."""
    try:
        out = _git(["credential", "fill"], stdin=f"url={url}\n\n")
    except GitmemError:
        return {}
    pairs = (line.partition("=") for line in out.splitlines())
    return {k: v for k, _, v in pairs if k}


def _extra_headers() -> list[str]:
    try:
        return _git(["config", "--get-all", "http.extraHeader"]).splitlines()
    except GitmemError:
        return []


def download_settings(url: str) -> bytes | None:
    """The store's settings file from ``<url>/gitmem/settings``, or None when it cannot be had."""
    import base64

    bare = _USERINFO.sub(r"\1", url).rstrip("/")
    request = urllib.request.Request(bare + "/gitmem/settings")
    for header in _extra_headers():
        name, _, value = header.partition(":")
        if name.strip() and value.strip():
            request.add_header(name.strip(), value.strip())
    if not request.has_header("Authorization"):
        cred = _credentials(url)
        if cred.get("password") or cred.get("username"):
            pair = f"{cred.get('username', '')}:{cred.get('password', '')}".encode()
            request.add_header("Authorization", "Basic " + base64.b64encode(pair).decode("ascii"))
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - http(s) only
            data: bytes = response.read(1 << 20)
            return data
    except (urllib.error.URLError, OSError, ValueError):
        return None
