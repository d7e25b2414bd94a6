#!/usr/bin/env bash
# Session 25, call 4 (nvidia-h200-x2): ResNet-50 at batch 16 from session 22's base (60 s at
# batch 1), confirmed as `octune run --configs confirmed` confirms, against session 22's copy tuned
# 300 s at 16, both measured in each run; the direct kernel's starts as this session picks them
# (eight, with grouped convs) on GPU 0, as session 23 picked them (.gpu_jobs/conv2d_direct_s23.yaml,
# installed over a copy of the package) on GPU 1, side by side.
# (.gpu_jobs/xb22 holds the base and the copy as resnet50.db.gz and resnet50_b16.db.gz.) Whether
# the eight starts cost ResNet-50 anything (its layers took part in both picks).
deadline=$((SECONDS + ${DEADLINE:-520}))
rm -rf /tmp/logs /tmp/xb0 /tmp/xb1 /tmp/zoo /tmp/site_old "$OUT"/*
mkdir -p /tmp/logs /tmp/xb0 /tmp/xb1 /tmp/site_old
cp -r /tmp/site/octune /tmp/site_old/
cp .gpu_jobs/conv2d_direct_s23.yaml /tmp/site_old/octune/search_spaces/starts/conv2d_direct.yaml
cd benchmarks
run() {  # gpu site label
    local gpu=$1 site=$2 label=$3 start=$SECONDS
    PYTHONPATH=$site python3 -c "from importlib import resources as r; print('$label', r.files('octune.search_spaces').joinpath('starts/conv2d_direct.yaml').read_text().count('- {'), 'direct starts')" >> /tmp/logs/times.txt
    CUDA_VISIBLE_DEVICES=$gpu PYTHONPATH=$site timeout $((deadline - SECONDS - 10)) python3 cross_batch.py \
        --device NVIDIA --nets resnet50 --base-dir ../.gpu_jobs/xb22 \
        --tuned-dir ../.gpu_jobs/xb22 --batches 16 --policies confirmed-starts --dir /tmp/xb$gpu \
        --out "$OUT/cross_batch_resnet50_$label.json" > /tmp/logs/resnet50_$label.log 2>&1
    echo "resnet50 $label: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
}
run 0 /tmp/site starts25 &
run 1 /tmp/site_old:/tmp/site starts23 &
wait
cat /tmp/logs/times.txt; grep -h " batch 16: " /tmp/logs/*.log
gzip -f "$OUT"/*.json
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
