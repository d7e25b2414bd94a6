"""K groups (gemm.cl's KDIMC) against one group, config by config: each GEMM-family config a
``gemm_classes.py`` run chose (its ``--out`` JSON), re-timed now as it was (KDIMC = 1) and with
2 and 4 K groups sharing its tile of C, beside cuBLAS in the same run. It answers whether more
warps per tile of C, each with a shorter chain of K tiles, lift the medium shapes whose tiles
are too few to fill the device, without search getting in the way.

    python benchmarks/gemm_k_groups.py --device NVIDIA --runs data/h100_batch_gemv/run2.json.gz
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lib.baselines import vendor_anchor
from lib.gemm_shapes import parse_shape
from lib.runs import chosen_configs

from octune.catalogue.registry import load_kernel
from octune.core.errors import OctuneError
from octune.tuner.device import select_device
from octune.tuner.measure import DeviceRunner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--runs", type=Path, nargs="+", required=True)
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    device = select_device(args.device)
    anchor_name, anchor = vendor_anchor(device)
    results = []
    print(f"{'shape':>16} {'kernel':>18} " + " ".join(f"{f'KDIMC {g}':>9}" for g in args.groups)
          + f" {anchor_name:>8} {'best ratio':>10}   (us)", flush=True)  # fmt: skip
    for shape, name, config in chosen_configs(args.runs):
        workload = parse_shape(shape)
        kernel = load_kernel(name)
        runner = DeviceRunner(device, kernel, workload, seed=7, repeats=50, max_seconds=0.5)
        times: dict[int, float | str] = {}
        for groups in args.groups:
            candidate = {**config, "KDIMC": groups}
            try:
                kernel.space.check(candidate, runner.info.limits)
            except OctuneError as error:
                times[groups] = f"illegal: {error}"
                continue
            measurement = runner.measure(candidate)
            ok = measurement.ok and measurement.median_s
            times[groups] = measurement.median_s if ok else measurement.status.value
        anchor_s = anchor(workload)
        measured = [t for t in times.values() if isinstance(t, float)]
        ratio = anchor_s / min(measured) if measured else float("nan")
        cells = [f"{t * 1e6:9.1f}" if isinstance(t, float) else f"{'-':>9}" for t in times.values()]
        print(f"{shape:>16} {name:>18} {' '.join(cells)} {anchor_s * 1e6:8.1f} {ratio:10.2f}",
              flush=True)  # fmt: skip
        results.append({"shape": shape, "kernel": name, "config": config, "times_s": times,
                        "anchor_s": anchor_s})  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({"rows": results}, indent=1))


if __name__ == "__main__":
    main()
