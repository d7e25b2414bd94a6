#!/usr/bin/env bash
# Session 22, call 4 (nvidia-h200, one GPU): ResNet-50 (torchvision, TorchScript export, dynamic
# batch) at batch 16 on call 3's database (the batch-1 base tuned 300 s at 16, the batched
# pointwise conv among its kernels) beside PyTorch's CUDA graph; then the fifth held-out GEMM
# set's last shape, 197x1152x384, 45 s from an empty database.
deadline=$((SECONDS + ${DEADLINE:-300}))
rm -rf /tmp/logs /tmp/zoo "$OUT"/*
mkdir -p /tmp/logs
gunzip -c .gpu_jobs/tuned_resnet50_b16.db.gz > /tmp/tuned16.db
cd benchmarks
start=$SECONDS
python3 zoo_export.py --out /tmp/zoo --threads 16 --only resnet50.dynamic.onnx > /tmp/logs/export.log 2>&1
echo "export: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
timeout $((deadline - SECONDS - 90)) python3 zoo.py --zoo /tmp/zoo --device NVIDIA --torch --batch 16 \
    --models resnet50.dynamic --tune-minutes 0 --policies confirmed --db sqlite:////tmp/tuned16.db \
    --out "$OUT/resnet50_b16.json" > /tmp/logs/zoo.log 2>&1
echo "zoo: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
timeout $((deadline - SECONDS)) python3 gemm_classes.py --device NVIDIA --seconds 45 \
    --db sqlite:////tmp/held5.db --out "$OUT/held5_last.json.gz" --shapes 197x1152x384 \
    > /tmp/logs/held5_last.log 2>&1
echo "gemm: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
cat /tmp/logs/times.txt; tail -4 /tmp/logs/zoo.log; tail -4 /tmp/logs/held5_last.log
gzip -f "$OUT"/*.json
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
