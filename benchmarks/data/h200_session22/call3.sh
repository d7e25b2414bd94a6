#!/usr/bin/env bash
# Session 22, call 3 (nvidia-h200, one GPU): answers across batches with the batched conv2d_1x1.
# ResNet-50 tuned 60 s at batch 1 (the base); then cross_batch.py tunes a copy of it 300 s at
# batch 16 and, in the same process, times the runtime's confirmation from the base (each
# kernel's answer, its nearest shapes' configs, the cost model's pick) beside the tuned answers.
deadline=$((SECONDS + ${DEADLINE:-520}))
rm -rf /tmp/logs /tmp/base /tmp/xb "$OUT"/*
mkdir -p /tmp/logs /tmp/base
cd benchmarks
start=$SECONDS
timeout $((deadline - SECONDS)) python3 -m octune tune --model resnet50 --batch 1 --time 60s \
    --device NVIDIA --db sqlite:////tmp/base/resnet50.db > /tmp/logs/base.log 2>&1
echo "base: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
timeout $((deadline - SECONDS)) python3 cross_batch.py --device NVIDIA --nets resnet50 \
    --base-dir /tmp/base --batches 16 --tune-seconds 300 --policies confirmed-model \
    --dir /tmp/xb --out "$OUT/cross_batch.json" > /tmp/logs/cross_batch.log 2>&1
echo "cross_batch: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
cat /tmp/logs/times.txt; tail -5 /tmp/logs/cross_batch.log
cp /tmp/base/resnet50.db "$OUT/base_resnet50.db"
cp /tmp/xb/resnet50_b16.db "$OUT/tuned_resnet50_b16.db" 2>/dev/null
cp /tmp/xb/*.log /tmp/logs/ 2>/dev/null
gzip -f "$OUT"/*.json "$OUT"/*.db
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
