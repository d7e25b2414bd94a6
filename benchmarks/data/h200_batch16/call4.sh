#!/usr/bin/env bash
# Issue 63, sixteenth session, call 4 on nvidia-h200-x2: the turn overhead after the measuring
# process keeps its context and host operands (same cProfile run as call 3: ResNet-50 at batch
# 16, 90 s of tune --model on the batch-1 database, GPU 1); GPU 0 ResNet-50 at batch 16 after
# 150 s of tune --model beside PyTorch.
mkdir -p /tmp/logs /tmp/dbs
gunzip -c benchmarks/data/h200_zoo/tuned1.db.gz > /tmp/dbs/tuned1.db
cp /tmp/dbs/tuned1.db /tmp/dbs/prof.db
cd benchmarks
python3 zoo_export.py --out /tmp/zoo --threads 8 --only resnet50.dynamic.onnx > /tmp/logs/export.log 2>&1
CUDA_VISIBLE_DEVICES=0 timeout 215 python3 zoo.py --zoo /tmp/zoo --device NVIDIA --torch --profile --batch 16 \
    --models resnet50.dynamic --tune-minutes 2.5 --policies confirmed \
    --db sqlite:////tmp/dbs/tuned1.db --out "$OUT/resnet16.json" > "$OUT/resnet16.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 130 python3 -m cProfile -o /tmp/logs/tune_resnet16.prof -m octune \
    tune --model /tmp/zoo/resnet50.dynamic.onnx --batch 16 --time 90s --device NVIDIA --db sqlite:////tmp/dbs/prof.db > /tmp/logs/prof_tune.log 2>&1
python3 -c "
import pstats; p = pstats.Stats('/tmp/logs/tune_resnet16.prof'); p.sort_stats('cumulative').print_stats(70)" > "$OUT/prof_cumulative.txt" 2>&1
wait
cp "$OUT"/*.tune.log /tmp/logs/ 2>/dev/null; rm -f "$OUT"/*.tune.log
tar -czf "$OUT/call7.tar.gz" -C /tmp logs dbs
ls -la "$OUT"
