#!/usr/bin/env bash
# Session 27, call 6 (nvidia-h200): the conv picks of held_out_2 at batch 16 (after 25 s, with
# the GPU starts; session 23, call 3) by the four clocks beside cuDNN, then profiled beside
# cuDNN's kernels, as calls 1 and 3 did at batch 1.
deadline=$((SECONDS + ${DEADLINE:-520}))
rm -rf /tmp/logs /tmp/out "$OUT"/*
mkdir -p /tmp/logs /tmp/out
export PATH=$PATH:/usr/local/cuda/bin
nvidia-smi -L > /tmp/logs/gpus.txt 2>&1
cd benchmarks
J=../.gpu_jobs/s27
runs=$J/call3_conv_held2_b16.json.gz
step() {  # name seconds command...
    local name=$1 limit=$2 start=$SECONDS; shift 2
    timeout "$limit" "$@" > /tmp/logs/$name.log 2>&1
    echo "$name: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
}
step clocks_conv16 150 python3 launch_cost.py --device NVIDIA --runs $runs --out /tmp/out/clocks_conv16.json
sections="--section SpeedOfLight --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis"
step ncu_conv16 $((deadline - SECONDS - 40)) ncu --profile-from-start off $sections --clock-control none \
    --cache-control none -f -o /tmp/conv16 python3 vendor_profile.py run --device NVIDIA \
    --runs $runs --sequence /tmp/out/sequence_conv16.json
if [[ -f /tmp/conv16.ncu-rep ]]; then
    ncu --import /tmp/conv16.ncu-rep --csv --page raw > /tmp/out/raw_conv16.csv 2>> /tmp/logs/import.log
    ncu --import /tmp/conv16.ncu-rep --csv --page details > /tmp/out/details_conv16.csv 2>> /tmp/logs/import.log
    python3 vendor_profile.py report --raw /tmp/out/raw_conv16.csv \
        --sequence /tmp/out/sequence_conv16.json > /tmp/out/report_conv16.md 2>&1
fi
cat /tmp/logs/times.txt; tail -22 /tmp/logs/clocks_conv16.log; cat /tmp/out/report_conv16.md
cp /tmp/logs/* /tmp/out/ 2>/dev/null
tar -czf "$OUT/call6.tar.gz" -C /tmp out
ls -la "$OUT"
