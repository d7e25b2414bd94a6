"""Nsight Compute on the configs earlier runs chose, each beside the vendor library's kernels for
the same workload (cuBLAS or cuDNN through PyTorch), in one profile: what a kernel-for-kernel gap
that ``launch_cost.py``'s PTX-graph clock measures is made of (waves, occupancy, issue rate,
instructions per FMA, what the warps wait on).

``run`` launches each pick's PTX through CUDA once (a run before and one after held to the float64
reference, ``lib/cuda.checked_launches``), then the vendor's call once (after five calls outside
the profile, where cuDNN's benchmark mode chooses), each alone between the CUDA profiler's start
and stop, and writes after each pick which kernels it launched, in order (``--sequence``). Times
taken under ncu are not timings (its hooks slow every launch, profiled or not): the four clocks are
``launch_cost.py``'s, in a run of their own. ``report`` matches the profile's kernels to the
sequence, from ncu's raw page:

    ncu --profile-from-start off --set full --clock-control none --cache-control none \\
        -o /tmp/picks python benchmarks/vendor_profile.py run --device NVIDIA --latest \\
        --runs data/h200_session21/call4_held5.json.gz --sequence out/sequence.json
    ncu --import /tmp/picks.ncu-rep --csv --page raw > out/raw.csv
    python benchmarks/vendor_profile.py report --raw out/raw.csv --sequence out/sequence.json
"""

from __future__ import annotations

import argparse
import csv
import json
import re
from collections.abc import Iterator
from pathlib import Path

from lib.baselines import vendor_call
from lib.cuda import PtxOffReference, checked_launches, cuda_driver_for
from lib.runs import add_missing_argument, assignments, chosen_picks, read_run

from octune.catalogue.registry import load_kernel
from octune.core.errors import OctuneError
from octune.tuner.device import select_device
from octune.tuner.measure import DeviceRunner

#: The report's columns: heading and the raw metric (the kernel that ran longest on a side).
COLUMNS = {
    "grid": "launch__grid_size",
    "block": "launch__block_size",
    "regs": "launch__registers_per_thread",
    "waves": "launch__waves_per_multiprocessor",
    "occupancy %": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "issue %": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "FMA pipe %": "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "DRAM %": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
}
DURATION = "gpu__time_duration.sum"
INSTRUCTIONS = "smsp__inst_executed.sum"  # warp instructions, every kernel of a side
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio")
PREFIXES = {"": 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "K": 1e3, "M": 1e6, "G": 1e9}


def run(args: argparse.Namespace) -> None:
    device = select_device(args.device)
    driver = cuda_driver_for(device)
    if driver is None:
        raise SystemExit("run needs NVIDIA's OpenCL and a GPU PyTorch can reach")
    picks = chosen_picks(args.runs, missing=assignments(args.missing), latest=args.latest)
    sequence: list[dict[str, object]] = []
    for pick in picks:
        runner = DeviceRunner(device, load_kernel(pick.kernel), pick.workload, seed=7)
        try:
            steps = runner.kernel.space.launches(pick.config, pick.workload.shape_vars(),
                                                 runner.info.limits)  # fmt: skip
            with checked_launches(driver, runner, pick.config) as launches, driver.profiled():
                launches()
        except (OctuneError, PtxOffReference) as error:  # outlawed since, or off the reference
            print(f"{pick.label}: {error}", flush=True)
            continue
        call = vendor_call(pick.workload)
        with driver.current():
            for _ in range(5):
                call()
        with driver.profiled():
            call()
        sequence.append({
            "label": pick.label, "group": pick.group, "kernel": pick.kernel, "config": pick.config,
            "entries": [step.entry for step in steps], "flops": pick.workload.flops,
        })  # fmt: skip
        args.sequence.write_text(json.dumps(sequence, indent=1))
        print(f"{pick.label:>26} {pick.kernel:>18} profiled", flush=True)


def raw_kernels(path: Path) -> list[dict[str, str]]:
    """ncu's raw page (``--csv --page raw``): one row per profiled kernel, in launch order, each
    value with its unit in the row below the header (as ``"<unit>"`` under the key's name).
    """
    lines = [line for line in read_run(path).decode().splitlines() if line.startswith('"')]
    header, units, *rows = csv.reader(lines)
    found = []
    for row in rows:
        kernel = dict(zip(header, row, strict=False))
        kernel |= {f"<unit>{name}": unit for name, unit in zip(header, units, strict=False)}
        found.append(kernel)
    return sorted(found, key=lambda kernel: int(kernel.get("ID", "0")))


