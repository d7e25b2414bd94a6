"""Measure a pool of configs (``space_starts.py pool``) of each kernel on many GEMM shapes or
conv layers, on one device: the dense matrix ``space_starts.py pick`` chooses a space's
``starts:`` from. Every build is made first, all in parallel (a GEMM config once: the shape is
a kernel argument; a conv config once per layer); each measurement is verified as the tuner's
are; the file is rewritten after every shape, so a run cut short keeps what it measured.

    python benchmarks/starts_pool.py --pool pool.json --kernels gemm --shapes 128x768x768 ... \
        --out matrix.json.gz
    python benchmarks/starts_pool.py --pool pool.json --kernels conv2d_igemm \
        --layers resnet50@16 held_out_2@1 --out matrix.json.gz

A conv layer's key is ``NET@BATCH`` then its shape (``c64 h56 k64 r3 s1 g1 d1``): NET is a
built-in network or a set of ``conv_layers.py``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from conv_layers import NETWORKS
from lib.gemm_shapes import parse_shape
from lib.runs import write_run

from octune.catalogue.family import Workload
from octune.catalogue.registry import load_kernel
from octune.kernels.conv2d import FAMILY as CONV2D
from octune.networks.builtin import BUILTIN
from octune.networks.workloads import network_layers
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.measure import DeviceRunner
from octune.tuner.programs import ProgramCache
from octune.tuner.workers import build_all


def conv_layers(name: str) -> dict[str, Workload]:
    """``NET@BATCH``'s distinct conv layers by key."""
    net, _, batch = name.partition("@")
    if net in BUILTIN:
        found = network_layers(net, int(batch), {})[0]
        shapes = [layer.shape for layer in found if layer.family == "conv2d"]
    else:
        shapes = [dict(layer.workload().shape, n=int(batch)) for layer in NETWORKS[net]()]
    return {
        f"{name} c{s['c']} h{s['h']} k{s['k']} r{s['r']} s{s['stride']} g{s['groups']} "
        f"d{s['dilation']}": CONV2D.workload(s, "float32")
        for s in shapes
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", type=Path, required=True)
    parser.add_argument("--kernels", nargs="+", required=True)
    parser.add_argument("--shapes", nargs="+", default=[], help="GEMM shapes, MxNxK[:TN]")
    parser.add_argument("--layers", nargs="+", default=[], help="conv layers: NET@BATCH")
    parser.add_argument("--device", default=None)
    parser.add_argument("--deadline", type=float, default=None, help="stop after this many s")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    started = time.monotonic()
    device = select_device(args.device)
    info = DeviceInfo.from_cl(device)
    cache = ProgramCache()
    pool = json.loads(args.pool.read_text())
    run: dict[str, object] = {"device": info.name, "kernels": {}}
    for name in args.kernels:
        kernel, configs = load_kernel(name), pool[name]
        workloads = {text: parse_shape(text) for text in args.shapes}
        for layers in args.layers:
            workloads.update(conv_layers(layers))
        workloads = {t: w for t, w in workloads.items() if kernel.takes(w) is None}
        build_all(device, cache, ((kernel.source, kernel.build_options(c, w))
                                  for c in configs for w in workloads.values()))  # fmt: skip
        print(f"{name}: {len(configs)} configs on {len(workloads)} shapes built in "
              f"{time.monotonic() - started:.0f} s", flush=True)  # fmt: skip
        times: dict[str, list[float | None]] = {}
        run["kernels"][name] = {"configs": configs, "times": times}  # type: ignore[index]
        for text, workload in workloads.items():
            if args.deadline and time.monotonic() - started > args.deadline:
                break
            runner = DeviceRunner(device, kernel, workload, seed=1, repeats=5, min_repeats=3,
                                  max_seconds=0.05, cache=cache)  # fmt: skip
            measured = [runner.measure(config) for config in configs]
            times[text] = [m.median_s if m.ok else None for m in measured]
            ok = [t for t in times[text] if t]
            print(f"{name} {text}: {len(ok)} of {len(configs)} verified, fastest "
                  f"{min(ok, default=0) * 1e6:.1f} us ({time.monotonic() - started:.0f} s)",
                  flush=True)  # fmt: skip
            write_run(args.out, run)


if __name__ == "__main__":
    main()
