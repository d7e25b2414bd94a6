"""Shared fixtures: the real OpenCL device the suite runs on: the first that compiles, as
`octune tune` picks it (in CI, PoCL's CPU device, or Intel's CPU runtime where PoCL cannot
compile). No device that compiles fails every test that uses one, loudly: never a skip.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pyopencl as cl
import pytest
from helpers.server_testing import postgres_database

from octune.catalogue.registry import KernelSpec, load_kernel
from octune.catalogue.space import ConfigTable
from octune.db.server_store import ServerStore
from octune.tuner.device import DeviceInfo, select_device


@pytest.fixture(scope="session", autouse=True)
def _own_data_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Commands that default to the user's database (under $XDG_DATA_HOME) use a folder of this
    run's own, in this process and in the processes it starts: tests never touch the user's data.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("data")))
        yield


@pytest.fixture(scope="session")
def cl_device() -> cl.Device:
    return select_device()


@pytest.fixture(scope="session")
def device_info(cl_device: cl.Device) -> DeviceInfo:
    return DeviceInfo.from_cl(cl_device)


@pytest.fixture(scope="session")
def gemm_kernel() -> KernelSpec:
    return load_kernel("gemm")


@pytest.fixture(scope="session")
def gemm_table(gemm_kernel: KernelSpec, device_info: DeviceInfo) -> ConfigTable:
    return gemm_kernel.space.enumerate(device_info.limits)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A server database per backend: the server's and the farm's tests run on both
    (PostgreSQL when OCTUNE_TEST_POSTGRES_URL names a server, as .ci/run arranges).
    """
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'octune.db'}"
    else:
        yield from postgres_database()


@pytest.fixture
def store(db_url: str) -> Iterator[ServerStore]:
    with ServerStore(db_url) as store:
        yield store


class Result(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys, monkeypatch):
    """The `octune` command run in this process (its main(), so one-line errors and exit
    codes are the real ones) without paying an interpreter start per call.
    """
    from octune.cli import main

    def run(*args: str, db: Path | None = None) -> Result:
        monkeypatch.setenv("OCTUNE_DATABASE_URL", f"sqlite:///{db or Path('unused.db')}")
        monkeypatch.setattr(sys, "argv", ["octune", *args])
        try:
            main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        out, err = capsys.readouterr()
        return Result(code, " ".join(out.split()) if args[0] != "lookup" else out, err)

    return run
