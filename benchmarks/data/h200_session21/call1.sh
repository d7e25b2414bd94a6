#!/usr/bin/env bash
# Session 21, call 1 (nvidia-h200-x2). GPU 0: a pool of configs (space_starts.py pool: each
# stored GPU workload's five fastest gemm / gemm_splitk_serial configs) measured on 37 training
# shapes and 18 held-out ones (sets 4 and 5), for a space's starts. GPU 1: the second held-out
# conv set at batch 16, 25 s a layer, with the harness tuning as `octune tune` does.
# ../.gpu_jobs/pool.json is kept as data/h200_session21/call1_pool.json.gz; copy_ab_configs.json (call 2) as call2_copy_ab_configs.json.
deadline=$((SECONDS + ${DEADLINE:-520}))
rm -rf /tmp/logs "$OUT"/*
mkdir -p /tmp/logs
cd benchmarks
TRAIN="4x4096x4096 16x4096x1024 4096x8x4096 2048x32x2048 8x4096x4096:NT 3x8192x2048 256x256x8192 128x768x3072 512x49x4608 64x1000x4096 128x768x768 128x3072x768 512x768x768:NT 3136x64x576 784x128x1152 196x256x2304 3136x256x64 1000x999x997 77x4095x513 4096x4096x4096 197x2304x768 384x1024x1024 577x2304x768 12544x64x147 49x2048x512 196x1024x256 3136x256x2304 96x512x6144 128x1024x4096 256x1024x4096 513x257x1031 771x1537x259 1025x385x1153 1024x16x4096 8192x32x1024 6x2048x5120:NT 32x4096x4096:NT"
SET4="1500x2048x512 257x3072x1024 256x3072x1024:NT 3136x288x96 1500x512x2048 257x1024x4096 512x512x2048 999x777x555 16x11008x4096:NT"
SET5="4096x320x320 4096x2560x320 1024x640x640 499x3072x768 850x2048x256 64x14336x4096:NT 197x1152x384 1231x613x419 384x1024x4096"
(
  for kernel in gemm gemm_splitk_serial; do
    start=$SECONDS parts=1
    [[ $kernel == gemm ]] && parts=2
    CUDA_VISIBLE_DEVICES=0 timeout $((deadline - SECONDS)) python3 starts_pool.py --device NVIDIA \
        --pool ../.gpu_jobs/pool.json --kernels $kernel --shapes $SET4 $SET5 $TRAIN \
        --deadline $(( (deadline - SECONDS) / parts - 20 )) \
        --out "$OUT/pool_$kernel.json.gz" > /tmp/logs/pool_$kernel.log 2>&1
    echo "pool $kernel: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
  done
) &
(
  start=$SECONDS
  CUDA_VISIBLE_DEVICES=1 timeout $((deadline - SECONDS)) python3 conv_layers.py --device NVIDIA \
      --nets held_out_2 --seconds 25 --batch 16 --db "sqlite:////tmp/conv16.db" \
      --out "$OUT/conv_held2_b16.json" > /tmp/logs/conv16.log 2>&1
  echo "conv b16: rc $? in $((SECONDS - start)) s" >> /tmp/logs/times.txt
) &
wait
cat /tmp/logs/times.txt
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
ls -la "$OUT"
