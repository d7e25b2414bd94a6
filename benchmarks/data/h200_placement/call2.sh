#!/usr/bin/env bash
# Session 19, call 2 (nvidia-h200-x2): each conv/GEMM epilogue now placed at load (in the
# stores or apart, the faster; Runtime(fuse=None)). GPU 0 ViT-B/16 at batch 32 on call 3's
# database (as call 1), placed and unfused; GPU 1 BERT at batch 16, 3.5 min on the batch-1 one.
deadline=$((SECONDS + ${DEADLINE:-545}))
rm -rf /tmp/logs /tmp/dbs "$OUT"/*
mkdir -p /tmp/logs /tmp/dbs "$OUT/dbs"
for n in 1 2 3; do gunzip -c benchmarks/data/h200_zoo/tuned$n.db.gz > /tmp/dbs/tuned$n.db; done
cd benchmarks
python3 zoo_export.py --out /tmp/zoo --threads 16 --only vit_b_16.dynamic.onnx bert_layer.onnx > /tmp/logs/export.log 2>&1
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
job 0 vit_b_16.dynamic vit32.db.gz 0 32 "--profile --unfused" &
job 1 bert_layer 2 3.5 16 "--profile --unfused" &
wait
cp "$OUT"/*.tune.log /tmp/logs/ 2>/dev/null; rm -f "$OUT"/*.tune.log
cat /tmp/logs/times.txt
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
