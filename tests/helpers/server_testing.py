"""Helpers of the config-service tests: a PostgreSQL database per test (when
OCTUNE_TEST_POSTGRES_URL names a server, as .ci/run arranges), stored results, clients.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from helpers.cli_testing import OCTUNE
from octune.api.schemas import UploadIn
from octune.catalogue.family import Workload
from octune.catalogue.registry import KernelSpec
from octune.catalogue.space import ConfigTable
from octune.core.results import Measurement, Status
from octune.db.server_store import ServerStore
from octune.server.app import create_app
from octune.server.settings import ServerSettings
from octune.tuner.device import DeviceInfo

POSTGRES_ENV = "OCTUNE_TEST_POSTGRES_URL"


def postgres_database() -> Iterator[str]:
    """A fresh database on the test server for one test, dropped afterwards."""
    admin_url = os.environ.get(POSTGRES_ENV)
    if not admin_url:
        pytest.skip(f"{POSTGRES_ENV} is not set (.ci/run starts a PostgreSQL and sets it)")
    name = f"octune_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()


class Seeder:
    """Stores sessions of plausible measurements of real legal configs through the store."""

    def __init__(
        self, store: ServerStore, device: DeviceInfo, kernel: KernelSpec, table: ConfigTable
    ) -> None:
        self.store = store
        self.device = device
        self.kernel = kernel
        self.table = table

    def session(
        self,
        workload: Workload,
        rows: list[int],
        *,
        failed: int = 0,
        strategy: str = "random",
        milliseconds: list[float] | None = None,
    ) -> int:
        """Row i of ``rows`` runs in 1 + i/10 ms (the first is the best), or in
        ``milliseconds[i]``. ``failed`` more rows follow as build errors.
        """
        store = self.store
        session_id = store.start_session(
            store.device_id(self.device),
            store.kernel_version_id(
                self.kernel.name,
                self.kernel.sha256,
                self.kernel.source,
                self.kernel.space.source_text,
            ),
            store.workload_id(workload.problem, workload.key, workload.shape, workload.dtype),
            strategy=strategy,
            seed=1,
            settings={},
        )
        for i, row in enumerate(rows):
            times = (1e-3 * (milliseconds[i] if milliseconds else 1 + i / 10),) * 3
            store.add_measurement(
                session_id,
                Measurement(
                    self.table.config(row), Status.OK, times, flops=workload.flops, max_error=0.1
                ),
            )
        for row in rows[-1 : -1 - failed : -1]:
            store.add_measurement(
                session_id,
                Measurement(
                    self.table.config(row + 1),
                    Status.BUILD_ERROR,
                    flops=workload.flops,
                    message="error: out of resources",
                ),
            )
        store.finish_session(session_id, "completed")
        return session_id


def make_client(store: ServerStore, **settings: object) -> TestClient:
    return TestClient(create_app(ServerSettings(database_url="unused://", **settings), store))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def post_upload(client: TestClient, upload: UploadIn, token: str | None) -> object:
    headers = {"Content-Type": "application/json", **(bearer(token) if token else {})}
    return client.post("/v1/sessions", content=upload.model_dump_json(), headers=headers)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class LiveServer:
    """`octune serve` in a child process on a free loopback port, its log in a file."""

    def __init__(self, db_url: str, log: Path, *flags: str, port: int | None = None) -> None:
        self.port = port or free_port()  # a port of its own, or a stopped server's again
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        with log.open("w") as sink:
            self.process = subprocess.Popen(
                [*OCTUNE, "serve", "--db", db_url, "--port", str(self.port), *flags],
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/v1/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"octune serve did not start: {log.read_text()}")
            time.sleep(0.2)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
