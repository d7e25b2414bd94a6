#!/usr/bin/env bash
# Set up octune on the lent GPU machine (no network there: its dependencies travel in .whl/, as
# wheels or as benchmarks/gpu_wheels.sh's packed site.tar.xz), then run the command given as
# arguments with the GPU's OpenCL platform visible.
#   benchmarks/device_run.sh python3 benchmarks/gemm_device.py --out "$OUT/gemm.json"
# Where the call is refused as over 64 MiB (the tree and the wheels), benchmarks/device_slim.sh
# takes benchmarks/data's files the call does not read out of the tree for it.
set -euo pipefail
wheels=${WHEELS:-.whl}
mkdir -p /tmp/site
if [[ -f $wheels/site.tar.xz ]]; then
    tar -xJf "$wheels/site.tar.xz" -C /tmp/site
else
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$wheels"/*.whl
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade \
    --target /tmp/site . >/dev/null
# The ICD loader inside the pyopencl wheel reads a vendors folder, not OCL_ICD_FILENAMES.
mkdir -p /tmp/icd
echo libnvidia-opencl.so.1 >/tmp/icd/nvidia.icd
echo libpocl.so.2 >/tmp/icd/pocl.icd
export OCL_ICD_VENDORS=/tmp/icd PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
"$@"
