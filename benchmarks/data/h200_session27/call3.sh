#!/usr/bin/env bash
# Session 27, call 3 (nvidia-h200): Nsight Compute on the conv picks at batch 1 (held_out_2,
# session 22), each beside cuDNN's kernels (call 2's run of it stopped: the GEMM parameters
# that --missing fills were given to the conv kernels too).
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
profile conv $((deadline - SECONDS - 40)) $J/call1_conv_held2_b1.json.gz
cat /tmp/logs/times.txt; tail -5 /tmp/logs/ncu_conv.log; cat /tmp/out/report_conv.md
cp /tmp/logs/* /tmp/out/ 2>/dev/null
tar -czf "$OUT/call3.tar.gz" -C /tmp out
ls -la "$OUT"
