"""The git-over-ssh driver: a real gitolite3 behind its own sshd on 127.0.0.1, one for the module;
the gitolite user is the caller (docs/access.md)."""

from __future__ import annotations

import getpass
import os
import re
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drivers_remote import push_outcome
from kit import NONE, Got, World, git, path_of, push_change, sid_of
from matrix import Cell
from serverkit import free_port

from gitmem.model.caller import Caller
from gitmem.push.pushenv import session_namespace
from tests.helpers import patience

SSHD = "/usr/sbin/sshd"
GITOLITE_SHELL = "/usr/share/gitolite3/gitolite-shell"


GL_USERS = {"rw": "alice", "ro": "bob", "review": "carol", "other": "dave", "none": "eve"}


def git_ssh(w: World, cell: Cell) -> Got:
    """git over ssh through a real gitolite3 (sshd on 127.0.0.1): the gitolite user is the caller."""
    gl = gitolite(w)
    user = GL_USERS[cell.caller]
    env = gl.env(user)
    work = w.home.parent / f"git-{sid_of(cell, 's')}"
    if cell.op == "clone":
        r = git("clone", "-q", "--mirror", gl.url, str(work), env=env)
        if r.returncode:
            code = "denied" if "DENIED" in r.stderr else "auth" if "Permission denied" in r.stderr else "git"
            return Got("refused", code, r.stderr)
        refs = git("for-each-ref", "--format=%(refname)", cwd=work).stdout
        return Got("allowed") if "refs/gitmem/proposals/" in refs else Got("hidden", detail=refs)
    claim = cell.case == "claim-session"  # -o session=<another's>: put under the pusher's own
    r, path, text, gone = push_change(
        gl.url, work, cell, "change", env, ("session=sesn_rw",) if claim else ()
    )
    session = f"{session_namespace('user:' + user)}.sesn_rw" if claim else NONE
    return push_outcome(
        r, w, path, text, gone, store=gl.store, want_actor=f"user:{user}", want_session=session
    )


@dataclass
class Gitolite:
    url: str
    keys: dict[str, Path]
    port: int
    store: Any

    def env(self, user: str) -> dict[str, str]:
        return {
            "GIT_SSH_COMMAND": (
                f"ssh -i {self.keys[user]} -p {self.port} -o IdentitiesOnly=yes -o BatchMode=yes "
                "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
            )
        }


def _run(*args: str, env: dict[str, str] | None = None) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "GITMEM_", "GL_"))}
    p = subprocess.run(list(args), env={**base, **(env or {})}, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"{' '.join(args)}: {p.stdout}{p.stderr}"


def gitolite(w: World) -> Gitolite:
    """One gitolite3 behind its own sshd for the module, serving the store ``sshnotes`` (which
    the other faces never touch: gitolite adds its own ``update`` hook to the repositories it
    serves). alice may write (RW+), bob only read, carol write but the store's ``acl.review``
    names her, dave has no rule; eve's key is unknown. Readers who are not reviewers (bob, carol)
    get ``transfer.hideRefs=refs/gitmem/proposals`` in their key's forced command
    (docs/access.md, "Who receives which refs")."""
    if "gitolite" in w.extra:
        return w.extra["gitolite"]  # type: ignore[no-any-return]
    import gitmem

    base = w.home.parent / "gitolite"
    home, repos = base / "home", base / "repos"
    home.mkdir(parents=True)
    repos.mkdir()
    store = gitmem.create_store("sshnotes", home=w.home)
    w.extra.setdefault("cleanup", []).append(store.close)
    for op in ("update", "rename", "delete"):
        for caller in GL_USERS:
            store.write(path_of(Cell(op, "git-ssh", caller, "")), "seed\n", actor="user:seed")
    store.update_settings(acl={"review": {"main": ["user:carol"]}})
    store.write("/proposed.md", "proposed\n", caller=Caller(actor="user:p", session="sesn_p", review=True))
    repo = store.path.name[: -len(".git")]
    (repos / store.path.name).symlink_to(store.path)
    _run("gitolite", "setup", "-a", "admin", env={"HOME": str(home)})
    rc = home / ".gitolite.rc"
    text, n = re.subn(
        r"^(\s*)UMASK\s*=>\s*0077,",
        rf"\1UMASK => 0022,\n\1GL_REPO_BASE => '{repos}',",
        rc.read_text(),
        flags=re.M,
    )
    assert n == 1, "unexpected .gitolite.rc layout"
    rc.write_text(text)
    conf = home / ".gitolite" / "conf" / "gitolite.conf"
    rules = "    RW+     =   alice carol\n    R       =   bob\n"
    conf.write_text(conf.read_text() + f"\nrepo {repo}\n{rules}")
    _run("gitolite", "setup", env={"HOME": str(home)})
    keys = {}
    for name in ("host", *GL_USERS.values()):
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / name))
        keys[name] = base / name
    hide = "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=transfer.hideRefs GIT_CONFIG_VALUE_0=refs/gitmem/proposals "
    # the hooks run this test's gitmem (a worktree on PYTHONPATH), not whatever the venv installed
    pypath = f"PYTHONPATH={os.environ['PYTHONPATH']} " if os.environ.get("PYTHONPATH") else ""
    lines = [
        f'command="{hide if user in ("bob", "carol") else ""}{pypath}HOME={home} {GITOLITE_SHELL} {user}",'
        f"no-port-forwarding,no-X11-forwarding,no-agent-forwarding,no-pty {(base / f'{user}.pub').read_text().strip()}"
        for user in ("alice", "bob", "carol", "dave")
    ]
    (base / "authorized_keys").write_text("\n".join(lines) + "\n")
    port = free_port()
    (base / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys['host']}\nPidFile none\n"
        f"AuthorizedKeysFile {base / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        "PermitRootLogin prohibit-password\nPubkeyAuthentication yes\n"
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(exist_ok=True)
    log = open(base / "sshd.log", "w")  # noqa: SIM115 - closed by the cleanup
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(base / "sshd_config")], stdout=log, stderr=log)

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()

    w.extra["cleanup"].append(stop)
    deadline = patience(30)
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, (base / "sshd.log").read_text()
            time.sleep(0.05)
    gl = Gitolite(f"ssh://{getpass.getuser()}@127.0.0.1:{port}/{repo}.git", keys, port, store)
    w.extra["gitolite"] = gl
    return gl
