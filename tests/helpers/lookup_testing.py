"""The lookup tests' example device, a config of its, and random queries of a GEMM table:
shared by the lookup, bundle, header and prediction tests.
"""

from __future__ import annotations

import random

from octune.catalogue.registry import load_kernel
from octune.kernels.gemm import gemm_query
from octune.lookup.data import LookupTable, Query
from octune.lookup.tables import default_config
from octune.tuner.device import DeviceInfo

DEVICE = DeviceInfo(
    platform_name="Portable Computing Language",
    platform_version="OpenCL 3.0 PoCL",
    vendor="Example",
    name="example-cpu",
    driver_version="1.0",
    compute_units=2,
    max_work_group_size=4096,
    max_work_item_sizes=(4096, 4096, 4096),
    local_mem_size=1 << 20,
    global_mem_size=1 << 32,
    device_type="cpu",
)


def config(**changes: int) -> dict[str, int]:
    """The space's default config on DEVICE (legal whatever the space file says), changed."""
    space = load_kernel("gemm").space
    base = dict(zip(space.parameter_names, default_config(space, DEVICE.limits), strict=True))
    return {**base, **changes}


def random_queries(table: LookupTable, count: int, seed: int) -> list[Query]:
    """Tuned shapes, shapes next to them, and anything the tuner accepts."""
    rng = random.Random(seed)
    queries: list[Query] = []
    while len(queries) < count:
        kind = rng.random()
        if kind < 0.25 and table.tuned:
            m, n, k, ta, tb = rng.choice(table.tuned).shape
        elif kind < 0.6 and table.tuned:
            m, n, k, ta, tb = rng.choice(table.tuned).shape
            m, n, k = (max(1, v + rng.randint(-3, 3)) for v in (m, n, k))
            ta, tb = rng.choice([(ta, tb), (1 - ta, tb), (ta, 1 - tb)])
        else:
            m, n, k = (rng.choice([rng.randint(1, 5000), rng.randint(1, 1 << 20)]) for _ in "mnk")
            ta, tb = rng.randint(0, 1), rng.randint(0, 1)
        if max(m * k, k * n, m * n) < 1 << 31:  # the service refuses the others
            queries.append(gemm_query(m, n, k, bool(ta), bool(tb)))
    return queries
