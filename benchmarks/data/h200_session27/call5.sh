#!/usr/bin/env bash
# Session 27, call 5 (nvidia-h200): call 4's RegNetX-400MF run confirmed and timed (call 4 met
# its deadline after tuning): the base (60 s at batch 1) and the copy tuned 300 s at 16 from
# call 4 (.gpu_jobs/xb27, NET.db.gz and NET_b16.db.gz: kept here as call4_base_regnet_x_400mf.db.gz
# and call4_tuned_regnet_x_400mf_b16.db.gz), confirmed at 16 as `octune run --configs
# confirmed` confirms; that policy alone (session 25's one-policy runs took 358 s each).
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
timeout $((deadline - SECONDS - 10)) python3 cross_batch.py --device NVIDIA \
    --nets regnet_x_400mf.dynamic.onnx --base-dir ../.gpu_jobs/xb27 --tuned-dir ../.gpu_jobs/xb27 \
    --batches 16 --policies confirmed-starts --dir /tmp/xb \
    --out "$OUT/cross_batch_regnet_x_400mf.json" > /tmp/logs/regnet_x.log 2>&1
echo "regnet_x: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
cat /tmp/logs/times.txt; grep -h " batch 16: " /tmp/logs/regnet_x.log; tail -5 /tmp/logs/regnet_x.log
gzip -f "$OUT"/*.json 2>/dev/null
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
