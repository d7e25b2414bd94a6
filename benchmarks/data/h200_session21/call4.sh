#!/usr/bin/env bash
# Session 21, call 4 (nvidia-h200-x2): held-out GEMM shapes from sets 4 and 5 again, 45 s each
# from an empty database, with the run's workers shared across shapes (as one `octune tune` run
# of many workloads), the starts before the default, and kernels judged after 4 candidates.
deadline=$((SECONDS + ${DEADLINE:-230}))
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
gemm 0 held4 1500x2048x512 257x1024x4096 999x777x555 256x3072x1024:NT &
gemm 1 held5 1231x613x419 384x1024x4096 499x3072x768 1024x640x640 &
wait
cat /tmp/logs/times.txt
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
