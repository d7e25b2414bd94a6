"""How long enumerating a search space takes on an H100-like device.

Usage: python benchmarks/enumerate_space.py [SPACE.yaml]   (default: the packaged gemm.yaml)

Enumeration runs whenever a tuning session starts, so it must stay well under a couple of
seconds even for spaces whose raw product runs to tens of millions.
"""

from __future__ import annotations

import sys
import time
from importlib import resources
from pathlib import Path

from octune.core.errors import SpaceError
from octune.tuner.space import SearchSpace

H100_LIMITS = {
    "max_work_group_size": 1024,
    "local_mem_size": 49152,
    "max_work_item_size_0": 1024,
    "max_work_item_size_1": 1024,
    "max_work_item_size_2": 64,
    "compute_units": 132,
}
# Shape variables of every problem octune knows; a space may use them in launch sizes only.
SHAPE_NAMES = ("M", "N", "K")


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print(f"usage: {Path(__file__).name} [SPACE.yaml]", file=sys.stderr)
        return 2
    if argv:
        path = Path(argv[0])
        text, origin = path.read_text(encoding="utf-8"), path.name
    else:
        resource = resources.files("octune.search_spaces").joinpath("gemm.yaml")
        text, origin = resource.read_text(encoding="utf-8"), "gemm.yaml"
    try:
        space = SearchSpace.from_yaml(text, origin, SHAPE_NAMES)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            table = space.enumerate(H100_LIMITS)
            times.append(time.perf_counter() - start)
    except SpaceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"space:         {origin} ({len(space.parameters)} parameters)")
    print(f"raw product:   {space.raw_size:,}")
    print(f"legal configs: {len(table):,}")
    print(f"seconds:       {min(times):.3f} (best of 3; first run {times[0]:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
