#!/usr/bin/env bash
# Session 23, call 2 (nvidia-h200-x2): answers across batches with the conv starts in the
# confirmation, against the confirmation without them, in one process per GPU.
# GPU 0: ResNet-50 at batch 16 from session 22's base (60 s at batch 1) against session 22's copy
#   of it tuned 300 s at 16 (data/h200_session22/call3_*; .gpu_jobs/xb22), both measured here.
#   In sample: the starts were picked on ResNet-50's layers at batches 1 and 16 (call 1).
# GPU 1: MobileNet v2 (no layer of it in the starts' pick), its base tuned 60 s at batch 1 here,
#   a copy tuned 300 s at 16.
deadline=$((SECONDS + ${DEADLINE:-550}))
rm -rf /tmp/logs /tmp/xb0 /tmp/xb1 "$OUT"/*
mkdir -p /tmp/logs
cd benchmarks
(
  start=$SECONDS
  CUDA_VISIBLE_DEVICES=0 timeout $((deadline - SECONDS)) python3 cross_batch.py --device NVIDIA \
      --nets resnet50 --base-dir ../.gpu_jobs/xb22 --tuned-dir ../.gpu_jobs/xb22 --batches 16 \
      --policies confirmed-model confirmed-starts --dir /tmp/xb0 \
      --out "$OUT/cross_batch_resnet50.json" > /tmp/logs/resnet50.log 2>&1
  echo "resnet50: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
) &
(
  start=$SECONDS
  CUDA_VISIBLE_DEVICES=1 timeout $((deadline - SECONDS)) python3 cross_batch.py --device NVIDIA \
      --nets mobilenet_v2 --base-seconds 60 --batches 16 --tune-seconds 300 \
      --policies confirmed-model confirmed-starts --dir /tmp/xb1 \
      --out "$OUT/cross_batch_mobilenet_v2.json" > /tmp/logs/mobilenet_v2.log 2>&1
  echo "mobilenet_v2: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
  cp /tmp/xb1/mobilenet_v2.db "$OUT/base_mobilenet_v2.db" 2>/dev/null
  cp /tmp/xb1/mobilenet_v2_b16.db "$OUT/tuned_mobilenet_v2_b16.db" 2>/dev/null
  cp /tmp/xb1/*.log /tmp/logs/ 2>/dev/null
) &
wait
cat /tmp/logs/times.txt; grep -h " batch 16: " /tmp/logs/*.log
gzip -f "$OUT"/*.json "$OUT"/*.db
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
