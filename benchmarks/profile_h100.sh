#!/usr/bin/env bash
# SASS of GEMM configs on the H100, from the PTX NVIDIA's OpenCL made (for Nsight Compute's view
# of the same code, see kernel_profile.py --cuda). Runs inside
# benchmarks/device_run.sh: benchmarks/profile_h100.sh NAME SHAPE KERNEL CONFIG [NAME ...]
set -euo pipefail
export PATH=$PATH:/usr/local/cuda/bin
while (($#)); do
    name=$1 shape=$2 kernel=$3 config=$4; shift 4
    python3 benchmarks/kernel_profile.py --shape "$shape" --kernel "$kernel" --config "$config" \
        --ptx "$OUT/$name.ptx"
    ptxas -arch=sm_90 -v "$OUT/$name.ptx" -o "/tmp/$name.cubin" 2>&1 | tail -2
    cuobjdump -sass "/tmp/$name.cubin" >"$OUT/$name.sass"
done
