"""A template edit against the template it replaces, config by config: each GEMM-family config
a ``gemm_classes.py`` run chose (its ``--out`` JSON), timed with the installed template and with
``--baseline`` (the same template before the edit, beside its ``#include`` files), in turns,
beside the vendor library. It answers whether an edit to a template's code pays, and where,
without search getting in the way; both versions are verified on every measurement.

    git show HEAD:kernels/gemm.cl > build/ab/gemm.cl && cp kernels/*.clh build/ab/
    python benchmarks/template_ab.py --device NVIDIA --baseline build/ab/gemm.cl \\
        --runs data/h100_k_groups/c2m_b.json.gz

A list written by hand in the same form (``{"rows": [{"shape", "kernel", "config"}, ...]}``)
works too: ``data/h100_edge/configs_edge_ab.json`` holds the latest class picks of 37 shapes
and five more, ``data/h100_held_out2/configs_top.json`` the packed picks at 4096- and
8192-cubed, ``configs_plain_top.json`` beside it the plain kernel's top-end configs: together
the check for an edit to ``gemm_tile``, whose code NVIDIA's compiler allocates registers for
differently after small edits (benchmarks/RESULTS.md, fifteenth and sixteenth parts of issue
19). ``template_reach.py`` tells first, without a device, which of those builds the edit
changes at all.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from lib.ab import in_turns
from lib.baselines import vendor_anchor
from lib.gemm_shapes import parse_shape
from lib.runs import add_missing_argument, assignments, chosen_configs, write_run

from octune.catalogue.registry import expand_includes, kernel_from_texts, load_kernel
from octune.tuner.device import select_device
from octune.tuner.measure import DeviceRunner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--baseline", type=Path, required=True, help="the template before")
    parser.add_argument("--runs", type=Path, nargs="+", required=True)
    add_missing_argument(parser)
    parser.add_argument(
        "--local-memory",
        type=int,
        default=None,
        metavar="KIB",
        help="local memory the spaces may assume, in place of what the device reports",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    device = select_device(args.device)
    anchor_name, anchor = vendor_anchor(device)
    before = expand_includes(args.baseline, args.baseline.parent)
    print(f"{'shape':>16} {'kernel':>18} {'before us':>10} {'after us':>10} {'after/before':>12} "
          f"{anchor_name + ' us':>10} {'ratio after':>11}", flush=True)  # fmt: skip
    rows = []
    for shape, name, config in chosen_configs(args.runs, missing=assignments(args.missing)):
        workload = parse_shape(shape)
        after = load_kernel(name)
        versions = {
            "before": kernel_from_texts(name, before, after.space.source_text),
            "after": after,
        }
        runners = {
            label: DeviceRunner(device, kernel, workload, seed=7, repeats=50, max_seconds=0.5)
            for label, kernel in versions.items()
        }
        if args.local_memory:  # a config's legality is checked against runner.info's limits
            for runner in runners.values():
                runner.info = replace(runner.info, local_mem_size=args.local_memory * 1024)
        times, failed = in_turns({label: (runner, config) for label, runner in runners.items()})
        best = {label: min(t) if t else float("nan") for label, t in times.items()}
        anchor_s = anchor(workload)
        print(f"{shape:>16} {name:>18} {best['before'] * 1e6:10.1f} {best['after'] * 1e6:10.1f} "
              f"{best['after'] / best['before']:12.3f} {anchor_s * 1e6:10.1f} "
              f"{anchor_s / best['after']:11.2f}" + (f"  failed: {failed}" if failed else ""),
              flush=True)  # fmt: skip
        rows.append({"shape": shape, "kernel": name, "config": config, "times_s": times,
                     "anchor_s": anchor_s, "failed": failed})  # fmt: skip
    if args.out:
        write_run(args.out, {"device": device.name, "anchor": anchor_name, "rows": rows})


if __name__ == "__main__":
    main()
