#!/usr/bin/env bash
# Session 20, call 4 (nvidia-h200-x2): call 2's held-out GEMM shapes furthest below cuBLAS again,
# 45 s each from an empty database, with the harness tuning the kernels `octune tune` tunes on a
# GPU (lib/tuning.py now drops gemm_panel, a CPU template, as campaign.for_device does).
deadline=$((SECONDS + ${DEADLINE:-170}))
rm -rf /tmp/logs "$OUT"/*
mkdir -p /tmp/logs
cd benchmarks
gemm() {  # gpu name shapes...
    local gpu=$1 name=$2 start=$SECONDS; shift 2
    CUDA_VISIBLE_DEVICES=$gpu timeout $((deadline - SECONDS)) python3 gemm_classes.py --device NVIDIA \
        --seconds 45 --db "sqlite:////tmp/$name.db" --out "$OUT/$name.json.gz" --shapes "$@" \
        > /tmp/logs/$name.log 2>&1
    echo "$name: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
}
gemm 0 held4_gpu_a 257x1024x4096 999x777x555 &
gemm 1 held4_gpu_b 3136x288x96 512x512x2048 &
wait
cat /tmp/logs/times.txt
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
