#!/usr/bin/env bash
# Set up octune on the lent GPU machine (no network there: wheels travel in .whl/), then run
# the command given as arguments with the GPU's OpenCL platform visible.
#   benchmarks/device_run.sh python3 benchmarks/gemm_device.py --out "$OUT/gemm.json"
set -euo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "${WHEELS:-.whl}"/*.whl
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade \
    --target /tmp/site . >/dev/null
# The ICD loader inside the pyopencl wheel reads a vendors folder, not OCL_ICD_FILENAMES.
mkdir -p /tmp/icd
echo libnvidia-opencl.so.1 >/tmp/icd/nvidia.icd
echo libpocl.so.2 >/tmp/icd/pocl.icd
export OCL_ICD_VENDORS=/tmp/icd PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
"$@"
