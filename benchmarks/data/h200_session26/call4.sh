#!/usr/bin/env bash
# Session 26, call 4 (nvidia-h200, the session's last 330 s): how much two tunings of one arm
# differ. ResNet-50 at batch 32, the estimated arm tuned 150 s again; then it and call 3's
# (.gpu_jobs/s26/call3_estimated_150s.db.gz) re-run in one process until the deadline.
deadline=$((SECONDS + ${DEADLINE:-240}))
rm -rf /tmp/logs /tmp/bw "$OUT"/*
mkdir -p /tmp/logs /tmp/bw
gunzip -c .gpu_jobs/s26/call3_estimated_150s.db.gz > /tmp/bw/estimated_150s.db
cd benchmarks
start=$SECONDS
timeout 170 python3 budget_weights.py tune --device NVIDIA --net resnet50 --batch 32 --seconds 150 \
    --weights estimated --db /tmp/bw/estimated_150s_again.db > /tmp/logs/estimated.log 2>&1
echo "estimated 150 s again: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
start=$SECONDS
timeout $((deadline - SECONDS - 5)) python3 budget_weights.py compare --device NVIDIA --net resnet50 \
    --batch 32 --dbs /tmp/bw/estimated_150s_again.db /tmp/bw/estimated_150s.db --repeat 2 \
    --out "$OUT/weights.json" > /tmp/logs/compare.log 2>&1
echo "compare: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
cat /tmp/logs/times.txt /tmp/logs/compare.log
cp /tmp/bw/estimated_150s_again.db "$OUT/"
gzip -f "$OUT"/*.db
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
