#!/usr/bin/env bash
# Issue 63, sixteenth session, call 1 on nvidia-h200-x2: on top of the batch-1 databases
# (benchmarks/data/h200_zoo/tuned{1,2,3}.db), ViT-B/16 (GPU 0) and the BERT-base layer (GPU 1)
# at batch 16, up to 4 / 3 minutes of tune --model each, with per-operator profiles beside
# PyTorch's kernels; GPU 1 first the batched-MatMul plans (tiled included) on BERT.
mkdir -p /tmp/logs /tmp/dbs
for n in 2 3; do gunzip -c benchmarks/data/h200_zoo/tuned$n.db.gz > /tmp/dbs/tuned$n.db; done
gunzip -k -f .gpu_jobs/b16c.db.gz
cd benchmarks
nvidia-smi -L > "$OUT/gpus.txt" 2>&1
python3 zoo_export.py --out /tmp/zoo --threads 8 --only vit_b_16.dynamic.onnx bert_layer.onnx > /tmp/logs/export.log 2>&1
CUDA_VISIBLE_DEVICES=0 timeout 470 python3 zoo.py --zoo /tmp/zoo --device NVIDIA --torch --profile --batch 16 \
    --models vit_b_16.dynamic --tune-minutes 4 --policies confirmed \
    --db sqlite:////tmp/dbs/tuned3.db --out "$OUT/vit16.json" > "$OUT/vit16.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 120 python3 batched_matmul_ab.py --device NVIDIA --db sqlite:///$PWD/../.gpu_jobs/b16c.db \
    --batches 1 16 32 --out "$OUT/ab.json" > "$OUT/ab.log" 2>&1
CUDA_VISIBLE_DEVICES=1 timeout 330 python3 zoo.py --zoo /tmp/zoo --device NVIDIA --torch --profile --batch 16 \
    --models bert_layer --tune-minutes 3 --policies confirmed \
    --db sqlite:////tmp/dbs/tuned2.db --out "$OUT/bert16.json" > "$OUT/bert16.log" 2>&1
wait
cp /tmp/zoo/manifest.json /tmp/logs/ 2>/dev/null
cp "$OUT"/*.tune.log /tmp/logs/ 2>/dev/null; rm -f "$OUT"/*.tune.log
tar -czf "$OUT/call4.tar.gz" -C /tmp logs dbs/tuned2.db dbs/tuned3.db
ls -la "$OUT"
