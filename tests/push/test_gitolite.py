"""Pushes through a real gitolite3 over a real sshd on 127.0.0.1 (docs/git-servers.md, "gitolite").

The fixture starts its own sshd (own host key, own authorized_keys with gitolite's forced
``gitolite-shell <user>`` commands, a free port) and a gitolite whose ``GL_REPO_BASE`` is the
workspace's stores directory, so gitolite serves the gitmem store itself and git runs gitmem's
pre-receive/post-receive next to gitolite's ``update`` hook. gitolite sets ``GL_USER``; the hook
attributes the pushed versions to ``user:<GL_USER>``.
"""

from __future__ import annotations

import getpass
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gitmem.engine import ledger
from gitmem.store import Store
from tests.helpers import patience

SSHD = "/usr/sbin/sshd"
GITOLITE_SHELL = "/usr/share/gitolite3/gitolite-shell"
IDENTITY_VARS = ("REMOTE_USER", "GL_USERNAME", "GITEA_PUSHER_NAME", "GL_USER", "GITMEM_ACTOR")


def _missing() -> str | None:
    if shutil.which("gitolite") is None or not Path(GITOLITE_SHELL).exists():
        return "gitolite3 is not installed (Debian package gitolite3)"
    if not Path(SSHD).exists():
        return "sshd is not installed (Debian package openssh-server)"
    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        return "ssh is not installed (Debian package openssh-client)"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")


def run(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in IDENTITY_VARS}
    proc = subprocess.run(
        list(args), cwd=cwd, env={**base, **(env or {})}, capture_output=True, text=True, timeout=60
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return proc


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Gitolite:
    url: str  # ssh://USER@127.0.0.1:PORT/<store id>.git
    keys: dict[str, Path]
    home: Path

    def ssh_env(self, user: str) -> dict[str, str]:
        port = self.url.split(":")[2].split("/")[0]
        return {
            "GIT_SSH_COMMAND": (
                f"ssh -i {self.keys[user]} -p {port} -o IdentitiesOnly=yes -o BatchMode=yes "
                "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
            )
        }

    def git(
        self, user: str, *args: str, cwd: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return run("git", *args, env=self.ssh_env(user), cwd=cwd, check=check)


@pytest.fixture
def gitolite(store: Store, workspace: Path, tmp_path: Path) -> Iterator[Gitolite]:
    store.write("/a.md", "alpha", actor="user:root")
    home = tmp_path / "gl-home"  # the hosting user's gitolite home (never the real $HOME)
    home.mkdir()
    stores = workspace / "stores"
    run("gitolite", "setup", "-a", "admin", env={"HOME": str(home)})
    rc = home / ".gitolite.rc"
    text = rc.read_text()
    text, n = re.subn(
        r"^(\s*)UMASK\s*=>\s*0077,", rf"\1UMASK => 0022,\n\1GL_REPO_BASE => '{stores}',", text, flags=re.M
    )
    assert n == 1, "unexpected .gitolite.rc layout"
    rc.write_text(text)
    conf = home / ".gitolite" / "conf" / "gitolite.conf"
    repo = store.path.name[: -len(".git")]  # the store's directory follows its id
    conf.write_text(conf.read_text() + f"\nrepo {repo}\n    RW+     =   alice\n    R       =   bob\n")
    run("gitolite", "setup", env={"HOME": str(home)})  # compile; gitolite's update hook into every repo
    assert (store.path / "hooks" / "update").exists() and (store.path / "hooks" / "pre-receive").exists()

    keys = {}
    for name in ("host", "alice", "bob"):
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name))
        keys[name] = tmp_path / name
    lines = [
        f'command="HOME={home} {GITOLITE_SHELL} {user}",no-port-forwarding,no-X11-forwarding,'
        f"no-agent-forwarding,no-pty {(tmp_path / f'{user}.pub').read_text().strip()}"
        for user in ("alice", "bob")
    ]
    (tmp_path / "authorized_keys").write_text("\n".join(lines) + "\n")
    port = _free_port()
    (tmp_path / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys['host']}\nPidFile none\n"
        f"AuthorizedKeysFile {tmp_path / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        "PermitRootLogin prohibit-password\nPubkeyAuthentication yes\n"
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    log = open(tmp_path / "sshd.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(tmp_path / "sshd_config")], stdout=log, stderr=log)
    try:
        deadline = patience(10)
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"sshd did not start: {(tmp_path / 'sshd.log').read_text()}") from None
                time.sleep(0.05)
        yield Gitolite(f"ssh://{getpass.getuser()}@127.0.0.1:{port}/{repo}.git", keys, home)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def commit(work: Path, name: str, data: bytes, message: str) -> str:
    (work / name).write_bytes(data)
    run("git", "add", "-A", cwd=work)
    run("git", "commit", "-q", "-m", message, cwd=work)
    return run("git", "rev-parse", "HEAD", cwd=work).stdout.strip()


def refs(store: Store) -> dict[str, str]:
    out = run("git", f"--git-dir={store.path}", "for-each-ref", "--format=%(refname) %(objectname)").stdout
    return dict(line.split(" ", 1) for line in out.splitlines())


def test_a_push_through_gitolite_is_attributed_to_gl_user(
    gitolite: Gitolite, store: Store, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    gitolite.git("alice", "clone", "-q", gitolite.url, str(work))
    assert (work / "a.md").read_text() == "alpha"
    cid = commit(work, "b.md", b"beta\n", "add b")
    # The client's own claims (-o actor, the commit's author) do not outrank gitolite's GL_USER.
    gitolite.git("alice", "push", "-q", "-o", "actor=user:mallory", "origin", "main", cwd=work)
    [v] = [v for v in store.versions() if v.commit == cid]
    assert (v.path, v.operation, v.actor) == ("/b.md", "created", "user:alice")
    store.core.drain_pushes()  # the post-receive shim spooled the push; record it now
    push = ledger.entries(store.core, kind="push")[-1]
    assert push.actor == "user:alice" and push.data["identity"] == "GL_USER"


def test_a_violating_push_through_gitolite_is_refused_with_the_gitmem_lines(
    gitolite: Gitolite, store: Store, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    gitolite.git("alice", "clone", "-q", gitolite.url, str(work))
    before = refs(store)
    bad = commit(work, "nul.md", b"a\0b", "binary")
    proc = gitolite.git("alice", "push", "origin", "main", cwd=work, check=False)
    assert proc.returncode != 0
    lines = [ln.rstrip() for ln in proc.stderr.splitlines() if ln.startswith("remote: gitmem:")]
    assert lines == [
        f"remote: gitmem: refs/heads/main {bad[:12]}: /nul.md contains a NUL byte; memories are text",
        "remote: gitmem: push rejected (1 problem(s)); nothing was changed",
    ]
    assert refs(store) == before


def test_gitolite_read_access_clones_but_cannot_push(
    gitolite: Gitolite, store: Store, tmp_path: Path
) -> None:
    work = tmp_path / "bob-work"
    gitolite.git("bob", "clone", "-q", gitolite.url, str(work))  # R = bob
    before = refs(store)
    commit(work, "c.md", b"gamma\n", "add c")
    proc = gitolite.git("bob", "push", "origin", "main", cwd=work, check=False)
    assert proc.returncode != 0 and "DENIED" in proc.stderr  # gitolite refuses before receive-pack
    assert refs(store) == before
