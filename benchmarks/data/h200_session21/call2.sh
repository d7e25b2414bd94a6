#!/usr/bin/env bash
# Session 21, call 2 (nvidia-h200-x2): held-out GEMM sets 4 and 5, 45 s each from an empty
# database, as `octune tune gemm --shape` tunes now (campaign rounds, starts on a GPU, the
# coalesced copies of unaligned tiles); GPU 1 first A/Bs gemm.cl's copy change config by config.
deadline=$((SECONDS + ${DEADLINE:-540}))
rm -rf /tmp/logs "$OUT"/*
mkdir -p /tmp/logs
cd benchmarks
gemm() {  # gpu name shapes...
    local gpu=$1 name=$2 start=$SECONDS; shift 2
    CUDA_VISIBLE_DEVICES=$gpu timeout $((deadline - SECONDS)) python3 gemm_classes.py --device NVIDIA \
        --seconds 45 --db "sqlite:////tmp/$name.db" --out "$OUT/$name.json.gz" --shapes "$@" \
        > /tmp/logs/$name.log 2>&1
    echo "$name: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
}
gemm 0 held4 1500x2048x512 257x1024x4096 999x777x555 257x3072x1024 256x3072x1024:NT 1500x512x2048 512x512x2048 3136x288x96 16x11008x4096:NT &
(
  start=$SECONDS
  CUDA_VISIBLE_DEVICES=1 timeout 100 python3 template_ab.py --device NVIDIA --baseline ../.gpu_jobs/ab/gemm.cl \
      --runs ../.gpu_jobs/copy_ab_configs.json --out "$OUT/copy_ab.json.gz" > /tmp/logs/copy_ab.log 2>&1
  echo "copy_ab: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
  gemm 1 held5 1231x613x419 384x1024x4096 4096x2560x320 499x3072x768 850x2048x256 1024x640x640 4096x320x320 64x14336x4096:NT 197x1152x384
) &
wait
cat /tmp/logs/times.txt
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
