#!/usr/bin/env bash
# Pack what octune needs on the lent GPU machine beyond its image (Python 3.12, no network) into
# .whl_gpu/site.tar.xz for benchmarks/device_run.sh: the cp312 wheels unpacked, without the
# server's and the bundle signer's dependencies, onnx's test data and onnxruntime's tools, so it
# fits the device call's 64 MiB beside the repository (about 26 MB).
set -euo pipefail
out=${1:-.whl_gpu}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$work/wheels" \
    pyopencl pytools platformdirs siphash24 sqlalchemy greenlet alembic mako pydantic \
    pydantic-core annotated-types typing-inspection typing-extensions xgboost-cpu onnx protobuf \
    tenacity \
    ml_dtypes onnxruntime flatbuffers coloredlogs humanfriendly filelock packaging
mkdir -p "$work/site" "$out"
for wheel in "$work"/wheels/*.whl; do python3 -m zipfile -e "$wheel" "$work/site"; done
rm -rf "$work"/site/onnx/backend/test "$work"/site/onnxruntime/{transformers,quantization}
# Symbols and stubs nobody reads there: what keeps the call under its 64 MiB beside the tree.
find "$work/site" -name '*.so*' -exec strip --strip-unneeded {} + 2>/dev/null || true
find "$work/site" -name '*.pyi' -delete
tar -C "$work/site" -cf - . | xz -T0 -9 >"$out/site.tar.xz"
ls -l "$out/site.tar.xz"
