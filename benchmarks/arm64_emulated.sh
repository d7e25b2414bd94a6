#!/usr/bin/env bash
# octune on ARM64 Linux, emulated (issue 62): a Debian 12 arm64 userland from Debian's archive
# (debootstrap), entered with chroot, its programs run by qemu-user through binfmt_misc (which
# this script mounts and registers qemu-aarch64-static with, as root). Inside it: Debian's
# PoCL (pocl-opencl-icd; PyPI has no aarch64 PoCL wheel) and PyPI's aarch64 wheels; the
# README's first command with the install line it needs there (no pocl extra), a conv2d, then
# `octune export` and `octune lookup` of the result. PoCL compiles for the emulated Cortex-A
# (NEON) CPU.
#
#   sudo bash benchmarks/arm64_emulated.sh [ROOT] > benchmarks/results/arm64_emulated.log
#
# proot (with -q qemu-aarch64-static) was tried first and cannot run it: Debian 12's proot does
# not translate the paths of statx, which the userland's glibc uses for stat, so PoCL's
# compiler saw the host's file system ("unable to open output file ... Operation not
# permitted"; /usr/share/pocl "doesn't exist").
#
# Timings under emulation say nothing about speed: only the wall time of each step is kept.
set -uo pipefail
ROOT=${1:-/var/tmp/octune-arm64}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BINFMT=/proc/sys/fs/binfmt_misc
step() {  # name, then the command: its wall time and status on one line
    local name=$1 started=$SECONDS status
    shift
    "$@"
    status=$?
    echo "== step '$name': status $status, $((SECONDS - started)) s wall"
    return $status
}
inside() {  # a command in the userland, as root, at /octune
    chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
        PIP_CERT=/etc/ssl/certs/host-ca.crt SSL_CERT_FILE=/etc/ssl/certs/host-ca.crt \
        PIP_DEFAULT_TIMEOUT=180 /bin/bash -c "cd /octune && $1"
}
cleanup() {
    for dir in sys dev proc; do umount "$ROOT/$dir" 2>/dev/null; done
}
command -v debootstrap qemu-aarch64-static >/dev/null || {
    echo "error: needs debootstrap and qemu-user-static: apt-get install debootstrap qemu-user-static"
    exit 2
}
if [[ ! -e $BINFMT/register ]] && ! mount -t binfmt_misc binfmt_misc $BINFMT 2>/dev/null; then
    echo "error: binfmt_misc cannot be mounted here (not root, or a container that forbids it): the arm64 userland cannot run its programs"
    exit 2
fi
if [[ ! -e $BINFMT/qemu-aarch64 ]]; then
    echo ':qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:/usr/bin/qemu-aarch64-static:F' \
        > $BINFMT/register || { echo "error: cannot register qemu-aarch64 with binfmt_misc"; exit 2; }
fi
echo "host: $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); $(date -u +%Y-%m-%dT%H:%MZ)"
echo "qemu: $(qemu-aarch64-static --version | head -1)"
if [[ ! -x $ROOT/usr/bin/python3 ]]; then
    step "debootstrap (downloads, then the second stage emulated)" debootstrap --arch=arm64 \
        --variant=minbase --include=python3,python3-venv,pocl-opencl-icd,ocl-icd-libopencl1,ca-certificates \
        bookworm "$ROOT" http://deb.debian.org/debian || exit 1
fi
trap cleanup EXIT
for dir in proc dev sys; do mount --bind "/$dir" "$ROOT/$dir"; done
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
cp "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" "$ROOT/etc/ssl/certs/host-ca.crt"
rm -rf "$ROOT/octune" && mkdir -p "$ROOT/octune"
git -C "$REPO" archive HEAD | tar -x -C "$ROOT/octune"
echo "octune $(git -C "$REPO" rev-parse --short HEAD)"
inside 'uname -m; python3 --version; dpkg-query -W pocl-opencl-icd'
# The README's first command, its install line without the pocl extra (Debian's PoCL instead).
step "install (pip, PyPI's aarch64 wheels)" inside \
    'python3 -m venv .venv && .venv/bin/pip install -q .' || exit 1
step "octune setup" inside '.venv/bin/octune setup'
step "tune gemm 256^3, 20 candidates" inside \
    '.venv/bin/octune tune gemm --m 256 --n 256 --k 256 --budget 20 --summary summary.json && cat summary.json'
step "best" inside '.venv/bin/octune best gemm --m 256 --n 256 --k 256'
step "tune conv2d 16->32 3x3 28x28, 10 candidates" inside \
    '.venv/bin/octune tune conv2d --n 1 --c 16 --h 28 --w 28 --k 32 --r 3 --s 3 --pad 1 --budget 10'
step "tune depthwise conv2d 32 3x3 28x28, 5 candidates" inside \
    '.venv/bin/octune tune conv2d --n 1 --c 32 --h 28 --w 28 --k 32 --r 3 --s 3 --pad 1 --groups 32 --budget 5'
step "tune pointwise conv2d 32->64 1x1 28x28, 5 candidates" inside \
    '.venv/bin/octune tune conv2d --n 1 --c 32 --h 28 --w 28 --k 64 --r 1 --s 1 --budget 5'
# export names a stored device (its fingerprint or name), not a local index
step "export (json)" inside '.venv/bin/octune export --device pthread --out bundle --no-model'
step "lookup from the bundle" inside '.venv/bin/octune lookup bundle gemm --m 200 --n 300 --k 256'
echo "done: $(date -u +%Y-%m-%dT%H:%MZ), $SECONDS s in all"
