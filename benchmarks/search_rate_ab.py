"""Candidates a second of a template edit against the template it replaces: random searches of
one kernel with each version, in turns (before, after, before, after, ...), each for the same
time into a fresh database and a fresh program cache. An edit to what a build compiles rather
than to the kernel that runs (another entry left out, a smaller space) shows here, where
``template_ab.py`` sees nothing. Both versions are verified on every measurement, as in tuning.

Turn t searches with seed ``--seed`` + t for both versions, so a pair draws the same configs
while no turn can take another's programs from the driver's own compile cache (NVIDIA keeps
one keyed by source and options, which a repeated seed would hit).

    git show HEAD~1:kernels/gemm.cl > build/ab/gemm.cl && cp kernels/*.clh build/ab/
    python benchmarks/search_rate_ab.py --device NVIDIA --baseline build/ab/gemm.cl \\
        --kernel gemm_splitk --shape 64x1000x4096 --seconds 30
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from lib.gemm_shapes import parse_shape

from octune.catalogue.family import Workload
from octune.catalogue.registry import KernelSpec, expand_includes, kernel_from_texts, load_kernel
from octune.db.store import Store
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.session import Budget, Settings, open_workers, run_session
from octune.tuner.workers import default_jobs


def search(
    info: DeviceInfo, kernel: KernelSpec, workload: Workload, seconds: float, seed: int, jobs: int
) -> dict[str, object]:
    """One random search from nothing: candidates measured, why any failed, the best seconds."""
    with tempfile.TemporaryDirectory() as scratch:
        settings = Settings(jobs=jobs, confirm=0, cache_root=str(Path(scratch) / "programs"))
        store = Store(f"sqlite:///{scratch}/search.db")
        with open_workers(info, settings) as workers:
            report = run_session(
                store, info, kernel, workload, kernel.space.enumerate(info.limits),
                strategy="random", budget=Budget(seconds=seconds), settings=settings,
                seed=seed, workers=workers,
            )  # fmt: skip
        store.close()
    best = report.progress.best
    return {
        "tried": report.progress.tried,
        "failures": dict(report.progress.failures),
        "best_s": best.median_s if best is not None else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None, help="a substring of the OpenCL device's name")
    parser.add_argument("--baseline", type=Path, required=True,
                        help="the template before the edit, beside its #include files")  # fmt: skip
    parser.add_argument("--kernel", required=True, help="the kernel searched, e.g. gemm_splitk")
    parser.add_argument("--shape", required=True, help="MxNxK[:TN|NT|TT], e.g. 64x1000x4096")
    parser.add_argument("--seconds", type=float, default=30.0, help="of search per run")
    parser.add_argument("--turns", type=int, default=2, help="runs of each version")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    device = select_device(args.device)
    info = DeviceInfo.from_cl(device)
    after = load_kernel(args.kernel)
    before_source = expand_includes(args.baseline, args.baseline.parent)
    versions = {
        "before": kernel_from_texts(args.kernel, before_source, after.space.source_text),
        "after": after,
    }
    workload = parse_shape(args.shape)
    print(f"{info.name}: {args.kernel} {args.shape}, {args.seconds:g} s per run", flush=True)
    jobs = default_jobs(device)
    runs = []
    for turn in range(args.turns):
        for label, kernel in versions.items():
            run = search(info, kernel, workload, args.seconds, args.seed + turn, jobs)
            runs.append({"version": label, "turn": turn, **run})
            best = run["best_s"]
            print(f"turn {turn} {label:>6}: {run['tried']:5d} candidates "
                  f"({run['tried'] / args.seconds:5.1f} a second), failures {run['failures']}, "
                  f"best {best * 1e6 if best else float('nan'):.1f} us", flush=True)  # fmt: skip
    for label in versions:
        tried = [r["tried"] for r in runs if r["version"] == label]
        print(f"{label:>6}: {sum(tried) / len(tried):.0f} candidates a run on average")
    if args.out:
        args.out.write_text(json.dumps({"device": info.name, "kernel": args.kernel,
                                        "shape": args.shape, "seconds": args.seconds,
                                        "runs": runs}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
