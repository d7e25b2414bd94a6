#!/usr/bin/env bash
# octune on ARM64 Linux, emulated (issue 62): a Debian 12 arm64 userland from Debian's archive
# (debootstrap), run through proot with qemu-user (binfmt_misc is not mounted here, so proot
# starts every program of the userland under qemu-aarch64-static). Inside it: Debian's PoCL
# (pocl-opencl-icd; PyPI has no aarch64 PoCL wheel) and PyPI's aarch64 wheels; the README's
# first command with the install line it needs there (no pocl extra), then `octune export`
# and `octune lookup` of the result. PoCL compiles for the emulated Cortex-A (NEON) CPU.
#
#   sudo bash benchmarks/arm64_emulated.sh [ROOT] > benchmarks/results/arm64_emulated.log
#
# Timings under emulation say nothing about speed: only the wall time of each step is kept.
set -uo pipefail
ROOT=${1:-/tmp/octune-arm64}
REPO=$(cd "$(dirname "$0")/.." && pwd)
step() {  # name, then the command: its wall time and status on one line
    local name=$1 started=$SECONDS status
    shift
    "$@"
    status=$?
    echo "== step '$name': status $status, $((SECONDS - started)) s wall"
    return $status
}
# The host's trust: a package registry behind a proxy with its own CA is reached as the host
# reaches it.
CA=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
inside() {  # a command in the userland, as root, at /octune
    proot -q qemu-aarch64-static -r "$ROOT" -0 -b /etc/resolv.conf -b /dev -b /proc -b /sys \
        -b "$CA:/etc/ssl/certs/host-ca.crt" -w /octune /usr/bin/env -i HOME=/root \
        PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 PIP_CERT=/etc/ssl/certs/host-ca.crt \
        SSL_CERT_FILE=/etc/ssl/certs/host-ca.crt PIP_DEFAULT_TIMEOUT=180 /bin/bash -c "$1"
}
command -v debootstrap proot qemu-aarch64-static >/dev/null || {
    echo "error: needs debootstrap, proot and qemu-user-static: apt-get install debootstrap proot qemu-user-static"
    exit 2
}
echo "host: $(uname -m), $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
if [[ ! -d $ROOT/debootstrap && ! -x $ROOT/usr/bin/python3 ]]; then
    step "debootstrap (first stage, downloads)" debootstrap --arch=arm64 --foreign \
        --variant=minbase --include=python3,python3-venv,pocl-opencl-icd,ocl-icd-libopencl1,ca-certificates,git \
        bookworm "$ROOT" http://deb.debian.org/debian || exit 1
fi
if [[ -d $ROOT/debootstrap ]]; then  # the first stage done: the second, emulated
    cp /usr/bin/qemu-aarch64-static "$ROOT/usr/bin/"
    step "debootstrap (second stage, emulated)" proot -q qemu-aarch64-static -r "$ROOT" -0 \
        -w / /usr/bin/env DEBOOTSTRAP_DIR=/debootstrap /debootstrap/debootstrap --second-stage \
        || exit 1
fi
rm -rf "$ROOT/octune" && mkdir -p "$ROOT/octune"
git -C "$REPO" archive HEAD | tar -x -C "$ROOT/octune"
inside 'uname -m; python3 --version; clinfo -l 2>/dev/null || true'
# The README's first command, its install line without the pocl extra (Debian's PoCL instead).
step "install (pip, PyPI's aarch64 wheels)" inside \
    'python3 -m venv .venv && .venv/bin/pip install -q .' || exit 1
step "octune setup" inside '.venv/bin/octune setup'
step "octune devices" inside '.venv/bin/octune devices'
step "tune gemm 256^3, 20 candidates" inside \
    '.venv/bin/octune tune gemm --m 256 --n 256 --k 256 --budget 20 --summary summary.json; cat summary.json'
step "best" inside '.venv/bin/octune best gemm --m 256 --n 256 --k 256'
step "tune conv2d 3x3, 10 candidates" inside \
    '.venv/bin/octune tune conv2d --n 1 --c 16 --h 28 --w 28 --k 32 --r 3 --s 3 --pad 1 --budget 10'
step "export (json)" inside \
    '.venv/bin/octune export --device 0 --out bundle --no-model && ls bundle'
step "lookup from the bundle" inside \
    '.venv/bin/octune lookup bundle gemm --m 200 --n 300 --k 256'
echo "done: $(date -u +%Y-%m-%dT%H:%MZ), $SECONDS s in all"
