"""Issue 6's limits on this machine: a JSON bundle of 1,000 tuned workloads stays under 1 MB,
its C header compiles in under 5 s, an offline lookup answers in under 50 us.

    .venv/bin/python benchmarks/bundle_limits.py [--workloads 1000] [--queries 20000]

Writes 1,000 tuned workloads (two measured configs each, legal configs of the real gemm space)
through the Store API into a temporary SQLite database, exports it as json, sqlite and
c-header with the same code as `octune export`, then times loading and lookups (Python, and
the header's C function for comparison). Prints one table; no thresholds are asserted here.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from octune.catalogue.registry import load_kernel
from octune.core.results import Measurement, Status
from octune.db.store import Store
from octune.firmware.bundle_load import load_bundle
from octune.firmware.export import export_bundle
from octune.kernels.gemm import gemm_query, gemm_workload
from octune.lookup.data import Query
from octune.lookup.tables import default_config
from octune.tuner.device import DeviceInfo

DEVICE = DeviceInfo(
    platform_name="Benchmark Platform",
    platform_version="OpenCL 3.0",
    vendor="Example",
    name="benchmark-gpu",
    driver_version="1.0",
    compute_units=108,
    max_work_group_size=1024,
    max_work_item_sizes=(1024, 1024, 64),
    local_mem_size=49152,
    global_mem_size=80 << 30,
    device_type="gpu",
)
SIZES = [2**e for e in range(4, 14)] + [48, 96, 192, 384, 768, 1536, 3072, 100, 1000, 3000]

C_TIMER = r"""
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <time.h>
#include "octune_lookup.h"
int main(void) {
    static long q[4096][5];
    int count = 0, i, r, sink = 0;
    struct octune_gemm_config cfg;
    struct timespec t0, t1;
    while (count < 4096 && scanf("%ld %ld %ld %ld %ld", &q[count][0], &q[count][1], &q[count][2],
                                 &q[count][3], &q[count][4]) == 5) count++;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (r = 0; r < 20; r++)
        for (i = 0; i < count; i++)
            sink += octune_gemm_lookup(q[i][0], q[i][1], q[i][2], (int)q[i][3], (int)q[i][4], &cfg);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%.3f %d\n",
           ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / (20.0 * count),
           sink);
    return 0;
}
"""


def make_database(url: str, workloads: int, seed: int) -> None:
    rng = random.Random(seed)
    kernel = load_kernel("gemm")
    space = kernel.space
    table = space.enumerate(DEVICE.limits)
    pool = [table.config(rng.randrange(len(table))) for _ in range(200)]
    pool.append(dict(zip(space.parameter_names, default_config(space, DEVICE.limits), strict=True)))
    shapes: set[tuple[int, int, int, bool, bool]] = set()
    while len(shapes) < workloads:
        shapes.add(
            (rng.choice(SIZES), rng.choice(SIZES), rng.choice(SIZES), rng.random() < 0.3,
             rng.random() < 0.3)
        )  # fmt: skip
    with Store(url) as store:
        device = store.device_id(DEVICE)
        version = store.kernel_version_id(
            kernel.name, kernel.sha256, kernel.source, kernel.space.source_text
        )
        for shape in sorted(shapes):
            workload = gemm_workload(*shape)
            workload_id = store.workload_id("gemm", workload.key, workload.shape, workload.dtype)
            session = store.start_session(device, version, workload_id, "random", seed, {})
            for config in rng.sample(pool, 2):
                seconds = workload.flops / (rng.uniform(50, 20000) * 1e9)
                times = tuple(seconds * rng.uniform(0.98, 1.02) for _ in range(5))
                store.add_measurement(
                    session, Measurement(config, Status.OK, times, workload.flops, 0.1)
                )
            store.finish_session(session, "completed")


def queries(shapes: list[tuple[int, ...]], count: int, seed: int) -> dict[str, list[Query]]:
    rng = random.Random(seed)
    exact = [
        gemm_query(m, n, k, bool(a), bool(b)) for m, n, k, a, b in rng.choices(shapes, k=count)
    ]
    nearest = []
    for m, n, k, a, b in rng.choices(shapes, k=count):
        m, n, k = (max(1, v + rng.randint(1, 40)) for v in (m, n, k))
        nearest.append(gemm_query(m, n, k, bool(a), bool(b)))
    anywhere = [
        gemm_query(rng.randint(1, 1 << 16), rng.randint(1, 1 << 16), rng.randint(1, 1 << 16),
                   rng.random() < 0.5, rng.random() < 0.5)
        for _ in range(count)
    ]  # fmt: skip
    return {"exact hit": exact, "near a tuned shape": nearest, "random shape": anywhere}


def time_lookups(bundle, batch: list[Query]) -> tuple[float, float, float, float]:
    """Median and p99 wall microseconds per lookup (each call timed, after a warm-up), and the
    process CPU microseconds per lookup over the batch: on a shared machine the wall clock
    also counts time other processes held the cores.
    """
    for query in batch[:200]:
        bundle.lookup(query)
    samples = []
    clock = time.perf_counter_ns
    cpu = time.process_time()
    for query in batch:
        start = clock()
        bundle.lookup(query)
        samples.append((clock() - start) / 1e3)
    cpu_us = (time.process_time() - cpu) / len(batch) * 1e6
    samples.sort()
    median, p99 = samples[len(samples) // 2], samples[int(len(samples) * 0.99)]
    return statistics.fmean(samples), median, p99, cpu_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=6)
    args = parser.parse_args()
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="octune-bundle-bench-") as scratch:
        root = Path(scratch)
        url = f"sqlite:///{root / 'tuned.db'}"
        started = time.perf_counter()
        make_database(url, args.workloads, args.seed)
        print(f"database of {args.workloads} workloads written in "
              f"{time.perf_counter() - started:.1f} s", file=sys.stderr)  # fmt: skip
        with Store(url) as store:
            for fmt in ("json", "sqlite", "c-header"):
                started = time.perf_counter()
                manifest, _ = export_bundle(store, DEVICE.fingerprint, None, fmt, root / fmt)
                elapsed = time.perf_counter() - started
                main_file = {"json": "lookup.json", "sqlite": "lookup.sqlite"}.get(
                    fmt, "octune_lookup.h"
                )
                size = manifest["files"][main_file]["bytes"]
                total = sum(f["bytes"] for f in manifest["files"].values())
                note = f"whole bundle {total / 1e6:.3f} MB; export {elapsed:.2f} s"
                rows.append((f"{fmt} bundle: {main_file}", f"{size / 1e6:.3f} MB", note))

        header_dir = root / "c-header"
        (header_dir / "main.c").write_text(C_TIMER)
        compile_times = []
        for _ in range(3):
            started = time.perf_counter()
            subprocess.run(
                ["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-I", str(header_dir),
                 "-o", str(header_dir / "timer"), str(header_dir / "main.c")],
                check=True,
            )  # fmt: skip
            compile_times.append(time.perf_counter() - started)
        rows.append(("header compile (gcc -O2, with a main)",
                     f"{statistics.median(compile_times):.2f} s",
                     f"median of 3: {', '.join(f'{t:.2f}' for t in compile_times)}"))  # fmt: skip

        for fmt in ("json", "sqlite"):
            loads = []
            for _ in range(5):
                started = time.perf_counter()
                bundle = load_bundle(root / fmt)
                loads.append(time.perf_counter() - started)
            rows.append((f"load + verify {fmt} bundle", f"{statistics.median(loads) * 1e3:.1f} ms",
                         "median of 5"))  # fmt: skip
        bundle = load_bundle(root / "json")
        shapes = [e.shape for e in bundle.tables["gemm"].tuned]
        batches = queries(shapes, args.queries, args.seed)
        for name, batch in batches.items():
            matches = {bundle.lookup(q).match for q in batch[:500]}
            mean, median, p99, cpu_us = time_lookups(bundle, batch)
            note = f"mean {mean:.1f}, p99 {p99:.1f}, CPU {cpu_us:.1f} us/lookup; " + "/".join(
                sorted(matches)
            )
            rows.append((f"Python lookup, {name}", f"{median:.1f} us median", note))
            stdin = "".join(" ".join(map(str, q.shape.values())) + "\n" for q in batch[:4096])
            timed = subprocess.run([str(header_dir / "timer")], input=stdin, text=True,
                                   capture_output=True, check=True)  # fmt: skip
            rows.append((f"C lookup, {name}", f"{float(timed.stdout.split()[0]):.2f} us mean",
                         "4096 queries x 20"))  # fmt: skip

    load = os.getloadavg()
    print(
        f"\n{args.workloads} tuned workloads; load average {load[0]:.1f} on {os.cpu_count()} cores"
    )
    width = max(len(r[0]) for r in rows)
    for what, value, note in rows:
        print(f"{what:<{width}}  {value:>16}  {note}")


if __name__ == "__main__":
    main()
