"""One GEMM-family config on one shape, measured and verified, with the PTX NVIDIA's OpenCL
compiler made of it, so that the assembler's report and the SASS can say where its time goes;
with ``--cuda N``, that PTX launched N more times through CUDA, where Nsight Compute sees it
(it sees no kernel that NVIDIA's OpenCL launches; ``lib/cuda.py``); or, with ``--cublas``,
the vendor library's call on the same shape:

    python benchmarks/kernel_profile.py --shape 1000x999x997 --kernel gemm \\
        --config MWG=64,NWG=128,... --ptx out/gemm.ptx
    ptxas -arch=sm_90 -v out/gemm.ptx -o out/gemm.cubin && cuobjdump -sass out/gemm.cubin
    ncu --set full --profile-from-start off -c 1 --cache-control none --csv \\
        --page details python benchmarks/kernel_profile.py --shape 1000x999x997 --kernel gemm \\
        --config MWG=64,NWG=128,... --cuda 3
    ncu --set full -k regex:xmma --launch-skip 3 -c 1 --csv --page details \\
        python benchmarks/kernel_profile.py --shape 1000x999x997 --cublas

Many configs beside the vendor's kernels in one profile: ``vendor_profile.py``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lib.baselines import cuda_vendor_seconds
from lib.cuda import cuda_driver_for, graph_seconds, program_ptx
from lib.gemm_shapes import parse_shape
from lib.runs import assignments

from octune.catalogue.registry import load_kernel
from octune.tuner.device import select_device
from octune.tuner.measure import DeviceRunner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="NVIDIA")
    parser.add_argument("--shape", required=True, help="MxNxK[:TN], as gemm_classes.py")
    parser.add_argument("--kernel", default="gemm")
    parser.add_argument("--config", type=lambda text: assignments(text.split(",")), default={},
                        help="NAME=VALUE,NAME=VALUE,...")  # fmt: skip
    parser.add_argument("--ptx", type=Path, default=None, help="where to write the program")
    parser.add_argument(
        "--cuda",
        type=int,
        default=0,
        metavar="N",
        help="then launch the PTX N more times through CUDA (for Nsight Compute)",
    )
    parser.add_argument("--cublas", action="store_true", help="time cuBLAS instead")
    args = parser.parse_args()
    workload = parse_shape(args.shape)
    if args.cublas:
        print(f"cuBLAS {args.shape}: {cuda_vendor_seconds(workload) * 1e6:.1f} us", flush=True)
        return
    kernel = load_kernel(args.kernel)
    runner = DeviceRunner(select_device(args.device), kernel, workload, seed=7, repeats=20)
    result = runner.measure(args.config)
    median = f"{result.median_s * 1e6:.1f} us" if result.ok and result.median_s else "-"
    print(f"{args.kernel} {args.shape}: {result.status.value} {median} {result.message}",
          flush=True)  # fmt: skip
    if args.ptx:
        args.ptx.write_bytes(
            program_ptx(runner.build(kernel.build_options(result.config, workload)))
        )
    if args.cuda and result.ok:
        driver = cuda_driver_for(runner.device)
        if driver is None:
            raise SystemExit("--cuda needs NVIDIA's OpenCL and a GPU PyTorch can reach")
        seconds = graph_seconds(driver, runner, result.config, eager=args.cuda)
        print(f"{args.kernel} {args.shape} through CUDA: {seconds * 1e6:.1f} us", flush=True)


if __name__ == "__main__":
    main()
