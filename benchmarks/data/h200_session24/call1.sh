#!/usr/bin/env bash
# Session 24, call 1 (nvidia-h200-x2): answers across batches, out of sample.
# (.gpu_jobs/xb23 held session 23's call2_base_mobilenet_v2.db.gz and call2_tuned_mobilenet_v2_b16.db.gz
# as mobilenet_v2.db.gz and mobilenet_v2_b16.db.gz.)
# GPU 0: MobileNet v2 at batch 16 from session 23's call-2 base (60 s at batch 1), confirmed as
#   `octune run --configs confirmed` confirms (the depthwise starts now shipped), against that
#   call's copy tuned 300 s at 16, both measured here; then RegNetY-400MF's base, 60 s at batch 1.
# GPU 1: EfficientNet-B0 (torchvision, TorchScript export, dynamic batch): its base, 60 s at
#   batch 1, and a copy tuned 300 s at 16; the confirmation at 16 until the deadline.
# No layer of these three networks took part in picking the starts.
deadline=$((SECONDS + ${DEADLINE:-520}))
rm -rf /tmp/logs /tmp/xb0 /tmp/xb1 /tmp/zoo "$OUT"/*
mkdir -p /tmp/logs /tmp/xb0 /tmp/xb1
nvidia-smi -L > /tmp/logs/gpus.txt 2>&1
cd benchmarks
start=$SECONDS
python3 zoo_export.py --out /tmp/zoo --threads 16 --only efficientnet_b0.onnx regnet_y_400mf.onnx \
    > /tmp/logs/export.log 2>&1
echo "export: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
cp /tmp/zoo/efficientnet_b0.onnx /tmp/zoo/regnet_y_400mf.onnx .
(
  start=$SECONDS
  CUDA_VISIBLE_DEVICES=0 timeout $((deadline - SECONDS - 120)) python3 cross_batch.py \
      --device NVIDIA --nets mobilenet_v2 --base-dir ../.gpu_jobs/xb23 \
      --tuned-dir ../.gpu_jobs/xb23 --batches 16 --policies confirmed-starts --dir /tmp/xb0 \
      --out "$OUT/cross_batch_mobilenet_v2.json" > /tmp/logs/mobilenet_v2.log 2>&1
  echo "mobilenet_v2: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
  CUDA_VISIBLE_DEVICES=0 timeout $((deadline - SECONDS - 10)) python3 -m octune tune \
      --model regnet_y_400mf.onnx --batch 1 --time 60s --device NVIDIA \
      --db sqlite:////tmp/xb0/regnet_y_400mf.onnx.db > /tmp/logs/regnet_base.log 2>&1
  echo "regnet base: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
  cp /tmp/xb0/regnet_y_400mf.onnx.db "$OUT/"
) &
(
  start=$SECONDS
  CUDA_VISIBLE_DEVICES=1 timeout $((deadline - SECONDS - 10)) python3 cross_batch.py \
      --device NVIDIA --nets efficientnet_b0.onnx --base-seconds 60 --batches 16 \
      --tune-seconds 300 --policies confirmed-starts --dir /tmp/xb1 \
      --out "$OUT/cross_batch_efficientnet_b0.json" > /tmp/logs/efficientnet_b0.log 2>&1
  echo "efficientnet_b0: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
  cp /tmp/xb1/*.db "$OUT/" 2>/dev/null
  cp /tmp/xb1/*.log /tmp/logs/ 2>/dev/null
) &
wait
cat /tmp/logs/times.txt; grep -h " batch 16: " /tmp/logs/*.log; tail -3 /tmp/logs/regnet_base.log
gzip -f "$OUT"/*.json "$OUT"/*.db
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
