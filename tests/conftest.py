"""Shared fixtures: the real OpenCL device the suite runs on: the first that compiles, as
`octune tune` picks it (in CI, PoCL's CPU device, or Intel's CPU runtime where PoCL cannot
compile). No device that compiles fails every test that uses one, loudly: never a skip.
"""

from __future__ import annotations

import pyopencl as cl
import pytest

from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.kernels import KernelSpec, load_kernel
from octune.tuner.space import ConfigTable


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
