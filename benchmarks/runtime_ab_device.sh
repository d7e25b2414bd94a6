#!/usr/bin/env bash
# The runtime of this tree against an older one's, side by side in one call on the lent GPU:
# the same exported models, the same tuned database, the `confirmed` policy, PyTorch's CUDA
# graph beside each. OLD holds the older runtime/ops.cl and runtime/executor.py (prepared
# here: mkdir .devold; git show REV:runtime/ops.cl >.devold/ops.cl; the same for executor.py;
# carry it with the databases). Each further argument is "DATABASE.db MODEL...", the database
# a path in the tree (carried).
#   WHEELS=.whl_gpu benchmarks/device_run.sh benchmarks/runtime_ab_device.sh .devold \
#       ".devdb/h200_3.db convnext_tiny vit_b_16" ".devdb/h200_1.db efficientnet_b0"
set -u
old=$1
shift
mkdir -p /tmp/oldsrc
cp -r . /tmp/oldsrc 2>/dev/null
rm -rf /tmp/oldsrc/.whl* /tmp/oldsrc/benchmarks/data
cp "$old/ops.cl" "$old/executor.py" /tmp/oldsrc/runtime/
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile \
    --target /tmp/site_old /tmp/oldsrc >/dev/null
models=$(for pair in "$@"; do echo "${pair#* }"; done)
python3 benchmarks/zoo_export.py --out /tmp/zoo --threads 8 --only $models >"$OUT/export.log" 2>&1
for pair in "$@"; do
    set -- $pair
    db=$1
    shift
    name=$(basename "$db" .db)
    for side in new old; do
        path=/tmp/site
        [ $side = old ] && path=/tmp/site_old:/tmp/site
        cp "$db" "/tmp/$name.db" # each side from the same database
        PYTHONPATH=$path timeout 200 python3 benchmarks/zoo.py --zoo /tmp/zoo --device NVIDIA \
            --torch --models "$@" --db "sqlite:////tmp/$name.db" --policies confirmed \
            --repeat 20 --out "$OUT/${side}_$name.json" 2>&1 | tail -2
    done
done
