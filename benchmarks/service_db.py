"""Make a realistic config-service database: 4 devices x 250 GEMM workloads x 1,000 measured
candidates = 1,000,000 measurement rows (about 8 % of them failures), over real legal configs
of the installed gemm search space (20,000 of them, drawn once).

    python benchmarks/service_db.py sqlite:////tmp/octune-1m.db [--per-session 1000]

Times are synthetic but shaped like real tuning: a device's peak GFLOP/s times an efficiency
that depends on the config (tile sizes, vector widths, staging) and on the shape, plus noise.
Rows are written with bulk inserts after the Store has created and migrated the schema.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import time

import numpy as np
from sqlalchemy import create_engine, insert

from octune.catalogue.family import Workload
from octune.catalogue.registry import load_kernel
from octune.core.results import config_key
from octune.db.models import MeasurementRow
from octune.db.store import Store
from octune.kernels.gemm import gemm_workload
from octune.tuner.device import DeviceInfo

#: The device whose limits the GEMM space is enumerated for: limits as a device reports them
#: (``DeviceInfo.limits``, so every name a space asks for is there).
LIMITS = DeviceInfo(
    platform_name="bench", platform_version="OpenCL 3.0", vendor="bench", name="bench",
    driver_version="1.0", compute_units=16, max_work_group_size=256,
    max_work_item_sizes=(256, 256, 64), local_mem_size=49152, global_mem_size=16 << 30,
    device_type="gpu",
).limits  # fmt: skip
DEVICES = [  # (name, vendor, type, compute units, peak GFLOP/s)
    ("NVIDIA GeForce RTX 4090", "NVIDIA Corporation", "gpu", 128, 80_000.0),
    ("AMD Radeon RX 7900 XTX", "Advanced Micro Devices, Inc.", "gpu", 96, 60_000.0),
    ("Intel(R) Arc(TM) A770 Graphics", "Intel(R) Corporation", "gpu", 32, 19_000.0),
    ("pthread-AMD EPYC", "AuthenticAMD", "cpu", 2, 60.0),
]
POOL = 20_000  # distinct configs sessions draw from (of the ~97,000 legal ones)
SIZES = [64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096]


def workloads(count: int) -> list[Workload]:
    """DNN-like shapes: every size triple, NN first, then the transposed layouts."""
    shapes = list(itertools.product(SIZES, SIZES, SIZES))
    rng = np.random.default_rng(0)
    rng.shuffle(shapes)
    layouts = [(False, False), (False, True), (True, False)]
    return [gemm_workload(m, n, k, *layouts[i % 3]) for i, (m, n, k) in enumerate(shapes[:count])]


def config_score(config: dict[str, int]) -> float:
    """How well a config uses a device, before the shape's edge waste: register tiles, local
    staging and vector widths help, with a per-config jitter the model cannot explain.
    """
    tile = config["MWG"] * config["NWG"]
    per_item = (config["MWG"] // config["MDIMC"]) * (config["NWG"] // config["NDIMC"])
    score = (
        0.25
        + 0.2 * min(per_item, 32) / 32
        + 0.1 * (config["SA"] + config["SB"])
        + 0.05 * np.log2(config["VWM"] * config["VWN"]) / 6
        + 0.1 * min(tile, 16384) / 16384
    )
    jitter = int(hashlib.sha256(config_key(config).encode()).hexdigest()[:6], 16) / 0xFFFFFF
    return score * (0.7 + 0.3 * jitter)


def efficiency(config: dict[str, int], score: float, workload: Workload) -> float:
    waste = (-workload.shape["m"] % config["MWG"]) / workload.shape["m"] + (
        -workload.shape["n"] % config["NWG"]
    ) / workload.shape["n"]
    return max(0.02, score * (1 - min(waste, 0.9)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--workloads", type=int, default=250)
    parser.add_argument("--per-session", type=int, default=1000)
    args = parser.parse_args()
    started = time.monotonic()
    kernel = load_kernel("gemm")
    table = kernel.space.enumerate(LIMITS)
    print(f"{len(table):,} legal configs")
    rng = np.random.default_rng(1)
    pool = [table.config(int(row)) for row in rng.choice(len(table), size=POOL, replace=False)]
    pool_keys = [config_key(config) for config in pool]
    pool_scores = [config_score(config) for config in pool]
    store = Store(args.url)
    kernel_id = store.kernel_version_id(
        kernel.name, kernel.sha256, kernel.source, kernel.space.source_text
    )
    engine = create_engine(args.url)
    total = 0
    for name, vendor, kind, units, peak in DEVICES:
        info = DeviceInfo(
            platform_name="bench", platform_version="OpenCL 3.0", vendor=vendor, name=name,
            driver_version="1.0", compute_units=units, max_work_group_size=1024,
            max_work_item_sizes=(1024, 1024, 64), local_mem_size=65536,
            global_mem_size=16 << 30, device_type=kind,
        )  # fmt: skip
        device_id = store.device_id(info)
        for workload in workloads(args.workloads):
            workload_id = store.workload_id(
                workload.problem, workload.key, workload.shape, workload.dtype
            )
            session_id = store.start_session(device_id, kernel_id, workload_id, "random", 1, {})
            rows = []
            for row in rng.choice(POOL, size=args.per_session, replace=False):
                config = pool[row]
                failed = rng.random() < 0.08
                median = workload.flops / (
                    peak * 1e9 * efficiency(config, pool_scores[row], workload)
                )
                times = [] if failed else list(median * (1 + 0.02 * rng.standard_normal(5)))
                ok = (
                    {}
                    if failed
                    else {
                        "median_s": float(np.median(times)),
                        "spread_s": float(np.subtract(*np.percentile(times, [75, 25]))),
                        "gflops": workload.flops / float(np.median(times)) / 1e9,
                        "max_error": 0.05,
                    }
                )
                rows.append(
                    {
                        "session_id": session_id, "config": config,
                        "config_key": pool_keys[row],
                        "status": "build_error" if failed else "ok",
                        "median_s": None, "spread_s": None, "gflops": None, "max_error": None,
                        **ok, "times_s": times, "flops": workload.flops,
                        "message": "error: too many resources requested" if failed else "",
                        "extra": {},
                    }
                )  # fmt: skip
            with engine.begin() as connection:
                connection.execute(insert(MeasurementRow), rows)
            store.finish_session(session_id, "completed")
            total += len(rows)
        print(f"{name}: {total:,} measurements so far ({time.monotonic() - started:.0f} s)")
    engine.dispose()
    store.close()


if __name__ == "__main__":
    main()
