"""PoCL CPU: the gemv batch kernels before (launch sized by M * N, passes in a loop) and after.

The template before, from the checkout's root:
    mkdir -p /tmp/old_k && git show 8937911:kernels/gemv.cl > /tmp/old_k/gemv.cl \\
        && cp kernels/*.clh /tmp/old_k/
"""

from pathlib import Path

import pyopencl as cl
import yaml

from octune.catalogue.registry import expand_includes, kernel_from_texts, load_kernel
from octune.kernels.gemm import gemm_workload
from octune.tuner.measure import DeviceRunner

OLD_LAUNCH = ["ceil_div(M * N, RT) * WG0", "WG1"]
AXPY = {"VW": 4, "UNROLL": 4, "MB": 4}
CASES = [
    ("gemv_axpy_batch", gemm_workload(12, 3072, 768), {"WG0": 4, "WG1": 8, "RT": 16, **AXPY}),
    ("gemv_axpy_batch", gemm_workload(12, 3072, 768), {"WG0": 16, "WG1": 1, "RT": 64, **AXPY}),
    ("gemv_dot_batch", gemm_workload(4, 1000, 2048, transb=True),
     {"WG0": 32, "WG1": 8, "RT": 16, "VW": 4, "UNROLL": 4, "MB": 4}),
    ("gemv_dot_batch", gemm_workload(8, 4096, 1024, transb=True),
     {"WG0": 8, "WG1": 2, "RT": 4, "VW": 4, "UNROLL": 2, "MB": 4}),
]  # fmt: skip


def main() -> None:
    device = cl.get_platforms()[0].get_devices()[0]
    old_source = expand_includes(Path("/tmp/old_k/gemv.cl"), Path("/tmp/old_k"))
    for name, workload, config in CASES:
        new = load_kernel(name)
        space = yaml.safe_load(new.space.source_text)
        space["launch"]["global"] = OLD_LAUNCH
        old = kernel_from_texts(name, old_source, yaml.safe_dump(space, sort_keys=False))
        best = {}
        for label, spec in (("before", old), ("after", new)):
            runner = DeviceRunner(device, spec, workload, seed=1, repeats=30, max_seconds=2.0)
            times = []
            for _ in range(2):
                measurement = runner.measure(config)
                assert measurement.ok, measurement.message
                times.append(measurement.median_s)
            best[label] = min(times)
        before, after = best["before"] * 1e6, best["after"] * 1e6
        print(f"{name} {workload.key}: before {before:.0f} us, after {after:.0f} us, "
              f"before/after {before / after:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
