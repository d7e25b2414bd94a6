#!/usr/bin/env bash
# Session 25, call 3 (nvidia-h200-x2): MobileNet v2 at batches 32 (GPU 0) and 8 (GPU 1) from
# session 23's base (60 s at batch 1), confirmed as `octune run --configs confirmed` confirms,
# against call 1's copies of that base tuned 300 s at 32 and at 8, both measured in each run.
# (.gpu_jobs/xb25 holds the base and the copies as mobilenet_v2.db.gz and mobilenet_v2_bB.db.gz.)
deadline=$((SECONDS + ${DEADLINE:-520}))
rm -rf /tmp/logs /tmp/xb0 /tmp/xb1 "$OUT"/*
mkdir -p /tmp/logs /tmp/xb0 /tmp/xb1
cd benchmarks
run() {  # gpu batch
    local gpu=$1 batch=$2 start=$SECONDS
    CUDA_VISIBLE_DEVICES=$gpu timeout $((deadline - SECONDS - 10)) python3 cross_batch.py \
        --device NVIDIA --nets mobilenet_v2 --base-dir ../.gpu_jobs/xb25 \
        --tuned-dir ../.gpu_jobs/xb25 --batches "$batch" --policies confirmed-starts --dir /tmp/xb$gpu \
        --out "$OUT/cross_batch_mobilenet_v2_b$batch.json" > /tmp/logs/mobilenet_v2_b$batch.log 2>&1
    echo "mobilenet_v2 b$batch: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
}
run 0 32 &
run 1 8 &
wait
cat /tmp/logs/times.txt; grep -h " batch [0-9]*: " /tmp/logs/*.log; tail -n 3 /tmp/logs/*.log
gzip -f "$OUT"/*.json
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
