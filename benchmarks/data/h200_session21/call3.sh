#!/usr/bin/env bash
# Session 21, call 3 (nvidia-h200-x2). GPU 0: the second held-out conv set at batch 1, 25 s a
# layer, tuned as `octune tune` tunes (campaign rounds). GPU 1: the GPU starts A/B, three
# held-out GEMM shapes 45 s each with the shipped starts, then the same without them (the
# installed package copied without search_spaces/starts), each turn's part and time recorded.
deadline=$((SECONDS + ${DEADLINE:-500}))
rm -rf /tmp/logs "$OUT"/*
mkdir -p /tmp/logs /tmp/nostarts
cp -r /tmp/site/octune /tmp/nostarts/ && rm -rf /tmp/nostarts/octune/search_spaces/starts
cd benchmarks
(
  start=$SECONDS
  CUDA_VISIBLE_DEVICES=0 timeout $((deadline - SECONDS)) python3 conv_layers.py --device NVIDIA \
      --nets held_out_2 --seconds 25 --batch 1 --db "sqlite:////tmp/conv1.db" \
      --out "$OUT/conv_held2_b1.json" > /tmp/logs/conv1.log 2>&1
  echo "conv b1: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
) &
(
  for arm in starts none; do
    start=$SECONDS path=/tmp/site
    [[ $arm == none ]] && path=/tmp/nostarts:/tmp/site
    PYTHONPATH=$path CUDA_VISIBLE_DEVICES=1 timeout $((deadline - SECONDS)) python3 gemm_classes.py \
        --device NVIDIA --seconds 45 --db "sqlite:////tmp/ab_$arm.db" --out "$OUT/starts_ab_$arm.json.gz" \
        --shapes 1500x2048x512 257x1024x4096 1231x613x419 > /tmp/logs/starts_ab_$arm.log 2>&1
    echo "starts_ab $arm: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
  done
) &
wait
cat /tmp/logs/times.txt
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
