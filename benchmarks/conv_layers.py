"""Every distinct conv layer of ResNet-50 and MobileNet v1 (batch 1, 224x224), or `held_out`'s
layers (drawn from networks octune's kernels were not developed against): tune each with
octune, then time octune's fastest verified (kernel, config) beside a vendor library in the
same run: cuDNN through PyTorch on a GPU, onnxruntime's CPU provider on a CPU. Each kernel's
own fastest is kept in the JSON too (`kernels`), so a new kernel is compared with the others
in the same run.

Each layer is tuned with every conv2d kernel that takes it (direct, depthwise, 1x1-as-GEMM,
implicit GEMM), `--seconds` per layer split among them, in network order, so the model
strategy warm-starts from the layers before (transfer). Then, for the comparison, the best
stored config of each kernel is re-measured here (verified against float64 again, timed with
profiling events) and the fastest is octune's time. cuDNN runs with TF32 off and
`cudnn.benchmark = True`, timed as a CUDA graph of back-to-back calls (one small call between
two events would time the launch, not the kernel); onnxruntime as a one-Conv model, median of
many runs on all cores. Sums weight each layer by how often the network runs it.

With `--random`, each layer is tuned a second time with random search in a database of its
own, and the tuning-cost table says how many candidates and seconds each strategy took to reach
95 % of the best either found.

    python benchmarks/conv_layers.py --nets resnet50 mobilenet_v1 --seconds 20 --out conv.json
    python benchmarks/conv_layers.py --nets held_out --seconds 25 --out held_out.json
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

from lib.baselines import vendor_anchor
from lib.conv_shapes import Layer
from lib.tuning import fastest_stored, stored_timings, tune_workload

from octune.db.store import Store
from octune.networks.workloads import network_layers
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.session import Settings, open_workers
from octune.tuner.workers import default_jobs


def _network(name: str) -> list[Layer]:
    """The distinct conv layers of octune's built-in network (``octune.networks``) at batch 1,
    in network order; these two networks' convs are square and padded to keep the size.
    """
    layers, _ = network_layers(name, None, {})
    return [
        Layer(found.nodes[0], shape["c"], shape["h"], shape["k"], shape["r"], shape["stride"],
              shape["groups"], found.count)
        for found in layers
        if found.family == "conv2d"
        for shape in [found.shape]
    ]  # fmt: skip


# Layers of networks no octune kernel was developed against (batch 1), the kinds the conv
# kernels trailed cuDNN on: depthwise 5x5 and 7x7, dilated, strided, wide and large planes.
HELD_OUT = [
    Layer("effnet_b3 dw5x5 s2", 192, 75, 192, 5, stride=2, groups=192),
    Layer("effnet_b3 dw5x5", 288, 38, 288, 5, groups=288),
    Layer("effnet_b3 dw5x5 19", 816, 19, 816, 5, groups=816),
    Layer("mnasnet1_0 dw5x5 s2", 72, 56, 72, 5, stride=2, groups=72),
    Layer("convnext_t dw7x7", 96, 56, 96, 7, groups=96),
    Layer("convnext_t dw7x7 14", 384, 14, 384, 7, groups=384),
    Layer("deeplab_mnv2 dw3x3 d2", 576, 14, 576, 3, groups=576, dilation=2),
    Layer("wide_rn50_2 3x3 s2", 256, 56, 256, 3, stride=2),
    Layer("unet 3x3 256px", 64, 256, 64, 3),
    Layer("vgg19 3x3 128px", 128, 112, 128, 3),
    Layer("deeplab_rn101 3x3 d2", 256, 28, 256, 3, dilation=2),
    Layer("regnetx_3_2gf g3x3 s2", 192, 56, 192, 3, stride=2, groups=8),
]  # fmt: skip

# A second set (2026-11-30, issue 63), drawn after the kernels had been tuned on the first:
# layers of MobileNetV3-large, ResNeXt-50, RegNetY-1.6GF, DenseNet-121, Inception-v3,
# ConvNeXt-T's downsampling, EfficientNetV2-S, YOLOv5s (640 px) and DeepLabv3's ASPP.
HELD_OUT_2 = [
    Layer("mnv3_large dw5x5", 120, 28, 120, 5, groups=120),
    Layer("mnv3_large dw5x5 s2", 672, 14, 672, 5, stride=2, groups=672),
    Layer("mnv3_large dw3x3 s2", 240, 28, 240, 3, stride=2, groups=240),
    Layer("resnext50 g3x3", 256, 28, 256, 3, groups=32),
    Layer("regnety_1_6gf g3x3", 120, 28, 120, 3, groups=5),
    Layer("densenet121 3x3", 128, 56, 32, 3),
    Layer("inception_v3 5x5", 48, 35, 64, 5),
    Layer("convnext_t 2x2 s2", 96, 56, 192, 2, stride=2),
    Layer("effnetv2_s 3x3 s2", 24, 112, 96, 3, stride=2),
    Layer("yolov5s 3x3 s2", 64, 160, 128, 3, stride=2),
    Layer("deeplabv3 aspp 3x3 d12", 2048, 28, 256, 3, dilation=12),
    Layer("resnet152 1x1", 1024, 14, 256, 1),
]  # fmt: skip


def _grouped(networks: dict[str, list[tuple[int, int, int, int, int]]]) -> list[Layer]:
    """Grouped 3x3 convs, channels kept, from (channels, size, stride, groups, count) a network."""
    return [
        Layer(f"{net} g{c}/{groups} {hw}px s{stride}", c, hw, c, 3, stride=stride,
              groups=groups, count=count)
        for net, layers in networks.items()
        for c, hw, stride, groups, count in layers
    ]  # fmt: skip


# Grouped 3x3 convs (neither one group nor depthwise), every distinct one of five networks
# (torchvision, 224 px, read by forward hooks; 2026-12-01, issue 63): the direct kernel's starts
# were picked with none. ``grouped`` to pick from: ResNeXt-50 32x4d (4 channels a group),
# RegNetX-400MF and RegNetY-800MF (16); ``grouped_held``, not for picking: RegNetY-400MF (8)
# and RegNetX-1.6GF (24).
GROUPED = _grouped({
    "resnext50": [(128, 56, 1, 32, 3), (256, 56, 2, 32, 1), (256, 28, 1, 32, 3),
                  (512, 28, 2, 32, 1), (512, 14, 1, 32, 5), (1024, 14, 2, 32, 1),
                  (1024, 7, 1, 32, 2)],
    "regnetx_400mf": [(32, 112, 2, 2, 1), (64, 56, 2, 4, 1), (64, 28, 1, 4, 1),
                      (160, 28, 2, 10, 1), (160, 14, 1, 10, 6), (400, 14, 2, 25, 1),
                      (400, 7, 1, 25, 11)],
    "regnety_800mf": [(64, 112, 2, 4, 1), (144, 56, 2, 9, 1), (144, 28, 1, 9, 2),
                      (320, 28, 2, 20, 1), (320, 14, 1, 20, 7), (784, 14, 2, 49, 1),
                      (784, 7, 1, 49, 1)],
})  # fmt: skip
GROUPED_HELD = _grouped({
    "regnety_400mf": [(48, 112, 2, 6, 1), (104, 56, 2, 13, 1), (104, 28, 1, 13, 2),
                      (208, 28, 2, 26, 1), (208, 14, 1, 26, 5), (440, 14, 2, 55, 1),
                      (440, 7, 1, 55, 5)],
    "regnetx_1_6gf": [(72, 112, 2, 3, 1), (72, 56, 1, 3, 1), (168, 56, 2, 7, 1),
                      (168, 28, 1, 7, 3), (408, 28, 2, 17, 1), (408, 14, 1, 17, 9),
                      (912, 14, 2, 38, 1), (912, 7, 1, 38, 1)],
})  # fmt: skip

NETWORKS = {name: partial(_network, name) for name in ("resnet50", "mobilenet_v1")}
NETWORKS["held_out"] = lambda: HELD_OUT
NETWORKS["held_out_2"] = lambda: HELD_OUT_2
NETWORKS["grouped"] = lambda: GROUPED
NETWORKS["grouped_held"] = lambda: GROUPED_HELD


# --- tuning cost ------------------------------------------------------------------------------


def to_reach(traces: list[dict[str, object]], target_s: float) -> tuple[int | None, float | None]:
    """Candidates and seconds (over the layer's kernels, in the order tuned) until the best so
    far was within 95 % of ``target_s``; None if never.
    """
    spent_candidates, spent_seconds = 0, 0.0
    for entry in traces:
        trace = entry["trace"]
        assert isinstance(trace, list)
        for tried, elapsed, best in trace:
            if best * 0.95 <= target_s:
                return spent_candidates + tried, spent_seconds + elapsed
        tried_all = entry["tried"]
        assert isinstance(tried_all, int)
        spent_candidates += tried_all
        spent_seconds += trace[-1][1] if trace else 0.0
    return None, None


# --- the run -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nets", nargs="+", choices=sorted(NETWORKS), default=sorted(NETWORKS))
    parser.add_argument("--seconds", type=float, default=20.0, help="tuning time per layer")
    parser.add_argument("--db", default="sqlite:///conv_layers.db", help="model strategy's")
    parser.add_argument("--random", action="store_true", help="also tune with random search")
    parser.add_argument("--no-tune", action="store_true", help="only time what --db holds")
    parser.add_argument("--layers", type=int, default=None, help="first N layers of each net")
    parser.add_argument("--names", nargs="+", default=None,
                        help="only the layers whose name contains one of these")  # fmt: skip
    parser.add_argument("--kernels", nargs="+", default=None, help="tune only these kernels")
    parser.add_argument("--confirm", type=int, default=2, help="top candidates re-measured")
    parser.add_argument("--device", default=None)
    parser.add_argument("--nhwc", action="store_true", help="NHWC layers (cuDNN channels_last)")
    parser.add_argument("--batch", type=int, default=1, help="every layer at this batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("conv_layers.json"))
    args = parser.parse_args()

    device = select_device(args.device)
    info = DeviceInfo.from_cl(device)
    anchor_name, anchor = vendor_anchor(device, "conv2d")
    settings = Settings(jobs=default_jobs(device), confirm=args.confirm)
    store = Store(args.db)
    random_store = Store(args.db.replace(".db", "_random.db")) if args.random else None
    print(f"device: {info.name}; anchor: {anchor_name}; {args.seconds:g} s per layer", flush=True)
    workers = open_workers(info, settings)  # one set of processes for every layer and kernel

    rows = []
    for net in args.nets:
        layers = [
            replace(layer, nhwc=int(args.nhwc), n=args.batch)
            for layer in NETWORKS[net]()[: args.layers]
            if args.names is None or any(name in layer.name for name in args.names)
        ]
        for layer in layers:
            row: dict[str, object] = {"net": net, **layer.__dict__, "flops": layer.workload().flops}
            if not args.no_tune:
                started = time.perf_counter()
                row["model"] = tune_workload(
                    store, info, layer.workload(), args.seconds, "model", settings, args.seed,
                    args.kernels, workers,
                )  # fmt: skip
                row["tune_s"] = time.perf_counter() - started
                if random_store is not None:
                    row["random"] = tune_workload(
                        random_store, info, layer.workload(), args.seconds, "random", settings,
                        args.seed, args.kernels, workers,
                    )  # fmt: skip
            timed = stored_timings(store, device, info, layer.workload())
            row["kernels"] = {entry.kernel.name: entry.seconds for entry in timed}
            found = timed[0] if timed else None
            if found is None:
                print(f"{net} {layer.name}: nothing verified", flush=True)
                rows.append(row)
                continue
            seconds, kernel, config = found.seconds, found.kernel, found.config
            row |= {"octune_s": seconds, "kernel": kernel.name, "config": config}
            if random_store is not None:
                other = fastest_stored(random_store, device, info, layer.workload())
                row["random_s"] = other.seconds if other else None
            row["anchor_s"] = anchor(layer.workload())
            rows.append(row)
            print(
                f"{net:13s} {layer.name:22s} x{layer.count} {kernel.name:17s} "
                f"{seconds * 1e6:9.1f} us  {anchor_name} {row['anchor_s'] * 1e6:9.1f} us  "
                f"ratio {row['anchor_s'] / seconds:5.2f}  ("
                + ", ".join(f"{name} {s * 1e6:.1f}" for name, s in row["kernels"].items())
                + ")",
                flush=True,
            )
            args.out.write_text(json.dumps({"device": info.name, "anchor": anchor_name,
                                            "seconds_per_layer": args.seconds, "rows": rows},
                                           indent=1))  # fmt: skip
    workers.close()
    report(rows, anchor_name, args.random)


def report(rows: list[dict[str, object]], anchor_name: str, with_random: bool) -> None:
    """Per-layer and per-network tables, in markdown."""
    print(f"\n| net | layer | x | kernel | octune us | {anchor_name} us | {anchor_name}/octune |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    sums: dict[str, list[float]] = {}
    for row in rows:
        if "octune_s" not in row:
            print(f"| {row['net']} | {row['name']} | {row['count']} | none verified | | | |")
            continue
        ours, theirs, count = row["octune_s"], row["anchor_s"], row["count"]
        assert isinstance(ours, float) and isinstance(theirs, float) and isinstance(count, int)
        print(
            f"| {row['net']} | {row['name']} | {count} | {row['kernel']} | {ours * 1e6:.1f} | "
            f"{theirs * 1e6:.1f} | {theirs / ours:.2f} |"
        )
        for key in (str(row["net"]), f"{row['net']} depthwise" if row["groups"] != 1 else ""):
            if key:
                total = sums.setdefault(key, [0.0, 0.0])
                total[0] += count * ours
                total[1] += count * theirs
    print(f"\n| net (x count) | octune ms | {anchor_name} ms | octune / {anchor_name} |")
    print("| --- | --- | --- | --- |")
    for key, (ours, theirs) in sums.items():
        print(f"| {key} | {ours * 1e3:.3f} | {theirs * 1e3:.3f} | {ours / theirs:.2f} |")
    if with_random:
        print("\n| layer | model: candidates, s to 95 % | random: candidates, s to 95 % |")
        print("| --- | --- | --- |")
        for row in rows:
            if "model" not in row or "random" not in row:
                continue
            finals = [
                point[2]
                for strategy in ("model", "random")
                for entry in row[strategy]  # type: ignore[union-attr]
                for point in entry["trace"][-1:]
            ]
            if not finals:
                continue
            target = min(finals)
            cells = []
            for strategy in ("model", "random"):
                count, seconds = to_reach(row[strategy], target)  # type: ignore[arg-type]
                cells.append("not reached" if count is None else f"{count}, {seconds:.0f} s")
            print(f"| {row['net']} {row['name']} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
