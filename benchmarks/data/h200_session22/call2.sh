#!/usr/bin/env bash
# Session 22, call 2 (nvidia-h200, one GPU: no two-GPU machine was lent): the second held-out
# conv set at batch 16 again, 25 s a layer, with the conv reference as one product per tap over
# the batch (call 1's atrous 3x3 spent its share on the reference: one kernel tried); then the
# reference's cost on the host, the form before beside it (benchmarks/reference_cost.py).
deadline=$((SECONDS + ${DEADLINE:-500}))
rm -rf /tmp/logs "$OUT"/*
mkdir -p /tmp/logs
cd benchmarks
start=$SECONDS
timeout $((deadline - SECONDS - 60)) python3 conv_layers.py --device NVIDIA --nets held_out_2 \
    --seconds 25 --batch 16 --db "sqlite:////tmp/conv16.db" --out "$OUT/conv_held2_b16.json" \
    > /tmp/logs/conv16.log 2>&1
echo "conv b16: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
timeout $((deadline - SECONDS)) python3 reference_cost.py --layers 16,2048,28,28,256,3,3,1,12,12 \
    32,64,56,56,64,3,3,1,1,1 --out "$OUT/reference_cost.json" > /tmp/logs/reference_cost.log 2>&1
echo "reference_cost: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
cat /tmp/logs/times.txt /tmp/logs/reference_cost.log
gzip -f "$OUT"/*.json
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
