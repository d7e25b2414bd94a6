#!/usr/bin/env bash
# Session 27, call 2 (nvidia-h200): Nsight Compute on the conv picks at batch 1 (held_out_2,
# session 22), each beside cuDNN's kernels; then gemm.cl with cuBLAS's own tiling (128x64 or
# 64x128 on 128 work-items, 8x8 outputs each, as the profile of call 1 shows cuBLAS's kernels
# run) on two odd shapes and one transformer shape: by the four clocks, and profiled.
deadline=$((SECONDS + ${DEADLINE:-520}))
rm -rf /tmp/logs /tmp/out "$OUT"/*
mkdir -p /tmp/logs /tmp/out
export PATH=$PATH:/usr/local/cuda/bin
nvidia-smi -L > /tmp/logs/gpus.txt 2>&1
cd benchmarks
J=../.gpu_jobs/s27
step() {  # name seconds command...
    local name=$1 limit=$2 start=$SECONDS; shift 2
    timeout "$limit" "$@" > /tmp/logs/$name.log 2>&1
    echo "$name: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
}
sections="--section SpeedOfLight --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis"
profile() {  # name seconds runs...
    local name=$1 limit=$2; shift 2
    step ncu_$name "$limit" ncu --profile-from-start off $sections --clock-control none \
        --cache-control none -f -o /tmp/$name python3 vendor_profile.py run --device NVIDIA \
        --runs "$@" --sequence /tmp/out/sequence_$name.json
    if [[ -f /tmp/$name.ncu-rep ]]; then
        ncu --import /tmp/$name.ncu-rep --csv --page raw > /tmp/out/raw_$name.csv 2>> /tmp/logs/import.log
        ncu --import /tmp/$name.ncu-rep --csv --page details > /tmp/out/details_$name.csv 2>> /tmp/logs/import.log
        python3 vendor_profile.py report --raw /tmp/out/raw_$name.csv \
            --sequence /tmp/out/sequence_$name.json > /tmp/out/report_$name.md 2>&1
    fi
}
profile conv 150 $J/call1_conv_held2_b1.json.gz
step clocks_tiles 150 python3 launch_cost.py --device NVIDIA --runs $J/cublas_tiles.json --out /tmp/out/clocks_tiles.json
profile tiles $((deadline - SECONDS - 40)) $J/cublas_tiles.json
cat /tmp/logs/times.txt; tail -30 /tmp/logs/clocks_tiles.log; cat /tmp/out/report_conv.md; cat /tmp/out/report_tiles.md
cp /tmp/logs/* /tmp/out/ 2>/dev/null
tar -czf "$OUT/call2.tar.gz" -C /tmp out
ls -la "$OUT"
