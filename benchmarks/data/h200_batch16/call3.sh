#!/usr/bin/env bash
# Issue 63, sixteenth session, call 3 on nvidia-h200-x2: GPU 0 EfficientNet-B0 and MobileNet v2
# at batch 16 on top of the batch-1 database (2.5 min of tune --model each, profiles); GPU 1
# where a turn's time goes at batch 16 (cProfile of `octune tune --model` on ResNet-50, 90 s),
# then the BERT-base layer at batch 32 (2 min).
mkdir -p /tmp/logs /tmp/dbs
for n in 1 2; do gunzip -c benchmarks/data/h200_zoo/tuned$n.db.gz > /tmp/dbs/tuned$n.db; done
cp /tmp/dbs/tuned1.db /tmp/dbs/prof.db
cd benchmarks
python3 zoo_export.py --out /tmp/zoo --threads 8 --only efficientnet_b0 mobilenet_v2 resnet50.dynamic.onnx bert_layer.onnx > /tmp/logs/export.log 2>&1
CUDA_VISIBLE_DEVICES=0 timeout 480 python3 zoo.py --zoo /tmp/zoo --device NVIDIA --torch --profile --batch 16 \
    --models efficientnet_b0 mobilenet_v2 --tune-minutes 2.5 --policies confirmed \
    --db sqlite:////tmp/dbs/tuned1.db --out "$OUT/effmob16.json" > "$OUT/effmob16.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 150 python3 -m cProfile -o /tmp/logs/tune_resnet16.prof -m octune \
    tune --model /tmp/zoo/resnet50.dynamic.onnx --batch 16 --time 90s --device NVIDIA --db sqlite:////tmp/dbs/prof.db > /tmp/logs/prof_tune.log 2>&1
python3 -c "
import pstats; p = pstats.Stats('/tmp/logs/tune_resnet16.prof'); p.sort_stats('cumulative').print_stats(70)" > "$OUT/prof_cumulative.txt" 2>&1
CUDA_VISIBLE_DEVICES=1 timeout 280 python3 zoo.py --zoo /tmp/zoo --device NVIDIA --torch --profile --batch 32 \
    --models bert_layer --tune-minutes 2 --policies confirmed \
    --db sqlite:////tmp/dbs/tuned2.db --out "$OUT/bert32.json" > "$OUT/bert32.log" 2>&1
wait
cp "$OUT"/*.tune.log /tmp/logs/ 2>/dev/null; rm -f "$OUT"/*.tune.log
tar -czf "$OUT/call6.tar.gz" -C /tmp logs dbs
ls -la "$OUT"
