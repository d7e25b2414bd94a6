#!/usr/bin/env bash
# Session 27, call 4 (nvidia-h200): answers across batches on a network whose grouped convs gave
# the GPU starts' pool nothing: RegNetX-400MF (torchvision, TorchScript export, dynamic batch) at
# batch 16 from a 60 s batch-1 base, confirmed as `octune run --configs confirmed` confirms,
# against a copy of the base tuned 300 s at 16. The bases stay in $OUT for a second call.
deadline=$((SECONDS + ${DEADLINE:-520}))
rm -rf /tmp/logs /tmp/xb /tmp/zoo "$OUT"/*
mkdir -p /tmp/logs /tmp/xb
nvidia-smi -L > /tmp/logs/gpus.txt 2>&1
cd benchmarks
start=$SECONDS
python3 zoo_export.py --out /tmp/zoo --threads 16 --only regnet_x_400mf.dynamic.onnx > /tmp/logs/export.log 2>&1
echo "export: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
cp /tmp/zoo/regnet_x_400mf.dynamic.onnx .
start=$SECONDS
timeout $((deadline - SECONDS - 30)) python3 cross_batch.py --device NVIDIA \
    --nets regnet_x_400mf.dynamic.onnx --base-seconds 60 --batches 16 --tune-seconds 300 \
    --policies confirmed-model confirmed-starts --dir /tmp/xb \
    --out "$OUT/cross_batch_regnet_x_400mf.json" > /tmp/logs/regnet_x.log 2>&1
echo "regnet_x: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
cat /tmp/logs/times.txt; tail -30 /tmp/logs/regnet_x.log
cp /tmp/xb/*.db "$OUT/" 2>/dev/null
gzip -f "$OUT"/*.db "$OUT"/*.json 2>/dev/null
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
