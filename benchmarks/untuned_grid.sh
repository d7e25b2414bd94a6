#!/usr/bin/env bash
# Issue 5's untuned-shape experiment on a device: tune a grid of shapes and a set of held-out
# shapes into DB, then measure what the lookup, shown only the grid, answers for each held-out
# shape beside that shape's tuned best. Run through benchmarks/device_run.sh on the GPU machine:
#   benchmarks/device_run.sh bash benchmarks/untuned_grid.sh tuned.db "$OUT" [GRID.yaml ...]
set -euo pipefail
db=$1 out=$2
shift 2
octune() { python3 -c "from octune.cli import main; main()" "$@"; }
for grid in "$@"; do
    octune tune --workloads "$grid" --device NVIDIA --db "sqlite:///$db" --time 180s \
        --summary "$out/$(basename "$grid" .yaml).json"
done
octune tune --workloads benchmarks/data/h100_grid/held_out.yaml --device NVIDIA \
    --db "sqlite:///$db" --budget 1250 --time 220s --summary "$out/held_out.json"
python3 benchmarks/untuned_shapes.py --device NVIDIA --db "$db" --hold-out-all \
    --shapes 512x512x512 2048x512x1024 3136x64x576 768x768x768 128x3072x768 1536x384x2048 \
    3000x200x300 1000x1000x1000 --out "$out/untuned_grid.json"
