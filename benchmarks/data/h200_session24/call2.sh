#!/usr/bin/env bash
# Session 24, call 2 (nvidia-h200-x2): answers across batches, out of sample.
# (.gpu_jobs/xb24 held call1_base_*.db.gz, call1_tuned_*.db.gz and call2_tuned_*.db.gz of this folder
# under the names cross_batch.py reads: NET.onnx.db.gz and NET.onnx_b16.db.gz.)
# GPU 0: EfficientNet-B0 at batch 16 from call 1's base (60 s at batch 1), confirmed as
#   `octune run --configs confirmed` confirms, against call 1's copy tuned 300 s at 16.
# GPU 1: RegNetY-400MF: call 1's base (60 s at batch 1) tuned 300 s at 16 into a copy, then the
#   confirmation at 16 against it until the deadline.
deadline=$((SECONDS + ${DEADLINE:-520}))
rm -rf /tmp/logs /tmp/xb0 /tmp/xb1 /tmp/zoo "$OUT"/*
mkdir -p /tmp/logs /tmp/xb0 /tmp/xb1
cd benchmarks
start=$SECONDS
python3 zoo_export.py --out /tmp/zoo --threads 16 --only efficientnet_b0.onnx regnet_y_400mf.onnx \
    > /tmp/logs/export.log 2>&1
echo "export: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
cp /tmp/zoo/efficientnet_b0.onnx /tmp/zoo/regnet_y_400mf.onnx .
(
  start=$SECONDS
  CUDA_VISIBLE_DEVICES=0 timeout $((deadline - SECONDS - 10)) python3 cross_batch.py \
      --device NVIDIA --nets efficientnet_b0.onnx --base-dir ../.gpu_jobs/xb24 \
      --tuned-dir ../.gpu_jobs/xb24 --batches 16 --policies confirmed-starts --dir /tmp/xb0 \
      --out "$OUT/cross_batch_efficientnet_b0.json" > /tmp/logs/efficientnet_b0.log 2>&1
  echo "efficientnet_b0: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
) &
(
  start=$SECONDS
  CUDA_VISIBLE_DEVICES=1 timeout $((deadline - SECONDS - 10)) python3 cross_batch.py \
      --device NVIDIA --nets regnet_y_400mf.onnx --base-dir ../.gpu_jobs/xb24 --batches 16 \
      --tune-seconds 300 --policies confirmed-starts --dir /tmp/xb1 \
      --out "$OUT/cross_batch_regnet_y_400mf.json" > /tmp/logs/regnet_y_400mf.log 2>&1
  echo "regnet_y_400mf: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
  cp /tmp/xb1/regnet_y_400mf.onnx_b16.db "$OUT/" 2>/dev/null
  cp /tmp/xb1/*.log /tmp/logs/ 2>/dev/null
) &
wait
cat /tmp/logs/times.txt; grep -h " batch 16: " /tmp/logs/*.log
gzip -f "$OUT"/*.json "$OUT"/*.db
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
