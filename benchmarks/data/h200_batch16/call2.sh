#!/usr/bin/env bash
# Issue 63, sixteenth session, call 2 on nvidia-h200-x2, after the batched-weight fix (a265e25):
# on top of the batch-1 databases (benchmarks/data/h200_zoo/tuned{1,2,3}.db), at batch 16:
# GPU 0 ViT-B/16 (3.5 min of tune --model; fused and unfused, profiles), GPU 1 the BERT-base
# layer (2 min) then ResNet-50 (3 min), beside PyTorch's CUDA graph and kernels.
mkdir -p /tmp/logs /tmp/dbs
for n in 1 2 3; do gunzip -c benchmarks/data/h200_zoo/tuned$n.db.gz > /tmp/dbs/tuned$n.db; done
cd benchmarks
python3 zoo_export.py --out /tmp/zoo --threads 8 --only vit_b_16.dynamic.onnx bert_layer.onnx > /tmp/logs/export.log 2>&1
python3 zoo_export.py --out /tmp/zoo --threads 8 --only resnet50.dynamic.onnx > /tmp/logs/export2.log 2>&1 &
exporter=$!
CUDA_VISIBLE_DEVICES=0 timeout 520 python3 zoo.py --zoo /tmp/zoo --device NVIDIA --torch --profile --unfused --batch 16 \
    --models vit_b_16.dynamic --tune-minutes 3.5 --policies confirmed \
    --db sqlite:////tmp/dbs/tuned3.db --out "$OUT/vit16.json" > "$OUT/vit16.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 200 python3 zoo.py --zoo /tmp/zoo --device NVIDIA --torch --profile --batch 16 \
    --models bert_layer --tune-minutes 2 --policies confirmed \
    --db sqlite:////tmp/dbs/tuned2.db --out "$OUT/bert16.json" > "$OUT/bert16.log" 2>&1
wait $exporter
CUDA_VISIBLE_DEVICES=1 timeout 330 python3 zoo.py --zoo /tmp/zoo --device NVIDIA --torch --profile --batch 16 \
    --models resnet50.dynamic --tune-minutes 3 --policies confirmed \
    --db sqlite:////tmp/dbs/tuned1.db --out "$OUT/resnet16.json" > "$OUT/resnet16.log" 2>&1
wait
cp /tmp/zoo/manifest.json /tmp/logs/ 2>/dev/null
cp "$OUT"/*.tune.log /tmp/logs/ 2>/dev/null; rm -f "$OUT"/*.tune.log
tar -czf "$OUT/call5.tar.gz" -C /tmp logs dbs
ls -la "$OUT"
