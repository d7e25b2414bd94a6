"""One GEMM-family config on one shape, measured and verified, with the PTX NVIDIA's OpenCL
compiler made of it, so that the assembler's report and the SASS can say where its time goes;
or, with ``--cublas``, the vendor library's call on the same shape, for Nsight Compute.

The timing figures leave a gap unexplained (issue 19: mid-size shapes at 0.62-0.79 x cuBLAS
with the search converged); this script is the way into the kernels. Nsight Compute does not
see kernels that NVIDIA's OpenCL launches ("No kernels were profiled"), so octune's side is read
from its SASS (benchmarks/profile_h100.sh) and cuBLAS's from the profiler:

    python benchmarks/kernel_profile.py --shape 1000x999x997 --kernel gemm \\
        --config MWG=64,NWG=128,... --ptx out/gemm.ptx
    ptxas -arch=sm_90 -v out/gemm.ptx -o out/gemm.cubin && cuobjdump -sass out/gemm.cubin
    ncu --set full -k regex:xmma --launch-skip 3 -c 1 --csv --page details \\
        python benchmarks/kernel_profile.py --shape 1000x999x997 --cublas
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pyopencl as cl
from gemm_classes import assignments, cublas_seconds, parse_shape  # beside this script

from octune.tuner.device import select_device
from octune.tuner.kernels import load_kernel
from octune.tuner.measure import DeviceRunner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="NVIDIA")
    parser.add_argument("--shape", required=True, help="MxNxK[:TN], as gemm_classes.py")
    parser.add_argument("--kernel", default="gemm")
    parser.add_argument("--config", type=lambda text: assignments(text.split(",")), default={},
                        help="NAME=VALUE,NAME=VALUE,...")  # fmt: skip
    parser.add_argument("--ptx", type=Path, default=None, help="where to write the program")
    parser.add_argument("--cublas", action="store_true", help="time cuBLAS instead")
    args = parser.parse_args()
    workload = parse_shape(args.shape)
    if args.cublas:
        print(f"cuBLAS {args.shape}: {cublas_seconds(workload) * 1e6:.1f} us", flush=True)
        return
    kernel = load_kernel(args.kernel)
    runner = DeviceRunner(select_device(args.device), kernel, workload, seed=7, repeats=20)
    result = runner.measure(args.config)
    median = f"{result.median_s * 1e6:.1f} us" if result.ok and result.median_s else "-"
    print(f"{args.kernel} {args.shape}: {result.status.value} {median} {result.message}",
          flush=True)  # fmt: skip
    if args.ptx:
        program = runner.build(kernel.build_options(result.config, workload))
        binary = program.get_info(cl.program_info.BINARIES)[0]
        # NVIDIA's driver appends a metadata section (and NULs) that ptxas does not read.
        args.ptx.write_bytes(binary.split(b".metadata_section")[0].rstrip(b"\0"))


if __name__ == "__main__":
    main()
