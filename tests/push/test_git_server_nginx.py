"""The gitmem hooks under ``git http-backend`` behind nginx + fcgiwrap with basic auth (the recipe of
docs/git-servers.md): clone, a good push attributed to the authenticated user, a violating push
refused with the ``remote: gitmem:`` lines. Needs the Debian packages nginx, fcgiwrap, apache2-utils."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import gitmem
from gitmem.store import Store
from tests.helpers import patience

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
FCGIWRAP = shutil.which("fcgiwrap") or "/usr/sbin/fcgiwrap"
HTPASSWD = shutil.which("htpasswd")
BACKEND = "/usr/lib/git-core/git-http-backend"

for path, package in ((NGINX, "nginx"), (FCGIWRAP, "fcgiwrap"), (HTPASSWD, "apache2-utils")):
    if path is None or not os.path.exists(path):
        pytest.skip(f"needs the Debian package {package}", allow_module_level=True)

CONF = """
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
{user}
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body;
  fastcgi_temp_path {tmp}/fastcgi;
  proxy_temp_path {tmp}/proxy;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  server {{
    listen 127.0.0.1:{port};
    client_max_body_size 0;
    location ~ ^/git(/.*)$ {{
      auth_basic "gitmem";
      auth_basic_user_file {tmp}/htpasswd;
      include /etc/nginx/fastcgi_params;
      fastcgi_param SCRIPT_FILENAME {backend};
      fastcgi_param GIT_PROJECT_ROOT {root};
      fastcgi_param GIT_HTTP_EXPORT_ALL "";
      fastcgi_param PATH_INFO $1;
      fastcgi_param REMOTE_USER $remote_user;
      fastcgi_param PATH /usr/local/bin:/usr/bin:/bin;
      fastcgi_pass unix:{tmp}/fcgiwrap.sock;
    }}
  }}
}}
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(check: object, what: str) -> None:
    deadline = patience(20)
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.05)


@pytest.fixture
def nginx(store: Store, tmp_path: Path) -> Iterator[str]:
    tmp = tmp_path / "nginx"
    tmp.mkdir()
    subprocess.run(
        [HTPASSWD or "htpasswd", "-bc", str(tmp / "htpasswd"), "alice", "s3cret"],
        check=True,
        capture_output=True,
    )
    sock = tmp / "fcgiwrap.sock"
    fcgi = subprocess.Popen(
        [FCGIWRAP, "-c", "2", "-s", f"unix:{sock}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    port = _port()
    user = "user root;" if os.geteuid() == 0 else ""
    conf = CONF.format(tmp=tmp, port=port, backend=BACKEND, root=store.path.parent, user=user)
    (tmp / "nginx.conf").write_text(conf)
    server = None
    try:
        _wait(sock.exists, "fcgiwrap")
        server = subprocess.Popen(
            [NGINX, "-p", str(tmp), "-c", str(tmp / "nginx.conf")], stderr=subprocess.PIPE
        )

        def listening() -> bool:
            if server is not None and server.poll() is not None:
                raise RuntimeError(f"nginx exited: {server.stderr.read().decode() if server.stderr else ''}")
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        _wait(listening, "nginx")
        yield f"http://127.0.0.1:{port}/git/{store.path.name}"
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        os.killpg(fcgi.pid, signal.SIGTERM)  # fcgiwrap and the children it forked
        fcgi.wait(timeout=10)


def git(*args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REMOTE_USER", "GITMEM_ACTOR")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def test_hooks_under_nginx_fcgiwrap_http_backend(nginx: str, store: Store, tmp_path: Path) -> None:
    store.write("/a.md", "alpha\n", actor="user:seed")
    assert git("clone", "-q", nginx, str(tmp_path / "anon"), check=False).returncode != 0  # 401
    url = nginx.replace("http://", "http://alice:s3cret@")
    work = tmp_path / "w"
    git("clone", "-q", url, str(work))
    assert (work / "a.md").read_text() == "alpha\n"

    (work / "b.md").write_text("beta\n")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "good", cwd=work)
    new = git("rev-parse", "HEAD", cwd=work).stdout.strip()
    git("push", "-q", "origin", "main", cwd=work)
    assert str(store.core.tip("main")) == new
    gitmem.open_store(store.path).close()  # the next gitmem process records the spooled push
    record = json.loads((store.core.gitmem_dir / "pushes.jsonl").read_text().splitlines()[-1])
    assert (record["new"], record["actor"]) == (new, "user:alice")

    (work / "nul.md").write_bytes(b"a\0b")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "bad", cwd=work)
    bad = git("rev-parse", "HEAD", cwd=work).stdout.strip()
    proc = git("push", "origin", "main", cwd=work, check=False)
    assert proc.returncode != 0
    assert [line.rstrip() for line in proc.stderr.splitlines() if line.startswith("remote: gitmem:")] == [
        f"remote: gitmem: refs/heads/main {bad[:12]}: /nul.md contains a NUL byte; memories are text",
        "remote: gitmem: push rejected (1 problem(s)); nothing was changed",
    ]
    assert str(store.core.tip("main")) == new
