#!/usr/bin/env bash
# Issue 63, eighteenth session, call 2 on nvidia-h200-x2: the element-wise launch's bandwidth
# (benchmarks/epilogue_bandwidth.py), then ViT-B/16 and the BERT layer with attention fused.
CUDA_VISIBLE_DEVICES=1 timeout 60 python3 benchmarks/epilogue_bandwidth.py --device NVIDIA --out /tmp/epilogue.json > /tmp/epilogue.log 2>&1
DEADLINE=$((540 - SECONDS)) bash .gpu_jobs/table.sh "$1" "$2"
cp /tmp/epilogue.json /tmp/epilogue.log "$OUT"/ 2>/dev/null
ls -la "$OUT"
