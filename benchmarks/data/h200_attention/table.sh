#!/usr/bin/env bash
# Issue 63, eighteenth session, on nvidia-h200-x2: networks at batch 16/32 beside PyTorch's CUDA
# graph, each tuned on top of the batch-1 database it was tuned into on the H200
# (data/h200_zoo/tuned{1,2,3}.db.gz) or on a database an earlier call left (dbs/*.db.gz).
#   table.sh "GPU0 jobs" "GPU1 jobs"; a job is MODEL:DB:MINUTES:BATCH[:before], DB a number
#   (data/h200_zoo/tunedN.db.gz) or a file under .gpu_jobs; before: also timed before tuning
deadline=$((SECONDS + ${DEADLINE:-560}))  # the call's 600 s, less the copying back
flags=${FLAGS:---profile}
rm -rf /tmp/logs /tmp/dbs "$OUT"/*  # a killed run leaves journals behind
mkdir -p /tmp/logs /tmp/dbs "$OUT/dbs"
for n in 1 2 3; do gunzip -c benchmarks/data/h200_zoo/tuned$n.db.gz > /tmp/dbs/tuned$n.db; done
cd benchmarks
models=""
for job in $1 $2; do models="$models ${job%%:*}"; done
files=$(for m in $models; do echo $m; done | sort -u | sed -e 's/$/.onnx/' | tr '\n' ' ')
python3 zoo_export.py --out /tmp/zoo --threads 16 --only $files > /tmp/logs/export.log 2>&1
run_gpu() {
    local gpu=$1; shift
    for job in "$@"; do
        IFS=: read -r model db minutes batch before <<< "$job"
        local name=$model.$batch
        if [[ -f ../.gpu_jobs/$db ]]; then gunzip -c "../.gpu_jobs/$db" > "/tmp/dbs/$name.db"
        else cp "/tmp/dbs/tuned$db.db" "/tmp/dbs/$name.db"; fi
        local limit=$(awk "BEGIN {print int($minutes * 60 + ${POST:-170} + ${before:+12}0)}")
        (( limit > deadline - SECONDS )) && limit=$((deadline - SECONDS))
        local start=$SECONDS
        CUDA_VISIBLE_DEVICES=$gpu timeout "$limit" python3 zoo.py --zoo /tmp/zoo --device NVIDIA --torch $flags ${before:+--before} \
            --batch "$batch" --models "$model" --tune-minutes "$minutes" --policies confirmed \
            --db "sqlite:////tmp/dbs/$name.db" --out "$OUT/$name.json" > "/tmp/logs/$name.log" 2>&1
        echo "$name: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
        gzip -c "/tmp/dbs/$name.db" > "$OUT/dbs/$name.db.gz"
    done
}
run_gpu 0 $1 &
run_gpu 1 $2 &
wait
cp "$OUT"/*.tune.log /tmp/logs/ 2>/dev/null; rm -f "$OUT"/*.tune.log
cat /tmp/logs/times.txt
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
