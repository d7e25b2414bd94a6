#!/usr/bin/env bash
# Session 23, call 3 (nvidia-h200-x2).
# GPU 0: MobileNet v2 at batch 16 from call 2's base (60 s at batch 1) against call 2's copy of it
#   tuned 300 s at 16 (call 2's deadline cut its confirmations), measured here; no layer of
#   MobileNet v2 took part in picking the starts.
# GPU 1: the second held-out conv set at batch 16, 25 s a layer from an empty database, as
#   `octune tune` tunes, with the conv starts measured first.
deadline=$((SECONDS + ${DEADLINE:-520}))
rm -rf /tmp/logs /tmp/xb0 "$OUT"/*
mkdir -p /tmp/logs
cd benchmarks
(
  start=$SECONDS
  CUDA_VISIBLE_DEVICES=0 timeout $((deadline - SECONDS)) python3 cross_batch.py --device NVIDIA \
      --nets mobilenet_v2 --base-dir ../.gpu_jobs/xb23 --tuned-dir ../.gpu_jobs/xb23 --batches 16 \
      --policies confirmed-model confirmed-starts --dir /tmp/xb0 \
      --out "$OUT/cross_batch_mobilenet_v2.json" > /tmp/logs/mobilenet_v2.log 2>&1
  echo "mobilenet_v2: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
) &
(
  start=$SECONDS
  CUDA_VISIBLE_DEVICES=1 timeout $((deadline - SECONDS)) python3 conv_layers.py --device NVIDIA \
      --nets held_out_2 --seconds 25 --batch 16 --db "sqlite:////tmp/conv16.db" \
      --out "$OUT/conv_held2_b16.json" > /tmp/logs/conv16.log 2>&1
  echo "conv b16: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
) &
wait
cat /tmp/logs/times.txt; grep -h " batch 16: " /tmp/logs/*.log; tail -n 25 /tmp/logs/conv16.log
gzip -f "$OUT"/*.json
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
