"""How long enumerating a search space takes on an H100-like device.

Usage: python benchmarks/enumerate_space.py [KERNEL]   (default: gemm; any installed kernel)

Enumeration runs whenever a tuning session starts, so it must stay well under a couple of
seconds even for spaces whose raw product runs to tens of millions. Each repeat loads the
space afresh: a space keeps the tables of its last devices, so a second ``enumerate`` on the
same one would time a dictionary lookup.
"""

from __future__ import annotations

import argparse
import sys
import time

from octune.catalogue.limits import device_limits
from octune.catalogue.registry import load_kernel
from octune.catalogue.space import SearchSpace
from octune.core.errors import OctuneError

H100_LIMITS = device_limits(
    max_work_group_size=1024,
    max_work_item_sizes=(1024, 1024, 64),
    local_mem_size=49152,
    compute_units=132,
    global_mem_size=80 << 30,
    platform_name="NVIDIA CUDA",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel", nargs="?", default="gemm", help="an installed kernel's name")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    try:
        kernel = load_kernel(args.kernel)
        text, origin = kernel.space.source_text, kernel.space.origin  # `extends:` pasted in
        shape_names = kernel.family.shape_names
        times = []
        for _ in range(args.repeat):
            space = SearchSpace.from_yaml(text, origin, shape_names)
            start = time.perf_counter()
            table = space.enumerate(H100_LIMITS)
            times.append(time.perf_counter() - start)
    except OctuneError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"space:         {origin} ({len(space.parameters)} parameters)")
    print(f"raw product:   {space.raw_size:,}")
    print(f"legal configs: {len(table):,}")
    print(f"seconds:       {min(times):.3f} (best of {args.repeat}; first run {times[0]:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
