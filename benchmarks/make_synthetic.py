"""Write the small synthetic recorded spaces the tests replay (benchmarks/data/synthetic_*.json.gz,
copied beside the tests that read them in tests/tuner/data).

The times follow a known structure a cost model can learn and random search cannot exploit:
a register-tile sweet spot, a work-group size sweet spot that moves with the shape, a vector
width that must match the tile, local-memory staging that pays off only for large groups, a
wave-quantisation term from the launch geometry, log-normal noise, and failures (too many
registers, plus a few at random). Deterministic: the same seed writes the same files.

    python benchmarks/make_synthetic.py [--out benchmarks/data]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from octune.catalogue.space import SearchSpace
from octune.replay.harness import SHAPE_NAMES, RecordedSpace

SPACE = """
kernel: synthetic
problem: gemm
entry: synthetic
description: A toy tiled kernel whose recorded times are generated, for tests.
parameters:
  TM: {values: [1, 2, 4, 8]}
  TN: {values: [1, 2, 4, 8]}
  WGM: {values: [2, 4, 8, 16, 32]}
  WGN: {values: [2, 4, 8, 16, 32]}
  VW: {values: [1, 2, 4, 8]}
  UNROLL: {values: [1, 2, 4, 8]}
  LOCAL: {values: [0, 1]}
derived:
  WGS: WGM * WGN
  OUTPUTS: TM * TN
  LOCAL_BYTES: LOCAL * 4 * 16 * (WGM * TM + WGN * TN)
constraints:
  - TN % VW == 0
  - WGS >= 8
  - WGS <= max_work_group_size
  - LOCAL_BYTES <= local_mem_size
launch:
  local: [WGN, WGM]
  global: ["ceil_div(N, WGN * TN) * WGN", "ceil_div(M, WGM * TM) * WGM"]
"""
DEVICE = {
    "platform_name": "synthetic",
    "platform_version": "1",
    "vendor": "octune",
    "name": "synthetic device",
    "driver_version": "1",
    "compute_units": 16,
    "max_work_group_size": 256,
    "max_work_item_sizes": [256, 256, 64],
    "local_mem_size": 8192,
    "global_mem_size": 1 << 30,
    "device_type": "gpu",
    "fingerprint": "synthetic0000000",
}
LIMITS = {
    "max_work_group_size": 256,
    "max_work_item_size_0": 256,
    "max_work_item_size_1": 256,
    "max_work_item_size_2": 64,
    "local_mem_size": 8192,
    "compute_units": 16,
}
SHAPES = {"a": (512, 512, 512), "b": (256, 1024, 256)}
DATA = Path(__file__).resolve().parent / "data"


def times(space: SearchSpace, m: int, n: int, k: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """Generated seconds per config (NaN for failures) and each config's status."""
    table = space.enumerate(LIMITS)
    tm, tn, wgm, wgn, vw, unroll, local = (
        table.column(p).astype(float) for p in ["TM", "TN", "WGM", "WGN", "VW", "UNROLL", "LOCAL"]
    )
    rng = np.random.default_rng(seed)
    outputs, wgs = tm * tn, wgm * wgn
    best_wgs = 64 if m == n else 128  # the sweet spot moves with the shape: transfer must adapt
    log_t = (
        0.35 * (np.log2(outputs) - 4) ** 2
        + 0.25 * (np.log2(wgs) - math.log2(best_wgs)) ** 2
        - 0.3 * np.log2(vw) * (tn == 8)
        + 0.15 * np.abs(np.log2(unroll) - 2)
        + np.where(local == 1, np.where(wgs >= 64, -0.6, 0.4), 0.0)
    )
    groups = np.ceil(n / (wgn * tn)) * np.ceil(m / (wgm * tm))
    waves = np.ceil(groups / LIMITS["compute_units"])
    log_t += 0.5 * np.log(waves * LIMITS["compute_units"] / groups)
    seconds = 2.0 * m * n * k / 5e11 * np.exp(log_t + rng.normal(0.0, 0.05, len(table)))
    failed = (outputs * vw > 32) | (rng.random(len(table)) < 0.03)
    seconds[failed] = np.nan
    status = ["launch_error" if f else "ok" for f in failed.tolist()]
    return seconds, status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DATA, help="folder to write them to")
    out = parser.parse_args().out
    space = SearchSpace.from_yaml(SPACE, "synthetic.yaml", SHAPE_NAMES)
    table = space.enumerate(LIMITS)
    for index, (label, (m, n, k)) in enumerate(SHAPES.items()):
        seconds, status = times(space, m, n, k, seed=index)
        recorded = RecordedSpace(
            kernel={"name": "synthetic", "sha256": "synthetic", "space_source": SPACE},
            device=DEVICE,
            limits=LIMITS,
            workload={
                "problem": "gemm",
                "shape": {"m": m, "n": n, "k": k, "transa": 0, "transb": 0},
                "dtype": "float32",
                "flops": 2 * m * n * k,
            },
            values={p.name: list(p.values) for p in space.parameters},
            parameters=space.parameter_names,
            configs=np.array(table.values),
            status=status,
            time_s=seconds,
            notes={"synthetic": True, "seed": index},
        )
        path = out / f"synthetic_{label}.json.gz"
        recorded.save(path)
        print(f"wrote {path}: {len(table)} configs, {status.count('ok')} ok")


if __name__ == "__main__":
    main()
