"""A real PostgreSQL per test worker (tests/pgkit.py), and a fresh database for each test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from tests.pgkit import Postgres, bindir, fresh_database, running_postgres

_names = itertools.count()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    if bindir() is None:
        pytest.skip("needs PostgreSQL (Debian package postgresql)")
    pytest.importorskip("psycopg")
    with running_postgres() as pg:
        yield pg


@pytest.fixture
def database(postgres: Postgres) -> str:
    """The DSN of a new, empty database."""
    return fresh_database(postgres, f"gitmem_test_{next(_names)}")
