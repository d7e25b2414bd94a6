#!/usr/bin/env bash
# One device call of the zoo benchmark on the lent GPU: export the named models there (PyTorch's
# TorchScript exporter), tune each for MINUTES on the gzipped database GPU_DB (default: the last
# one recorded in benchmarks/data; 0 minutes: no tuning), time it beside PyTorch's CUDA graph,
# and give the database back under $OUT for the next call to start from. Run through the device
# tool with carry [".whl_gpu"] (benchmarks/gpu_wheels.sh builds it):
#   GPU_DB=.gpu_db/t.db.gz benchmarks/zoo_call.sh 2.5 fcn_resnet50 deeplabv3_mobilenet_v3_large
set -uo pipefail
minutes=$1
shift
nvidia-smi -L | tee "$OUT/gpu.txt"
db=${GPU_DB:-benchmarks/data/gpu_tuned7/tuned.db.gz}
if [[ -f $db ]]; then gunzip -c "$db" >/tmp/t.db; fi
policies="default confirmed"
[[ $minutes == 0 ]] && policies=confirmed
WHEELS=.whl_gpu timeout 540 benchmarks/device_run.sh bash -c '
    minutes=$1 policies=$2
    shift 2
    python3 benchmarks/zoo_export.py --out /tmp/zoo --threads 8 --only "$@" >"$OUT/export.log" 2>&1
    for model in "$@"; do
        python3 benchmarks/zoo.py --zoo /tmp/zoo --device NVIDIA --torch --models "$model" \
            --db sqlite:////tmp/t.db --tune-minutes "$minutes" --policies $policies --repeat 20 \
            --out "$OUT/tuned_$model.json" >"$OUT/tuned_$model.log" 2>&1
    done' _ "$minutes" "$policies" "$@"
echo "rc=$?"
gzip -c /tmp/t.db >"$OUT/t.db.gz"
