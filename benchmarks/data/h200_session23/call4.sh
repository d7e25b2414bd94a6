#!/usr/bin/env bash
# Session 23, call 4 (nvidia-h200-x2): a pool of depthwise conv configs (space_starts.py pool
# --min-flops 1: each stored GPU depthwise workload's two fastest, batch sizes in turn, call 2's
# MobileNet v2 at batch 16 among them; .gpu_jobs/dw_pool.json) measured on MobileNet v1's and the
# second held-out set's depthwise layers (training) and MobileNet v2's (not for picking), GPU 0 at
# batch 16, GPU 1 at batch 1. The pool (call4_dw_pool.json.gz): `space_starts.py pool DBS
# call2_tuned_mobilenet_v2_b16.db --kernels conv2d_depthwise --per-workload 2 --min-flops 1
# --most 40`, DBS as in call1.sh.
deadline=$((SECONDS + ${DEADLINE:-200}))
rm -rf /tmp/logs "$OUT"/*
mkdir -p /tmp/logs
cd benchmarks
pool() {  # gpu batch
    local gpu=$1 batch=$2 start=$SECONDS
    CUDA_VISIBLE_DEVICES=$gpu timeout $((deadline - SECONDS)) python3 starts_pool.py --device NVIDIA \
        --pool ../.gpu_jobs/dw_pool.json --kernels conv2d_depthwise \
        --layers mobilenet_v1@$batch held_out_2@$batch mobilenet_v2@$batch \
        --deadline $((deadline - SECONDS - 10)) \
        --out "$OUT/pool_conv2d_depthwise_b$batch.json.gz" > /tmp/logs/pool_b$batch.log 2>&1
    echo "pool b$batch: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
}
pool 0 16 &
pool 1 1 &
wait
cat /tmp/logs/times.txt; tail -n 2 /tmp/logs/*.log
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
