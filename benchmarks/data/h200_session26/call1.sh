#!/usr/bin/env bash
# Session 26, call 1 (nvidia-h200, one card): issue 63 item 3, ResNet-50 at batch 32, 300 s,
# the budget's second round weighted by the estimate, into a fresh database (call 2 tunes the
# measured arm and re-runs both in one process).
deadline=$((SECONDS + ${DEADLINE:-520}))
rm -rf /tmp/logs /tmp/bw "$OUT"/*
mkdir -p /tmp/logs /tmp/bw
nvidia-smi -L > /tmp/logs/gpus.txt 2>&1
cd benchmarks
start=$SECONDS
timeout $((deadline - SECONDS - 20)) python3 budget_weights.py tune --device NVIDIA --net resnet50 \
    --batch 32 --seconds 300 --weights estimated --db /tmp/bw/estimated.db > /tmp/logs/estimated.log 2>&1
echo "estimated: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
cat /tmp/logs/times.txt; tail -3 /tmp/logs/estimated.log
cp /tmp/bw/*.db "$OUT/"
gzip -f "$OUT"/*.db
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
