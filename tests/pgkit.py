"""A real PostgreSQL for the tests: ``initdb`` and ``pg_ctl`` in a temporary directory, on 127.0.0.1.

PostgreSQL refuses to run as root, and CI runs as root: then the server runs as the ``postgres``
user that Debian's package creates (``subprocess``'s ``user=``, no ``su``). Debian keeps the server
binaries off PATH; ``pg_config --bindir`` names their directory.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Postgres:
    dsn: str
    port: int
    data: Path
    options: str = ""  # pg_ctl's -o, to start it again (stopped())


def bindir() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl``, or None when PostgreSQL is not installed."""
    for name in ("initdb", "pg_ctl"):
        found = shutil.which(name)
        if found:
            return Path(found).parent
    config = shutil.which("pg_config")
    if config:
        out = subprocess.run([config, "--bindir"], capture_output=True, text=True, check=False).stdout.strip()
        if out and (Path(out) / "initdb").exists():
            return Path(out)
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return candidates[-1].parent if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_owner() -> dict[str, Any]:
    if os.geteuid() != 0:
        return {}
    return {"user": "postgres", "group": "postgres", "extra_groups": []}


@contextmanager
def running_postgres() -> Iterator[Postgres]:
    """Start a throwaway PostgreSQL; yield its DSN; stop it and delete its files."""
    bins = bindir()
    if bins is None:
        raise RuntimeError("PostgreSQL is not installed (Debian package postgresql)")
    root = Path(tempfile.mkdtemp(prefix="gitmem-pg-", dir=os.environ.get("PYTEST_DEBUG_TEMPROOT", "/tmp")))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    owner = _as_owner()
    if owner:
        shutil.chown(root, "postgres", "postgres")
        shutil.chown(sock, "postgres", "postgres")
    env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
    subprocess.run(
        [str(bins / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"],
        check=True, capture_output=True, env=env, cwd=root, **owner,
    )  # fmt: skip
    port = _free_port()
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {sock} -c fsync=off -c max_connections=200"
    subprocess.run(
        [str(bins / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "-t", "120", "start"],
        check=True, capture_output=True, env=env, cwd=root, **owner,
    )  # fmt: skip
    try:
        dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        yield Postgres(dsn=dsn, port=port, data=data, options=options)
    finally:
        subprocess.run(
            [str(bins / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            capture_output=True, env=env, cwd=root, check=False, **owner,
        )  # fmt: skip
        for _ in range(50):
            shutil.rmtree(root, ignore_errors=True)
            if not root.exists():
                break
            time.sleep(0.1)


@contextmanager
def stopped(pg: Postgres) -> Iterator[None]:
    """PostgreSQL down (stopped at once, as if its machine were lost) inside the block; the same
    server, with its data, started again after it."""
    bins = bindir()
    assert bins is not None and pg.options
    env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
    root, owner = pg.data.parent, _as_owner()
    subprocess.run(
        [str(bins / "pg_ctl"), "-D", str(pg.data), "-m", "immediate", "-w", "stop"],
        check=True, capture_output=True, env=env, cwd=root, **owner,
    )  # fmt: skip
    try:
        yield
    finally:
        subprocess.run(
            [str(bins / "pg_ctl"), "-D", str(pg.data), "-o", pg.options, "-l", str(root / "log"),
             "-w", "-t", "120", "start"],
            check=True, capture_output=True, env=env, cwd=root, **owner,
        )  # fmt: skip


def fresh_database(pg: Postgres, name: str) -> str:
    """A new, empty database on ``pg``; its DSN."""
    import psycopg

    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return pg.dsn.rsplit("/", 1)[0] + "/" + name
