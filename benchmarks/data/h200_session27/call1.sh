#!/usr/bin/env bash
# Session 27, call 1 (nvidia-h200): the held-out picks' limits. Each pick re-timed by the four
# clocks beside cuBLAS and cuDNN (launch_cost.py: GEMM sets 4 and 5 after 45 s, session 21; conv
# held_out_2 at batch 1 after 25 s, session 22), then Nsight Compute on the GEMM picks, each
# beside cuBLAS's kernels (vendor_profile.py).
deadline=$((SECONDS + ${DEADLINE:-520}))
rm -rf /tmp/logs "$OUT"/*
mkdir -p /tmp/logs
export PATH=$PATH:/usr/local/cuda/bin
nvidia-smi -L > /tmp/logs/gpus.txt 2>&1
which ncu >> /tmp/logs/gpus.txt 2>&1; ncu --version >> /tmp/logs/gpus.txt 2>&1
cd benchmarks
J=../.gpu_jobs/s27
gemm="$J/call2_held4.json.gz $J/call4_held4.json.gz $J/call2_held5.json.gz $J/call4_held5.json.gz"
conv="$J/call1_conv_held2_b1.json.gz"
step() {  # name seconds command...
    local name=$1 limit=$2 start=$SECONDS; shift 2
    timeout "$limit" "$@" > /tmp/logs/$name.log 2>&1
    echo "$name: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
}
step clocks_gemm 150 python3 launch_cost.py --device NVIDIA --latest --runs $gemm --out "$OUT/clocks_gemm.json"
step clocks_conv 110 python3 launch_cost.py --device NVIDIA --runs $conv --out "$OUT/clocks_conv.json"
sections="--section SpeedOfLight --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis"
step ncu_gemm $((deadline - SECONDS - 40)) ncu --profile-from-start off $sections --clock-control none \
    --cache-control none -f -o /tmp/gemm python3 vendor_profile.py run --device NVIDIA --latest \
    --runs $gemm --sequence "$OUT/sequence_gemm.json"
if [[ -f /tmp/gemm.ncu-rep ]]; then
    ncu --import /tmp/gemm.ncu-rep --csv --page raw > "$OUT/raw_gemm.csv" 2>> /tmp/logs/import.log
    ncu --import /tmp/gemm.ncu-rep --csv --page details > "$OUT/details_gemm.csv" 2>> /tmp/logs/import.log
    python3 vendor_profile.py report --raw "$OUT/raw_gemm.csv" --sequence "$OUT/sequence_gemm.json" \
        > "$OUT/report_gemm.md" 2>&1
    gzip -k "$OUT/raw_gemm.csv" "$OUT/details_gemm.csv"
fi
cat /tmp/logs/times.txt; tail -25 /tmp/logs/clocks_gemm.log /tmp/logs/clocks_conv.log; cat "$OUT/report_gemm.md"
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
