#!/usr/bin/env bash
# Session 20, call 2 (nvidia-h200-x2): the fourth held-out GEMM set (lib/gemm_shapes.py), 45 s
# of tuning a shape from an empty database beside cuBLAS; GPU 0 five shapes, GPU 1 four, then
# `octune run resnet50 --batch 32 --configs confirmed` on the batch-1 base: the load's seconds
# with the confirmation's candidates built ahead in the tuner's builder processes.
deadline=$((SECONDS + ${DEADLINE:-530}))
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
gemm 0 held4_a 1500x2048x512 257x3072x1024 256x3072x1024:NT 3136x288x96 1500x512x2048 &
(
  gemm 1 held4_b 257x1024x4096 512x512x2048 999x777x555 16x11008x4096:NT
  start=$SECONDS
  gunzip -c data/h200_cross_batch/resnet50.db.gz > /tmp/base.db
  CUDA_VISIBLE_DEVICES=1 timeout $((deadline - SECONDS)) python3 -m octune run resnet50 --batch 32 --device NVIDIA \
      --configs confirmed --db sqlite:////tmp/base.db --json "$OUT/run_confirmed.json" > /tmp/logs/run_confirmed.log 2>&1
  echo "run confirmed: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
) &
wait
cat /tmp/logs/times.txt
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
