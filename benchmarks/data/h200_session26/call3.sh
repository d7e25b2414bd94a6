#!/usr/bin/env bash
# Session 26, call 3 (nvidia-h200): issue 63 item 3 again at half the budget, ResNet-50 at batch
# 32, 150 s an arm, the measured arm first this time; then the four databases (these two and
# calls 1-2's 300 s arms, .gpu_jobs/s26/) re-run in one process, in turn, until the deadline.
deadline=$((SECONDS + ${DEADLINE:-520}))
rm -rf /tmp/logs /tmp/bw "$OUT"/*
mkdir -p /tmp/logs /tmp/bw
nvidia-smi -L > /tmp/logs/gpus.txt 2>&1
gunzip -c .gpu_jobs/s26/estimated.db.gz > /tmp/bw/estimated_300s.db
gunzip -c .gpu_jobs/s26/measured.db.gz > /tmp/bw/measured_300s.db
cd benchmarks
for weights in measured estimated; do
    start=$SECONDS
    timeout 175 python3 budget_weights.py tune --device NVIDIA --net resnet50 --batch 32 \
        --seconds 150 --weights $weights --db /tmp/bw/${weights}_150s.db > /tmp/logs/$weights.log 2>&1
    echo "$weights 150 s: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
done
start=$SECONDS
timeout $((deadline - SECONDS - 10)) python3 budget_weights.py compare --device NVIDIA --net resnet50 \
    --batch 32 --dbs /tmp/bw/estimated_300s.db /tmp/bw/measured_300s.db /tmp/bw/estimated_150s.db \
    /tmp/bw/measured_150s.db --repeat 2 --out "$OUT/weights.json" > /tmp/logs/compare.log 2>&1
echo "compare: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
cat /tmp/logs/times.txt /tmp/logs/compare.log
cp /tmp/bw/*_150s.db "$OUT/"
gzip -f "$OUT"/*.db
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
