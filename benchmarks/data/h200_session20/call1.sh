#!/usr/bin/env bash
# Session 20, call 1 (nvidia-h200-x2). GPU 0: attention plans side by side, the tiled kernel's
# row reductions by warp shuffles (this tree) and through local memory (a41b303's ops.cl), then
# ViT-B/16 at batch 16 on the batch-32 database (timed before and after 45 s of tuning at 16).
# GPU 1: BERT at batch 32 on the batch-16 database (220 s tuned there) after 80 s at 32, then
# ViT-B/16 at batch 32 on its database, no tuning.
deadline=$((SECONDS + ${DEADLINE:-540}))
rm -rf /tmp/logs /tmp/dbs "$OUT"/*
mkdir -p /tmp/logs /tmp/dbs "$OUT/dbs"
site=$(python3 -c "import octune.runtime, os; print(os.path.dirname(octune.runtime.__file__))")
cd benchmarks
python3 zoo_export.py --out /tmp/zoo --threads 16 --only vit_b_16.dynamic.onnx bert_layer.onnx > /tmp/logs/export.log 2>&1
job() {  # gpu model db minutes batch flags
    local gpu=$1 model=$2 db=$3 minutes=$4 batch=$5 flags=$6 name=$2.$5
    xz -dc "../.gpu_jobs/$db" > "/tmp/dbs/$name.db"
    local limit=$((deadline - SECONDS)) start=$SECONDS
    CUDA_VISIBLE_DEVICES=$gpu timeout "$limit" python3 zoo.py --zoo /tmp/zoo --device NVIDIA --torch $flags \
        --batch "$batch" --models "$model" --tune-minutes "$minutes" --policies confirmed \
        --db "sqlite:////tmp/dbs/$name.db" --out "$OUT/$name.json" > "/tmp/logs/$name.log" 2>&1
    echo "$name: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
    gzip -c "/tmp/dbs/$name.db" > "$OUT/dbs/$name.db.gz"
}
attention() {  # tag
    local start=$SECONDS
    CUDA_VISIBLE_DEVICES=0 timeout 120 python3 attention_ab.py --device NVIDIA --torch \
        --shapes 16x12x197x64 32x12x197x64 16x12x128x64 32x12x128x64 --out "$OUT/attention_$1.json" > "/tmp/logs/attention_$1.log" 2>&1
    echo "attention $1: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
}
(
  attention shuffle
  cp "$site/ops.cl" /tmp/ops_now.cl
  gunzip -c ../.gpu_jobs/ops_before.cl.gz > "$site/ops.cl"
  attention local
  cp /tmp/ops_now.cl "$site/ops.cl"
  attention shuffle_again
  job 0 vit_b_16.dynamic vit32.db.xz 0.75 16 "--profile --before"
) &
(
  job 1 bert_layer bert16.db.xz 1.33 32 "--profile"
  job 1 vit_b_16.dynamic vit32.db.xz 0 32 "--profile"
) &
wait
cp "$OUT"/*.tune.log /tmp/logs/ 2>/dev/null; rm -f "$OUT"/*.tune.log
cat /tmp/logs/times.txt
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
