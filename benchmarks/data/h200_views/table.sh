#!/usr/bin/env bash
# Issue 63, seventeenth session, on nvidia-h200-x2: the batch-N table, each network tuned on top
# of the batch-1 database it was tuned into on the H200 (data/h200_zoo/tuned{1,2,3}.db.gz),
# its answers timed before tuning too (--before), beside PyTorch's CUDA graph.
#   table.sh BATCH "GPU0 jobs" "GPU1 jobs"; a job is MODEL:DB:MINUTES
batch=$1
deadline=$((SECONDS + ${DEADLINE:-560}))  # the call's 600 s, less the copying back
flags=${FLAGS:---profile --before}
rm -rf /tmp/logs /tmp/dbs "$OUT"/*  # a killed run leaves journals behind
mkdir -p /tmp/logs /tmp/dbs
for n in 1 2 3; do gunzip -c benchmarks/data/h200_zoo/tuned$n.db.gz > /tmp/dbs/tuned$n.db; done
cd benchmarks
models=""
for job in $2 $3; do models="$models ${job%%:*}"; done
files=$(echo "$models" | sed -e 's/vit_b_16.dynamic/vit_b_16.dynamic.onnx/; s/resnet50.dynamic/resnet50.dynamic.onnx/; s/bert_layer/bert_layer.onnx/')
python3 zoo_export.py --out /tmp/zoo --threads 16 --only $files > /tmp/logs/export.log 2>&1
run_gpu() {
    local gpu=$1; shift
    for job in "$@"; do
        IFS=: read -r model db minutes <<< "$job"
        cp /tmp/dbs/tuned$db.db /tmp/dbs/$model.$batch.db
        local limit=$(awk "BEGIN {print int($minutes * 60 + 170)}")
        (( limit > deadline - SECONDS )) && limit=$((deadline - SECONDS))
        CUDA_VISIBLE_DEVICES=$gpu timeout "$limit" python3 zoo.py --zoo /tmp/zoo --device NVIDIA --torch $flags \
            --batch "$batch" --models "$model" --tune-minutes "$minutes" --policies confirmed \
            --db "sqlite:////tmp/dbs/$model.$batch.db" --out "$OUT/$model.$batch.json" > "/tmp/logs/$model.$batch.log" 2>&1
    done
}
run_gpu 0 $2 &
run_gpu 1 $3 &
wait
cp "$OUT"/*.tune.log /tmp/logs/ 2>/dev/null; rm -f "$OUT"/*.tune.log
tar -czf "$OUT/logs$batch.tar.gz" -C /tmp logs
ls -la "$OUT"
