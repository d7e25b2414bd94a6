#!/usr/bin/env bash
# Issue 44 on the lent GPU: export the models there with PyTorch's TorchScript exporter (the
# image has torch and torchvision; nothing can be carried that large), then run zoo.py side by
# side with PyTorch's CUDA graphs as the reference. Arguments after the file list go to zoo.py.
#   benchmarks/zoo_device.sh "resnet18.onnx mobilenet_v2.onnx" --out $OUT/zoo.json
set -euo pipefail
files=$1
shift
benchmarks/device_run.sh bash -c "python3 benchmarks/zoo_export.py --out /tmp/zoo --threads 8 \
    --only $files >\$OUT/export.log 2>&1; python3 benchmarks/zoo.py --zoo /tmp/zoo \
    --device NVIDIA --torch $*"
