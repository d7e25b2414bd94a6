#!/usr/bin/env bash
# Session 25, call 2 (nvidia-h200-x2): RegNetY-400MF at batch 16 from session 24's base (60 s at
# batch 1), confirmed as `octune run --configs confirmed` confirms, against session 24's copy tuned
# 300 s at 16, both measured in each run; the direct kernel's starts as this session picks them
# (eight, with grouped convs) on GPU 0, as session 23 picked them (.gpu_jobs/conv2d_direct_s23.yaml,
# installed over a copy of the package) on GPU 1, side by side.
# (.gpu_jobs/xb25 holds the base and the copy as NET.onnx.db.gz and NET.onnx_b16.db.gz.)
deadline=$((SECONDS + ${DEADLINE:-520}))
rm -rf /tmp/logs /tmp/xb0 /tmp/xb1 /tmp/zoo /tmp/site_old "$OUT"/*
mkdir -p /tmp/logs /tmp/xb0 /tmp/xb1 /tmp/site_old
cp -r /tmp/site/octune /tmp/site_old/
cp .gpu_jobs/conv2d_direct_s23.yaml /tmp/site_old/octune/search_spaces/starts/conv2d_direct.yaml
cd benchmarks
start=$SECONDS
python3 zoo_export.py --out /tmp/zoo --threads 16 --only regnet_y_400mf.onnx > /tmp/logs/export.log 2>&1
echo "export: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
cp /tmp/zoo/regnet_y_400mf.onnx .
run() {  # gpu site label
    local gpu=$1 site=$2 label=$3 start=$SECONDS
    PYTHONPATH=$site python3 -c "from importlib import resources as r; print('$label', r.files('octune.search_spaces').joinpath('starts/conv2d_direct.yaml').read_text().count('- {'), 'direct starts')" >> /tmp/logs/times.txt
    CUDA_VISIBLE_DEVICES=$gpu PYTHONPATH=$site timeout $((deadline - SECONDS - 10)) python3 cross_batch.py \
        --device NVIDIA --nets regnet_y_400mf.onnx --base-dir ../.gpu_jobs/xb25 \
        --tuned-dir ../.gpu_jobs/xb25 --batches 16 --policies confirmed-starts --dir /tmp/xb$gpu \
        --out "$OUT/cross_batch_regnet_y_400mf_$label.json" > /tmp/logs/regnet_$label.log 2>&1
    echo "regnet $label: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
}
run 0 /tmp/site starts25 &
run 1 /tmp/site_old:/tmp/site starts23 &
wait
cat /tmp/logs/times.txt; grep -h " batch 16: " /tmp/logs/*.log
gzip -f "$OUT"/*.json
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
