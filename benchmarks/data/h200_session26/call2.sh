#!/usr/bin/env bash
# Session 26, call 2 (nvidia-h200, the same card if still held): issue 63 item 3, ResNet-50 at
# batch 32, 300 s, the measured arm into a fresh database; then call 1's estimated arm
# (.gpu_jobs/s26/estimated.db.gz) and it re-run in one process, in turn, until the deadline.
deadline=$((SECONDS + ${DEADLINE:-520}))
rm -rf /tmp/logs /tmp/bw "$OUT"/*
mkdir -p /tmp/logs /tmp/bw
nvidia-smi -L > /tmp/logs/gpus.txt 2>&1
gunzip -c .gpu_jobs/s26/estimated.db.gz > /tmp/bw/estimated.db
cd benchmarks
start=$SECONDS
timeout $((deadline - SECONDS - 120)) python3 budget_weights.py tune --device NVIDIA --net resnet50 \
    --batch 32 --seconds 300 --weights measured --db /tmp/bw/measured.db > /tmp/logs/measured.log 2>&1
echo "measured: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
start=$SECONDS
timeout $((deadline - SECONDS - 10)) python3 budget_weights.py compare --device NVIDIA --net resnet50 \
    --batch 32 --dbs /tmp/bw/estimated.db /tmp/bw/measured.db --repeat 3 --out "$OUT/weights.json" \
    > /tmp/logs/compare.log 2>&1
echo "compare: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
cat /tmp/logs/times.txt /tmp/logs/compare.log; tail -2 /tmp/logs/measured.log
cp /tmp/bw/measured.db "$OUT/"
gzip -f "$OUT"/*.db
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
