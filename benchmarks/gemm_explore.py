"""Measure hand-picked and random GEMM configs on a GPU, to learn which knobs matter.

Run on the lent H100 through benchmarks/device_run.sh. Writes one JSON line per measurement,
with the registers the compiler gave the kernel where the driver reports them (NVIDIA:
-cl-nv-verbose), so the landscape can be studied off the device:

    python benchmarks/gemm_explore.py --out explore.jsonl --random 300 --sizes 4096 1024

Each random config is measured at every size (later sizes reuse the compiled programs). The
run stops starting new measurements after `--deadline` seconds, so that it ends inside the
device's command limit. `--old GEMM_CL GEMM_YAML` also measures the hand-picked configs with
another version of the template on the same data.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyopencl as cl

from octune.catalogue.registry import KernelSpec, load_kernel
from octune.catalogue.space import SearchSpace
from octune.kernels.gemm import gemm_workload
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.measure import DeviceRunner

STARTED = time.perf_counter()
# The best hand-picked config of the first exploration on the H100 (2026-11-22): 256 x 128
# tiles, 16 x 8 per work-item, K tile of 8 prefetched into registers.
BEST = dict(MWG=256, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWM=4, VWN=4, VWA=4, VWB=4,
            SA=1, SB=1, KUNROLL=8, STRM=1, STRN=1, PF=1)  # fmt: skip
HAND = [
    {},
    {"KUNROLL": 1},
    {"KUNROLL": 2},
    {"KUNROLL": 4},
    {"KWG": 16, "KUNROLL": 16},
    {"KWG": 16, "KUNROLL": 4},
    {"PF": 0},
    {"VWM": 8},
    {"STRM": 0, "VWM": 8},
    {"MWG": 128, "NWG": 256, "MDIMC": 16, "NDIMC": 16},
    {"MWG": 128, "NWG": 256, "STRN": 0, "VWN": 8},
    {"MWG": 128, "MDIMC": 8},
    {"MWG": 128, "NWG": 128, "MDIMC": 16, "NDIMC": 8},
    {"MWG": 128, "NWG": 128},
    {"MWG": 128, "NWG": 128, "KWG": 16, "KUNROLL": 16},
    {"NWG": 64, "NDIMC": 8},
    {"MWG": 128, "NWG": 64, "MDIMC": 8, "NDIMC": 8},
    {"MWG": 64, "NWG": 128, "MDIMC": 8, "NDIMC": 16, "VWM": 8, "STRM": 0, "KWG": 16},
    {"MWG": 64, "NWG": 64, "MDIMC": 8, "NDIMC": 8, "STRM": 0, "STRN": 0, "VWM": 8, "VWN": 8},
]
REGISTERS = re.compile(r"Used (\d+) registers")
SPILLS = re.compile(r"(\d+) bytes spill stores")


class VerboseRunner(DeviceRunner):
    """A DeviceRunner that asks the driver for its register report and keeps it per program."""

    verbose: ClassVar[list[str]] = []
    logs: ClassVar[dict[tuple[str, ...], str]] = {}  # build logs by options, across runners

    def build(self, options: list[str]) -> cl.Program:
        program = super().build([*options, *self.verbose])
        key = tuple(options)
        if key not in self.logs:
            try:
                self.logs[key] = program.get_build_info(self.device, cl.program_build_info.LOG)
            except cl.Error:
                self.logs[key] = ""
        return program

    def registers(self, config: dict[str, int]) -> tuple[int | None, int | None]:
        log = self.logs.get(tuple(self.kernel.build_options(config, self.workload)), "")
        regs, spills = REGISTERS.findall(log), SPILLS.findall(log)
        return (max(map(int, regs)) if regs else None, max(map(int, spills)) if spills else None)


def elapsed() -> float:
    return time.perf_counter() - STARTED


def cublas_tflops(size: int, repeats: int = 30) -> float:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = torch.randn(size, size, device="cuda"), torch.randn(size, size, device="cuda")
    torch.matmul(a, b)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(a, b)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return 2 * size**3 / float(np.median(times)) / 1e12


def legal(kernel: KernelSpec, config: dict[str, int], info: DeviceInfo) -> bool:
    try:
        kernel.space.check(config, info.limits)
    except Exception:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="NVIDIA")
    parser.add_argument("--out", type=Path, default=Path("explore.jsonl"))
    parser.add_argument("--old", nargs=2, type=Path, metavar=("GEMM_CL", "GEMM_YAML"))
    parser.add_argument("--random", type=int, default=40, help="random configs per size")
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 1024])
    parser.add_argument("--deadline", type=float, default=540.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    device = select_device(args.device)
    info = DeviceInfo.from_cl(device)
    if "NVIDIA" in device.platform.name:
        VerboseRunner.verbose = ["-cl-nv-verbose"]
    kernel = load_kernel("gemm")
    table = kernel.space.enumerate(info.limits)
    print(f"{info.name}: {len(table):,} legal configs", flush=True)
    old = None
    if args.old:
        old_space = SearchSpace.from_yaml(args.old[1].read_text(), "old.yaml", ("M", "N", "K"))
        old = KernelSpec("gemm", args.old[0].read_text(), old_space)
    out = args.out.open("w")
    for size in args.sizes:
        try:
            print(f"cuBLAS {size}^3: {cublas_tflops(size):.2f} TFLOP/s", flush=True)
        except Exception as error:  # no torch or no CUDA: measure octune alone
            print(f"cuBLAS {size}^3: not measured ({error})", flush=True)

    hand = [{**BEST, **change} for change in HAND]
    hand = [config for config in hand if legal(kernel, config, info)]
    rows = np.random.default_rng(args.seed).choice(len(table), size=args.random, replace=False)
    randoms = [table.config(int(row)) for row in rows]
    for size in args.sizes:
        started = time.perf_counter()
        runner = VerboseRunner(device, kernel, gemm_workload(size, size, size), seed=args.seed)
        print(f"{size}: bound in {time.perf_counter() - started:.1f} s", flush=True)
        batches = [("hand", kernel, hand), ("random", kernel, randoms)]
        if old is not None:
            batches.insert(1, ("old", old, [c for c in hand if c["PF"] == 0]))
        for kind, spec, configs in batches:
            runner.kernel = spec  # programs are cached by options; old ones have no PF
            for config in configs:
                if elapsed() > args.deadline:
                    break
                if spec is old:
                    config = {k: v for k, v in config.items() if k != "PF"}
                started = time.perf_counter()
                result = runner.measure(config)
                seconds = time.perf_counter() - started
                tflops = (result.gflops or 0.0) / 1e3
                regs, spills = runner.registers(config)
                row = {"kind": kind, "size": size, "status": result.status.value,
                       "tflops": tflops, "seconds": seconds, "registers": regs,
                       "spill_bytes": spills, "config": config,
                       "message": result.message[:200]}  # fmt: skip
                out.write(json.dumps(row) + "\n")
                out.flush()
                if kind != "random" or tflops > 30:
                    short = {k: v for k, v in config.items() if BEST.get(k) != v}
                    print(f"  {kind:6s} {size} {result.status.value:12s} {tflops:6.2f} TF/s "
                          f"{regs} regs {seconds:5.2f} s {short}", flush=True)  # fmt: skip
        done = [json.loads(line) for line in args.out.read_text().splitlines()]
        done = sorted(r["tflops"] for r in done if r["size"] == size and r["kind"] == "random")
        if done:
            quartiles = np.percentile(done, [25, 50, 75]).round(1)
            print(f"  {size}: {len(done)} random, best {done[-1]:.2f}, quartiles {quartiles}")
    print(f"done in {elapsed():.0f} s", flush=True)


if __name__ == "__main__":
    main()