def number(kernel: dict[str, str], metric: str) -> float | None:
    text = kernel.get(metric, "").replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def in_base_unit(kernel: dict[str, str], metric: str, base: str) -> float:
    """A metric in ``base`` units (``s``, ``inst``): the raw page scales each column's unit to
    its values (``us`` in one profile, ``ms`` in another).
    """
    unit = kernel.get(f"<unit>{metric}", base)
    prefix = unit.removesuffix(base)
    if not unit.endswith(base) or prefix not in PREFIXES:
        raise SystemExit(f"{metric}: unit {unit!r} is not {base} with an SI prefix")
    return (number(kernel, metric) or 0.0) * PREFIXES[prefix]


def sides(
    kernels: list[dict[str, str]], sequence: list[dict[str, object]]
) -> Iterator[tuple[dict[str, object], list[dict[str, str]], list[dict[str, str]]]]:
    """Each pick with its own kernels and the vendor's: the pick's entries in order, then every
    kernel up to the next pick's first entry.
    """
    position = 0
    for index, pick in enumerate(sequence):
        entries = [str(entry) for entry in pick["entries"]]  # type: ignore[attr-defined]
        ours = kernels[position : position + len(entries)]
        names = [kernel.get("Kernel Name", "") for kernel in ours]
        if names != entries:
            raise SystemExit(f"{pick['label']}: the profile has {names} where the run launched "
                             f"{entries}: is --raw this run's profile?")  # fmt: skip
        position += len(entries)
        after = sequence[index + 1]["entries"][0] if index + 1 < len(sequence) else None  # type: ignore[index]
        start = position
        while position < len(kernels) and kernels[position].get("Kernel Name") != after:
            position += 1
        yield pick, ours, kernels[start:position]


def side_summary(kernels: list[dict[str, str]], flops: int) -> dict[str, str]:
    """One side's figures: time and instructions over its kernels, the rest (and the name) from
    its longest kernel.
    """
    times = [in_base_unit(k, DURATION, "s") * 1e6 for k in kernels]
    longest = kernels[times.index(max(times))]
    summary = {"name": longest.get("Kernel Name", "")[:40], "kernels": str(len(kernels)),
               "us": f"{sum(times):.1f}"}  # fmt: skip
    for heading, metric in COLUMNS.items():
        value = number(longest, metric)
        summary[heading] = "-" if value is None else f"{value:.3g}"
    instructions = sum(in_base_unit(k, INSTRUCTIONS, "inst") for k in kernels)
    # An FMA is two flops on 32 lanes: the share of warp instructions that do the arithmetic.
    summary["FFMA share"] = f"{flops / 64 / instructions:.2f}" if instructions else "-"
    stalls = sorted(((number(longest, name) or 0.0, match.group(1)) for name in longest
                     if (match := STALL.fullmatch(name))), reverse=True)  # fmt: skip
    top = ", ".join(f"{name} {value:.1f}" for value, name in stalls[:2])
    summary["stalls (cycles per issue)"] = top or "-"
    return summary


def report(args: argparse.Namespace) -> None:
    kernels = raw_kernels(args.raw)
    sequence = json.loads(args.sequence.read_text())
    headings = ["us", "kernels", *COLUMNS, "FFMA share", "stalls (cycles per issue)"]
    print("| workload | group | side | kernel | " + " | ".join(headings) + " |")
    print("| --- " * (4 + len(headings)) + "|")
    for pick, ours, theirs in sides(kernels, sequence):
        flops = int(pick["flops"])  # type: ignore[call-overload]
        for side, found in (("octune", ours), ("vendor", theirs)):
            if not found:
                continue
            row = side_summary(found, flops)
            name = pick["kernel"] if side == "octune" else row["name"]
            print(f"| {pick['label']} | {pick['group']} | {side} | {name} | "
                  + " | ".join(row[h] for h in headings) + " |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    profiled = steps.add_parser("run", help="launch each pick and the vendor's call, under ncu")
    profiled.add_argument("--device", default="NVIDIA")
    profiled.add_argument("--runs", type=Path, nargs="+", required=True,
                          help="gemm_classes.py or conv_layers.py --out files")  # fmt: skip
    profiled.add_argument("--latest", action="store_true", help="each workload's last pick only")
    add_missing_argument(profiled, "ASYNC=0", "KDIMC=1")
    profiled.add_argument("--sequence", type=Path, required=True, help="what was launched")
    table = steps.add_parser("report", help="the profile's kernels matched to the picks")
    table.add_argument("--raw", type=Path, required=True, help="ncu --csv --page raw (or .gz)")
    table.add_argument("--sequence", type=Path, required=True, help="run's --sequence")
    args = parser.parse_args()
    if args.step == "run":
        run(args)
    else:
        report(args)


if __name__ == "__main__":
    main()
