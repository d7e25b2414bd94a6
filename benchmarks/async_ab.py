"""Asynchronous copies against copies through registers, config by config: each GEMM-family
config a ``gemm_classes.py`` run chose (its ``--out`` JSON), timed as chosen and with its tiles
going to local memory by asynchronous copies (``ASYNC = 1``) with 1 to 3 K tiles in flight
(``PF``), also at half the K tile, in turns, beside the vendor library. Every variant is
verified on every measurement; one that the device cannot build or run prints why.

    python benchmarks/async_ab.py --device NVIDIA --runs data/h100_squares/sq4096.json.gz
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lib.ab import in_turns
from lib.baselines import vendor_anchor
from lib.gemm_shapes import parse_shape
from lib.runs import chosen_configs

from octune.catalogue.registry import KernelSpec, load_kernel
from octune.core.errors import SpaceError
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.measure import DeviceRunner


def variants(
    kernel: KernelSpec, config: dict[str, int], limits: dict[str, int]
) -> dict[str, dict[str, int]]:
    """The chosen config and its legal asynchronous variants, by label."""
    chosen = {**config, "ASYNC": config.get("ASYNC", 0)}
    out = {"chosen": chosen}
    for kwg in (chosen["KWG"], chosen["KWG"] // 2):
        for pf in (1, 2, 3):
            variant = {**chosen, "ASYNC": 1, "PF": pf, "KWG": kwg,
                       "KUNROLL": min(chosen["KUNROLL"], kwg)}  # fmt: skip
            try:
                kernel.space.check(variant, limits)
            except SpaceError:
                continue
            out[f"async PF{pf} KWG{kwg}"] = variant
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--runs", type=Path, nargs="+", required=True)
    parser.add_argument("--shapes", nargs="*", default=None, help="only these shapes")
    parser.add_argument("--layout", default=None, help="every shape in this layout (NN, TN..)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    device = select_device(args.device)
    limits = DeviceInfo.from_cl(device).limits
    anchor_name, anchor = vendor_anchor(device)
    rows = []
    for shape, name, config in chosen_configs(args.runs):
        if args.shapes and shape not in args.shapes:
            continue
        if args.layout:
            shape = f"{shape.partition(':')[0]}:{args.layout}"
        workload = parse_shape(shape)
        kernel = load_kernel(name)
        runner = DeviceRunner(device, kernel, workload, seed=7, repeats=50, max_seconds=0.5)
        configs = variants(kernel, config, limits)
        times, failed = in_turns({label: (runner, variant) for label, variant in configs.items()})
        if not rows:  # does the compiler issue the copies? (NVIDIA's program binary is PTX)
            label = next((label for label in configs if label != "chosen"), None)
            if label is not None:
                options = kernel.build_options(configs[label], workload)
                binary = runner.build(options).binaries[0]
                print(f"cp.async in the {label} program: {binary.count(b'cp.async.c')}", flush=True)
        anchor_s = anchor(workload)
        best = {label: min(t) for label, t in times.items() if t}
        chosen = best.get("chosen", float("nan"))
        print(f"\n{shape} {name} (chosen: KWG {config['KWG']}, PF {config['PF']}; "
              f"{anchor_name} {anchor_s * 1e6:.1f} us)", flush=True)  # fmt: skip
        for label in configs:
            seconds = best.get(label, float("nan"))
            cells = (
                f"{seconds * 1e6:.1f} | {seconds / chosen:.3f} | {anchor_s / seconds:.2f}"
                if label in best
                else f"failed: {failed.get(label, '')}"
            )
            print(f"| {shape} | {name} | {label} | {cells} |", flush=True)
        rows.append({"shape": shape, "kernel": name, "configs": configs, "times_s": times,
                     "anchor_s": anchor_s, "failed": failed})  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({"rows": rows}, indent=1))


if __name__ == "__main__":
    main()
