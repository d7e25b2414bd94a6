"""Fixtures of the tuning-farm tests: a database per backend (PostgreSQL when
OCTUNE_TEST_POSTGRES_URL names a server, as .ci/run arranges), a real server over a socket,
real agents as separate processes on this machine's OpenCL device.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "server"))

from server_testing import postgres_database

from octune.db.server_store import ServerStore


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'octune.db'}"
    else:
        yield from postgres_database()


@pytest.fixture
def store(db_url) -> Iterator[ServerStore]:
    with ServerStore(db_url) as store:
        yield store
