#!/usr/bin/env bash
# Session 22, call 1 (nvidia-h200-x2): the second held-out conv set, 25 s a layer, tuned as
# `octune tune` tunes, one run's workers shared over its layers; the batched conv2d_1x1 (any
# batch in NCHW) and Winograd with dilation among the kernels. GPU 0 at batch 16, GPU 1 at 1.
deadline=$((SECONDS + ${DEADLINE:-500}))
rm -rf /tmp/logs "$OUT"/*
mkdir -p /tmp/logs
cd benchmarks
conv() {  # gpu batch
    local gpu=$1 batch=$2 start=$SECONDS
    CUDA_VISIBLE_DEVICES=$gpu timeout $((deadline - SECONDS)) python3 conv_layers.py --device NVIDIA \
        --nets held_out_2 --seconds 25 --batch "$batch" --db "sqlite:////tmp/conv$batch.db" \
        --out "$OUT/conv_held2_b$batch.json" > /tmp/logs/conv$batch.log 2>&1
    echo "conv b$batch: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
}
conv 0 16 &
conv 1 1 &
wait
cat /tmp/logs/times.txt
gzip -f "$OUT"/*.json
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
