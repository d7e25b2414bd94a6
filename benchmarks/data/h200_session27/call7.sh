#!/usr/bin/env bash
# Session 27, call 7 (nvidia-h200): the review's check of lib/cuda.checked_launches: the same
# picks timed by launch_cost.py (graph_seconds on top of it), then profiled by vendor_profile.py
# (its launches, no graph) and by kernel_profile.py --cuda 1.
rm -rf /tmp/logs /tmp/out "$OUT"/*
mkdir -p /tmp/logs /tmp/out
export PATH=$PATH:/usr/local/cuda/bin
cd benchmarks
runs=../.gpu_jobs/s27/call4_held5.json.gz
python3 launch_cost.py --device NVIDIA --latest --runs $runs --out /tmp/out/clocks.json > /tmp/out/clocks.log 2>&1
echo "clocks rc $?" >> /tmp/out/times.txt
ncu --profile-from-start off --section SpeedOfLight --section LaunchStats --section InstructionStats \
    --section WarpStateStats --section ComputeWorkloadAnalysis --section Occupancy -f -o /tmp/p \
    python3 vendor_profile.py run --device NVIDIA --latest --runs $runs --sequence /tmp/out/sequence.json > /tmp/out/ncu.log 2>&1
echo "ncu rc $?" >> /tmp/out/times.txt
ncu --import /tmp/p.ncu-rep --csv --page raw > /tmp/out/raw.csv 2>> /tmp/out/ncu.log
python3 vendor_profile.py report --raw /tmp/out/raw.csv --sequence /tmp/out/sequence.json > /tmp/out/report.md 2>&1
echo "report rc $?" >> /tmp/out/times.txt
ncu --profile-from-start off --section SpeedOfLight -c 1 python3 kernel_profile.py --shape 1231x613x419 \
    --kernel gemm --config MWG=32,NWG=64,KWG=32,MDIMC=4,NDIMC=32,VWM=4,VWN=2,VWA=4,VWB=4,SA=1,SB=1,KUNROLL=32,STRM=0,STRN=0,PF=2,ASYNC=2,KDIMC=1 \
    --cuda 1 > /tmp/out/kernel_profile.log 2>&1
echo "kernel_profile rc $?" >> /tmp/out/times.txt
cat /tmp/out/times.txt; tail -8 /tmp/out/clocks.log; cut -c1-140 /tmp/out/report.md; grep -E "through CUDA|Duration|gemm" /tmp/out/kernel_profile.log | head -6
tar -czf "$OUT/call7.tar.gz" -C /tmp out
