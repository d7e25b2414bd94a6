#!/usr/bin/env bash
# Session 20, call 3 (nvidia-h200-x2): the second held-out conv set (conv_layers.py's
# HELD_OUT_2), 25 s of tuning a layer from an empty database beside cuDNN; GPU 0 at batch 1,
# GPU 1 at batch 16 after the attention plans side by side (now fused-tiled-32 too).
deadline=$((SECONDS + ${DEADLINE:-530}))
rm -rf /tmp/logs "$OUT"/*
mkdir -p /tmp/logs
cd benchmarks
conv() {  # gpu batch
    local gpu=$1 name=conv_held2_b$2 start=$SECONDS
    CUDA_VISIBLE_DEVICES=$gpu timeout $((deadline - SECONDS)) python3 conv_layers.py --device NVIDIA \
        --nets held_out_2 --seconds 25 --batch "$2" --db "sqlite:////tmp/$name.db" \
        --out "$OUT/$name.json" > /tmp/logs/$name.log 2>&1
    echo "$name: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
}
conv 0 1 &
(
  start=$SECONDS
  CUDA_VISIBLE_DEVICES=1 timeout 100 python3 attention_ab.py --device NVIDIA --torch \
      --shapes 16x12x197x64 32x12x197x64 16x12x128x64 32x12x128x64 --out "$OUT/attention.json" > /tmp/logs/attention.log 2>&1
  echo "attention: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
  conv 1 16
) &
wait
cat /tmp/logs/times.txt
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
