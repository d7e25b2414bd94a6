#!/usr/bin/env bash
# Session 23, call 1 (nvidia-h200-x2): a pool of conv configs (space_starts.py pool: each stored
# GPU conv workload's fastest config per kernel, batch sizes in turn; .gpu_jobs/conv_pool.json)
# measured on ResNet-50's distinct conv layers (training) and the second held-out set (not for
# picking), GPU 0 at batch 16, GPU 1 at batch 1: the matrix conv starts are picked from.
# The pool (kept as call1_conv_pool.json.gz): `space_starts.py pool DBS --kernels conv2d_igemm
# conv2d_1x1 conv2d_winograd conv2d_direct --per-workload 1 --min-flops 1e7 --most 40`, DBS the
# H100/H200 databases of data/gpu_tuned3, gpu_tuned7, h100_conv, h100_networks,
# h200_cross_batch, h200_session22, h200_zoo unpacked; each kernel's first 24 kept (direct 16).
deadline=$((SECONDS + ${DEADLINE:-520}))
rm -rf /tmp/logs "$OUT"/*
mkdir -p /tmp/logs
cd benchmarks
pool() {  # gpu batch
    local gpu=$1 batch=$2
    for kernel in conv2d_igemm:150 conv2d_1x1:110 conv2d_winograd:110 conv2d_direct:100; do
        local name=${kernel%:*} share=${kernel#*:} start=$SECONDS
        local left=$((deadline - SECONDS - 15))
        (( share > left )) && share=$left
        (( share < 20 )) && break
        CUDA_VISIBLE_DEVICES=$gpu timeout $((share + 10)) python3 starts_pool.py --device NVIDIA \
            --pool ../.gpu_jobs/conv_pool.json --kernels "$name" \
            --layers resnet50@$batch held_out_2@$batch --deadline "$share" \
            --out "$OUT/pool_${name}_b$batch.json.gz" > /tmp/logs/pool_${name}_b$batch.log 2>&1
        echo "pool $name b$batch: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
    done
}
pool 0 16 &
pool 1 1 &
wait
cat /tmp/logs/times.txt
tail -n 3 /tmp/logs/*.log
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
