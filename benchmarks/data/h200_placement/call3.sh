#!/usr/bin/env bash
# Session 19, call 3 (nvidia-h200-x2): answers across batches. ResNet-50 from the batch-1 base
# (data/h200_cross_batch/resnet50.db.gz). GPU 0: the nearest answer and the confirmation at
# load (now with the base's cost-model pick), batches 32 then 16; GPU 1: a copy of the base
# tuned 5 minutes at batch 32, its answers (the reference).
deadline=$((SECONDS + ${DEADLINE:-540}))
rm -rf /tmp/logs "$OUT"/*
mkdir -p /tmp/logs
cd benchmarks
run() {  # gpu name args...
    local gpu=$1 name=$2 start=$SECONDS; shift 2
    CUDA_VISIBLE_DEVICES=$gpu timeout $((deadline - SECONDS)) python3 cross_batch.py --device NVIDIA \
        --nets resnet50 --base-dir data/h200_cross_batch --dir /tmp/$name --out "$OUT/$name.json" "$@" \
        > /tmp/logs/$name.log 2>&1
    echo "$name: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
    cp /tmp/$name/*.log /tmp/logs/ 2>/dev/null
}
run 0 confirmed --batches 32 16 --policies nearest confirmed-near &
run 1 tuned --batches 32 --policies nearest --tune-seconds 300 &
wait
cat /tmp/logs/times.txt
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
