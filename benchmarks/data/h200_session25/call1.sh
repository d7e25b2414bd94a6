#!/usr/bin/env bash
# Session 25, call 1 (nvidia-h200-x2).
# GPU 0: the direct kernel's pool with grouped configs (.gpu_jobs/grouped_pool.json: session 23's
#   conv_pool.json's conv2d_direct configs, then `space_starts.py pool DBS --kernels conv2d_direct
#   --per-workload 2 --min-flops 1e7 --grouped --extend conv_pool.json`, DBS RegNetY-400MF's
#   session-24 base and batch-16 copy) on ResNet-50's conv layers and the grouped sets, batch 16;
#   then MobileNet v2's copy of session 23's base (60 s at batch 1) tuned 300 s at batch 32.
# GPU 1: the same pool at batch 1; then a copy of the same base tuned 300 s at batch 8.
deadline=$((SECONDS + ${DEADLINE:-520}))
rm -rf /tmp/logs /tmp/xb "$OUT"/*
mkdir -p /tmp/logs /tmp/xb
nvidia-smi -L > /tmp/logs/gpus.txt 2>&1
cd benchmarks
job() {  # gpu batch tuned-batch
    local gpu=$1 batch=$2 tuned=$3 start=$SECONDS
    CUDA_VISIBLE_DEVICES=$gpu timeout 200 python3 starts_pool.py --device NVIDIA \
        --pool ../.gpu_jobs/grouped_pool.json --kernels conv2d_direct \
        --layers resnet50@$batch grouped@$batch grouped_held@$batch --deadline 185 \
        --out "$OUT/pool_conv2d_direct_b$batch.json.gz" > /tmp/logs/pool_b$batch.log 2>&1
    echo "pool b$batch: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
    start=$SECONDS
    local db=/tmp/xb/mobilenet_v2_b$tuned.db
    zcat ../.gpu_jobs/xb23/mobilenet_v2.db.gz > "$db"
    CUDA_VISIBLE_DEVICES=$gpu timeout $((deadline - SECONDS - 5)) python3 -m octune tune \
        --model mobilenet_v2 --batch "$tuned" --time 300s --device NVIDIA --db "sqlite:///$db" \
        > /tmp/logs/tune_b$tuned.log 2>&1
    echo "tune b$tuned: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
    gzip -c "$db" > "$OUT/tuned_mobilenet_v2_b$tuned.db.gz"
}
job 0 16 32 &
job 1 1 8 &
wait
cat /tmp/logs/times.txt; tail -n 2 /tmp/logs/*.log
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
