"""Fixtures of the config-service tests; helpers live in tests/helpers/server_testing.py."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient
from helpers.server_testing import Seeder, make_client

from octune.server.tokens import create_token
from octune.tuner.device import DeviceInfo


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'octune.db'}"


@pytest.fixture
def seeder(store, device_info, gemm_kernel, gemm_table) -> Seeder:
    return Seeder(store, device_info, gemm_kernel, gemm_table)


@pytest.fixture
def other_device(device_info) -> DeviceInfo:
    return replace(
        device_info,
        name="Radeon RX 7900 XTX",
        driver_version="6.1",
        vendor="AMD",
        device_type="gpu",
    )


@pytest.fixture
def client(store) -> Iterator[TestClient]:
    with make_client(store, cache_check_s=0.0) as client:
        yield client


@pytest.fixture
def write_token(store) -> str:
    return create_token(store, "tuner", "trusted")


@pytest.fixture
def read_token(store) -> str:
    return create_token(store, "runtime", "read")
