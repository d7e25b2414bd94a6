"""A short first look at a GPU: devices, a few candidates per size, seconds per candidate."""

from __future__ import annotations

import sys
import time

from octune.catalogue.registry import load_kernel
from octune.db.store import Store
from octune.kernels.gemm import gemm_workload
from octune.tuner.device import DeviceInfo, list_devices, select_device
from octune.tuner.measure import DeviceRunner

for index, device in enumerate(list_devices()):
    info = DeviceInfo.from_cl(device)
    print(index, info.name, info.platform_name, info.driver_version, info.fingerprint)
device = select_device(sys.argv[1] if len(sys.argv) > 1 else "NVIDIA")
info = DeviceInfo.from_cl(device)
kernel = load_kernel("gemm")
table = kernel.space.enumerate(info.limits)
Store("sqlite:////tmp/smoke.db")
hand = {"MWG": 128, "NWG": 128, "KWG": 16, "MDIMC": 16, "NDIMC": 16, "VWM": 4, "VWN": 4,
        "VWA": 4, "VWB": 4, "SA": 1, "SB": 1, "KUNROLL": 4, "STRM": 1, "STRN": 1}  # fmt: skip
for size in (1024, 4096, 1000, 77):
    started = time.perf_counter()
    runner = DeviceRunner(device, kernel, gemm_workload(size, size, size), seed=0)
    print(f"{size}: bind {time.perf_counter() - started:.1f} s", flush=True)
    for row in [table.index(hand), *range(0, len(table), len(table) // 6)]:
        started = time.perf_counter()
        result = runner.measure(table.config(row))
        gflops = result.gflops or 0
        seconds = time.perf_counter() - started
        print(
            f"  {result.status.value:12s} {gflops:9.0f} GFLOP/s {seconds:5.2f} s "
            f"{result.message[:80]!r} {table.config(row)}",
            flush=True,
        )
