#!/usr/bin/env bash
# Session 19, call 1 (nvidia-h200-x2): GPU 0 attention plans side by side, then ViT-B/16 at
# batch 32 on call 3's database, fused and unfused with profiles; GPU 1 ResNet-50 at batch 32
# with every config the batch-1 base measured near each layer (cross_batch.py's history).
deadline=$((SECONDS + ${DEADLINE:-545}))
rm -rf /tmp/logs /tmp/dbs "$OUT"/*
mkdir -p /tmp/logs /tmp/dbs "$OUT/dbs"
for n in 1 2 3; do gunzip -c benchmarks/data/h200_zoo/tuned$n.db.gz > /tmp/dbs/tuned$n.db; done
cd benchmarks
(
  start=$SECONDS
  CUDA_VISIBLE_DEVICES=1 timeout $((deadline - SECONDS)) python3 cross_batch.py --device NVIDIA --nets resnet50 \
      --base-dir data/h200_cross_batch --batches 32 --policies nearest confirmed-near history \
      --history-shapes 2 --dir /tmp/xb --out "$OUT/cross_batch.json" > /tmp/logs/cross_batch.log 2>&1
  echo "cross_batch: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
) &
python3 zoo_export.py --out /tmp/zoo --threads 16 --only vit_b_16.dynamic.onnx > /tmp/logs/export.log 2>&1
job() {  # gpu model db minutes batch flags
    local gpu=$1 model=$2 db=$3 minutes=$4 batch=$5 flags=$6 name=$2.$5
    if [[ -f ../.gpu_jobs/$db ]]; then gunzip -c "../.gpu_jobs/$db" > "/tmp/dbs/$name.db"
    else cp "/tmp/dbs/tuned$db.db" "/tmp/dbs/$name.db"; fi
    local limit=$((deadline - SECONDS)) start=$SECONDS
    CUDA_VISIBLE_DEVICES=$gpu timeout "$limit" python3 zoo.py --zoo /tmp/zoo --device NVIDIA --torch $flags \
        --batch "$batch" --models "$model" --tune-minutes "$minutes" --policies confirmed \
        --db "sqlite:////tmp/dbs/$name.db" --out "$OUT/$name.json" > "/tmp/logs/$name.log" 2>&1
    echo "$name: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
    gzip -c "/tmp/dbs/$name.db" > "$OUT/dbs/$name.db.gz"
}
(
  start=$SECONDS
  CUDA_VISIBLE_DEVICES=0 timeout 150 python3 attention_ab.py --device NVIDIA --torch \
      --shapes 16x12x197x64 32x12x197x64 16x12x128x64 32x12x128x64 --out "$OUT/attention.json" > /tmp/logs/attention.log 2>&1
  echo "attention: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
  job 0 vit_b_16.dynamic vit32.db.gz 0 32 "--profile --unfused"
) &

wait
cp "$OUT"/*.tune.log /tmp/logs/ 2>/dev/null; rm -f "$OUT"/*.tune.log
cat /tmp/logs/times.txt
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
