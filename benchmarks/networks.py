"""Whole networks at batch 1 (issue 18): end-to-end latency through octune's runtime (what
`octune run` runs) under three config policies side by side, beside a vendor anchor, and the
latency as a tuning budget is spent.

On this machine's CPU (onnxruntime's CPU provider as the anchor), a tiny run:

    .venv/bin/python benchmarks/networks.py --nets squeezenet1.1 --tune-minutes 1 \\
        --checkpoints 2 --repeat 3 --db sqlite:////tmp/networks.db --out /tmp/networks.json

On the H100 (PyTorch on cuDNN as the anchor): the overnight path, 30 minutes per network, then
all three networks measured on what the database holds:

    benchmarks/device_run.sh python3 benchmarks/networks.py --device NVIDIA \\
        --nets squeezenet1.1 mobilenet_v1 --tune-minutes 30 --checkpoints 6 \\
        --db sqlite:///$PWD/build/networks.db --out $OUT/tune.json --png $OUT/tune.png
    benchmarks/device_run.sh python3 benchmarks/networks.py --device NVIDIA \\
        --db sqlite:///$PWD/build/networks.db --out $OUT/networks.json

Where one command may run only so long, tune in pieces: one network and a few minutes a
command (``--nets mobilenet_v1 --tune-minutes 8 --checkpoints 2``), the database carried from
one to the next, ``--previous`` the last piece's JSON.

``--tune-minutes`` adds to what ``--db`` holds: each slice of it is ``octune tune --model NET
--time T --resume`` with T the network's tuning time so far plus the slice, so a run cut into
several commands (the same database carried over, ``--previous`` the last run's JSON to continue
its curve) spends its budget as one ``--resume``d run would.

Per network and policy (``tuned``: each layer's answer; ``one-per-device``: the largest tuned
layer's config for every layer its kernel takes; ``default``: octune's untuned defaults), the
runtime is checked against onnxruntime layer by layer, then timed: wall time of a whole forward
pass enqueued back to back with one finish (best of ``--repeat``), the per-kernel profiled time
summed (medians), and the launch count. The GPU anchor is PyTorch in eval mode, float32, TF32
off, ``cudnn.benchmark``: torchvision's SqueezeNet 1.1 and ResNet-50, a hand-written MobileNet
v1 (torchvision has none) whose conv and linear shapes are checked against octune's built-in
ONNX graph before timing; timed as a CUDA graph of ``--calls`` back-to-back forward passes, and
eager: one pass then synchronize (best of repeats, as octune's wall time is taken), and
``--calls`` passes back to back then synchronize, per pass. The CPU anchor is
onnxruntime's CPU provider on the same ONNX model. Tuning output goes to a log beside ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, cast

import onnx
import pyopencl as cl
from lib.cuda import cuda_graph_seconds

from octune.cli.run import _payload
from octune.core.errors import OctuneError
from octune.db.store import Store
from octune.networks.builtin import BUILTIN
from octune.networks.layers import load_model, node_layers
from octune.networks.workloads import network_layers, network_tasks
from octune.runtime.config_sources import POLICIES, Policy, StoreConfigs
from octune.runtime.executor import Runtime
from octune.runtime.steps import Tuned
from octune.runtime.verify import check, onnxruntime_seconds, random_inputs
from octune.tuner.campaign import Task
from octune.tuner.device import DeviceInfo, list_devices, require_compiling, select_device

#: MobileNet v1's (output channels, stride) per depthwise + pointwise pair, as octune builds it
#: (networks/builtin.py); the PyTorch copy is checked against octune's graph before it is timed.
MOBILENET_V1_PLAN = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *((512, 1),) * 5,
                     (1024, 2), (1024, 1))  # fmt: skip
#: torchvision's constructors for octune's built-ins that have one (weights: random init).
TORCHVISION = {"squeezenet1.1": "squeezenet1_1", "resnet18": "resnet18", "resnet50": "resnet50",
               "mobilenet_v2": "mobilenet_v2"}  # fmt: skip


# --- octune's runtime --------------------------------------------------------------------------


def measure(
    net: str,
    network: onnx.ModelProto,
    device: cl.Device,
    info: DeviceInfo,
    db: str,
    policy: Policy,
    repeat: int,
    seed: int,
    reference_s: float | None,
) -> dict[str, Any]:
    """One policy's run as `octune run --json` writes it, plus each layer's flops and least
    memory traffic; onnxruntime is timed only when ``reference_s`` is None. A build failure or
    a divergence from onnxruntime is recorded as the policy's error, not raised.
    """
    store = Store(db)
    source = None if policy == "default" else StoreConfigs(store, info)
    where = "octune's defaults" if source is None else source.where
    try:
        started = time.perf_counter()
        runtime = Runtime(network, device, source, policy)
        load_s = time.perf_counter() - started
        inputs = random_inputs(runtime, seed)
        outputs = check(runtime, inputs)
        timing = runtime.time(repeat)
        if reference_s is None:
            reference_s = onnxruntime_seconds(network, inputs, repeat)
    except OctuneError as error:
        return {"model": net, "configs": policy, "error": str(error)}
    finally:
        store.close()
    payload = _payload(net, info, policy, where, runtime, timing, outputs, reference_s)
    planned = [p for p in runtime.plan if p.launches]
    for entry, step in zip(cast("list[dict[str, Any]]", payload["layers"]), planned, strict=True):
        entry["flops"] = step_flops(step.step)
        entry["bytes"] = step_bytes(runtime, step.step)
    tuned = [p.match for p in runtime.plan if isinstance(p.step, Tuned)]
    payload["matches"] = dict(Counter(tuned))
    payload["load_s"] = load_s  # lookups, builds, and for ``confirmed`` its first-use runs
    return payload


def step_flops(step: Any) -> int:
    """A tuned step's flops per forward pass (0 for the runtime's own kernels)."""
    return step.layer.workload().flops * step.layer.count if isinstance(step, Tuned) else 0


def step_bytes(runtime: Runtime, step: Any) -> int:
    """Bytes a step must move at least: every tensor it reads (weights too) and its output once."""
    graph = runtime.graph
    names = dict.fromkeys([*step.reads, step.output])
    sizes = (
        graph.constants[name].size if name in graph.constants else math.prod(graph.shapes[name])
        for name in names
    )
    return 4 * sum(sizes)


# --- tuning in slices --------------------------------------------------------------------------


def device_index(info: DeviceInfo) -> str:
    """The `--device` index `octune tune` gives this device (a fingerprint could be all digits)."""
    for index, device in enumerate(list_devices()):
        if DeviceInfo.from_cl(device).fingerprint == info.fingerprint:
            return str(index)
    raise OctuneError(f"{info.name} is no longer listed by `octune devices`")


def search_seconds(store: Store, info: DeviceInfo, tasks: list[Task]) -> float:
    """The network's tuning time in the database, as `octune tune --resume` counts it."""
    device_id = store.device_id(info)
    total = 0.0
    for task in tasks:
        kernel, workload = task.kernel, task.workload
        kernel_id = store.kernel_version_id(
            kernel.name, kernel.sha256, kernel.source, kernel.space.source_text
        )
        workload_id = store.workload_id(
            workload.problem, workload.key, workload.shape, workload.dtype
        )
        total += store.search_seconds(device_id, kernel_id, workload_id)
    return total


def tune_slice(net: str, device: str, db: str, seconds: float, seed: int, log: Path) -> str | None:
    """`octune tune --model NET --time SECONDS --resume`, its output appended to ``log``; the
    error it ended with, if any (what it tuned is stored either way).
    """
    from octune.cli import app

    argv = ["tune", "--model", net, "--device", device, "--db", db, "--time", f"{seconds:.1f}s",
            "--resume", "--seed", str(seed)]  # fmt: skip
    with log.open("a") as stream, redirect_stdout(stream), redirect_stderr(stream):
        print(f"\n$ octune {' '.join(argv)}", flush=True)
        try:
            code = app(argv, standalone_mode=False)
        except OctuneError as error:
            print(f"error: {error}")
            return str(error)
    if code == 130:
        raise KeyboardInterrupt
    return None


def tune_network(
    net: str,
    network: onnx.ModelProto,
    device: cl.Device,
    info: DeviceInfo,
    args: argparse.Namespace,
    earlier: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Tune in ``--checkpoints`` equal slices of ``--tune-minutes``; after each, and once before,
    the tuned policy's latency. ``minutes``: this run's wall time tuning, after the minutes of
    ``earlier`` points (a previous run's curve) or else the database's own count.
    """
    tasks = network_tasks(network_layers(net, None, {})[0])
    store = Store(args.db)
    index = device_index(info)
    before_s = search_seconds(store, info, tasks)
    offset_min = earlier[-1]["minutes"] if earlier else before_s / 60
    slice_s = 60 * args.tune_minutes / args.checkpoints
    curve = list(earlier[:-1])  # the last one is the state this run starts from: re-measured
    wall_s, error = 0.0, None
    for k in range(args.checkpoints + 1):
        if k:
            started = time.perf_counter()
            error = tune_slice(net, index, args.db, before_s + k * slice_s, args.seed, args.log)
            wall_s += time.perf_counter() - started
        run = measure(net, network, device, info, args.db, "tuned", args.repeat, args.seed, 0.0)
        point = {
            "minutes": offset_min + wall_s / 60,
            "search_minutes": search_seconds(store, info, tasks) / 60,
            "budget_minutes": (before_s + k * slice_s) / 60,
            "wall_s": run.get("wall_s"),
            "kernel_s": run.get("kernel_s"),
            "launches": run.get("launches"),
            "exact": (run.get("matches") or {}).get("exact", 0),
            "tuned_steps": sum((run.get("matches") or {}).values()),
            "error": run.get("error"),
            "tune_error": error,
        }
        curve.append(point)
        print(f"{net}: {curve_line(point)}", flush=True)
    store.close()
    return curve


def curve_line(point: dict[str, Any]) -> str:
    latency = (
        f"wall {point['wall_s'] * 1e3:.3f} ms, kernels {point['kernel_s'] * 1e3:.3f} ms"
        if point["wall_s"] is not None
        else f"no latency: {point['error']}"
    )
    tuned = f"{point['exact']}/{point['tuned_steps']} layers tuned exactly"
    note = f"; tuning ended with: {point['tune_error']}" if point["tune_error"] else ""
    return f"after {point['minutes']:.2f} min of tuning: {latency}, {tuned}{note}"


# --- the PyTorch anchor ------------------------------------------------------------------------


def torch_model(net: str) -> Any:
    """PyTorch's counterpart of octune's built-in network, random weights, eval mode."""
    import torch

    if net == "mobilenet_v1":
        nn = torch.nn

        def conv_bn(c_in: int, c_out: int, kernel: int, stride: int, groups: int = 1) -> list:
            conv = nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False)
            return [conv, nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]

        layers, c = conv_bn(3, 32, 3, 2), 32
        for c_out, stride in MOBILENET_V1_PLAN:
            layers += conv_bn(c, c, 3, stride, groups=c) + conv_bn(c, c_out, 1, 1)
            c = c_out
        layers += [nn.AvgPool2d(7), nn.Flatten(), nn.Linear(1024, 1000)]
        return nn.Sequential(*layers).eval()
    if net not in TORCHVISION:
        raise LookupError(f"no PyTorch counterpart of {net}")
    import torchvision

    return getattr(torchvision.models, TORCHVISION[net])(weights=None).eval()


def onnx_shapes(network: onnx.ModelProto) -> Counter[tuple[Any, ...]]:
    """octune's conv and linear layers as comparable tuples."""
    shapes: Counter[tuple[Any, ...]] = Counter()
    for layer in node_layers(network)[0].values():
        s = layer.shape
        if layer.family == "conv2d":
            key = ("conv2d", s["c"], s["h"], s["w"], s["k"], s["r"], s["s"], s["stride"],
                   s["pad"], s["groups"])  # fmt: skip
        else:
            key = ("gemm", s["m"], s["k"], s["n"])
        shapes[key] += layer.count
    return shapes


def torch_shapes(model: Any, x: Any) -> Counter[tuple[Any, ...]]:
    """The conv and linear layers one forward pass of the PyTorch model runs, as tuples."""
    import torch

    shapes: Counter[tuple[Any, ...]] = Counter()

    def record(module: Any, inputs: tuple, _: Any) -> None:
        shape = tuple(inputs[0].shape)
        if isinstance(module, torch.nn.Conv2d):
            shapes["conv2d", *shape[1:], module.out_channels, *module.kernel_size,
                   module.stride[0], module.padding[0], module.groups] += 1  # fmt: skip
        else:
            shapes["gemm", math.prod(shape[:-1]), module.in_features, module.out_features] += 1

    kinds = (torch.nn.Conv2d, torch.nn.Linear)
    hooks = [m.register_forward_hook(record) for m in model.modules() if isinstance(m, kinds)]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return shapes


def check_shapes(net: str, model: Any, x: Any, network: onnx.ModelProto) -> None:
    """Refuse to time a PyTorch model whose layers are not octune's."""
    ours, theirs = onnx_shapes(network), torch_shapes(model, x)
    if ours != theirs:
        raise ValueError(
            f"PyTorch's {net} is not octune's: only in PyTorch {dict(theirs - ours)}; "
            f"only in octune {dict(ours - theirs)}"
        )


def input_shape(network: onnx.ModelProto) -> tuple[int, ...]:
    weights = {tensor.name for tensor in network.graph.initializer}
    value = next(v for v in network.graph.input if v.name not in weights)
    return tuple(d.dim_value for d in value.type.tensor_type.shape.dim)


def torch_seconds(net: str, network: onnx.ModelProto, repeat: int, calls: int) -> dict[str, Any]:
    """PyTorch on cuDNN (float32, TF32 off, benchmark mode): seconds per forward pass as a CUDA
    graph of ``calls`` back-to-back passes (best replay); eager, one pass then synchronize (best),
    and ``calls`` passes back to back (best, per pass).
    """
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("PyTorch sees no CUDA device")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    model = torch_model(net).cuda()
    x = torch.randn(*input_shape(network), device="cuda")
    check_shapes(net, model, x, network)
    with torch.no_grad():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(5):  # cudnn.benchmark picks its algorithms here
                model(x)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        eager = math.inf
        for _ in range(max(repeat, 3)):
            started = time.perf_counter()
            model(x)
            torch.cuda.synchronize()
            eager = min(eager, time.perf_counter() - started)
        back_to_back = math.inf
        for _ in range(max(repeat // 4, 3)):
            started = time.perf_counter()
            for _ in range(calls):
                model(x)
            torch.cuda.synchronize()
            back_to_back = min(back_to_back, (time.perf_counter() - started) / calls)
        replayed = cuda_graph_seconds(lambda: model(x), calls, max(repeat, 3), reduce=min)
    return {"pytorch_graph_s": replayed, "pytorch_eager_s": eager,
            "pytorch_eager_back_to_back_s": back_to_back, "calls": calls,
            "torch": torch.__version__, "cudnn": torch.backends.cudnn.version()}  # fmt: skip


# --- report ------------------------------------------------------------------------------------


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}"


def anchor_of(result: dict[str, Any], gpu: bool) -> tuple[str, float | None]:
    """The network's anchor: PyTorch's CUDA graph on a GPU (if it ran), else onnxruntime."""
    graph_s = result.get("anchor", {}).get("pytorch_graph_s")
    if gpu and graph_s is not None:
        return "PyTorch cuDNN (CUDA graph)", graph_s
    return "onnxruntime CPU", result.get("onnxruntime_s")


def report(results: dict[str, dict[str, Any]], gpu: bool) -> None:
    """Markdown: per network the policies beside the anchors, where the tuned run's time goes,
    its top 10 layers, and the tuning curve.
    """
    for net, result in results.items():
        runs = result["policies"]
        tuned_s = runs.get("tuned", {}).get("wall_s")
        anchor_name, anchor_s = anchor_of(result, gpu)
        print(f"\n### {net} on {result['device']} (anchor: {anchor_name})\n")
        print("| policy | wall ms | kernels ms | launches | wall / tuned | wall / anchor |")
        print("| --- | --- | --- | --- | --- | --- |")
        for policy in POLICIES:
            run = runs.get(policy, {})
            if "error" in run:
                print(f"| {policy} | failed: {run['error'][:120]} | | | | |")
                continue
            wall = run.get("wall_s")
            print(f"| {policy} | {ms(wall)} | {ms(run.get('kernel_s'))} | {run.get('launches')} "
                  f"| {ratio(wall, tuned_s)} | {ratio(wall, anchor_s)} |")  # fmt: skip
        anchors = [("onnxruntime CPU", result.get("onnxruntime_s"))]
        anchor = result.get("anchor", {})
        if "pytorch_graph_s" in anchor:
            anchors = [("PyTorch cuDNN (CUDA graph)", anchor["pytorch_graph_s"]),
                       ("PyTorch cuDNN (eager, one pass)", anchor["pytorch_eager_s"]),
                       ("PyTorch cuDNN (eager, back to back)",
                        anchor["pytorch_eager_back_to_back_s"]), *anchors]  # fmt: skip
        for name, seconds in anchors:
            print(f"| {name} | {ms(seconds)} | | | {ratio(seconds, tuned_s)} "
                  f"| {ratio(seconds, anchor_s)} |")  # fmt: skip
        if "error" in anchor:
            print(f"\nPyTorch anchor not timed: {anchor['error']}")
        one = runs.get("one-per-device", {}).get("wall_s")
        if tuned_s and one:
            print(f"\none config per device / tuned = {one / tuned_s:.2f} (target >= 2); "
                  f"tuned / anchor = {ratio(tuned_s, anchor_s)} (target <= 1.5 on ResNet-50 "
                  "against PyTorch)")  # fmt: skip
        if "layers" in runs.get("tuned", {}):
            breakdown(runs["tuned"])
        if result.get("curve"):
            print("\n| tuning min | search min | tuned wall ms | kernels ms | tuned exactly |")
            print("| --- | --- | --- | --- | --- |")
            for p in result["curve"]:
                print(f"| {p['minutes']:.2f} | {p['search_minutes']:.2f} | {ms(p['wall_s'])} "
                      f"| {ms(p['kernel_s'])} | {p['exact']}/{p['tuned_steps']} |")  # fmt: skip


def breakdown(run: dict[str, Any]) -> None:
    """Where the tuned run's time goes: launch overhead, each kernel, the top 10 layers."""
    layers, wall, kernels = run["layers"], run["wall_s"], run["kernel_s"]
    flops = sum(entry["flops"] for entry in layers)
    traffic = sum(entry["bytes"] for entry in layers)
    print(f"\ntuned: wall - kernels = {(wall - kernels) * 1e3:.3f} ms over {run['launches']} "
          f"launches ({(wall - kernels) / run['launches'] * 1e6:.2f} us each); "
          f"{flops / kernels * 1e-9:,.1f} GFLOP/s and at least {traffic / kernels * 1e-9:,.2f} "
          f"GB/s over the kernels' time")  # fmt: skip
    by_kernel: dict[str, list[float]] = {}
    for entry in layers:
        found = by_kernel.setdefault(entry["kernel"], [0, 0.0])
        found[0] += entry["launches"]
        found[1] += entry["kernel_s"]
    print("\n| kernel | launches | ms | share |")
    print("| --- | --- | --- | --- |")
    for name, (count, seconds) in sorted(by_kernel.items(), key=lambda item: -item[1][1]):
        print(f"| {name} | {count} | {seconds * 1e3:.3f} | {100 * seconds / kernels:.1f}% |")
    print("\n| layer | op | kernel | match | us | share | GFLOP/s | GB/s (least) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for entry in sorted(layers, key=lambda e: -e["kernel_s"])[:10]:
        seconds = entry["kernel_s"] or math.nan
        gflops = f"{entry['flops'] / seconds * 1e-9:,.1f}" if entry["flops"] else "-"
        print(f"| {entry['layer']} | {entry['op']} | {entry['kernel']} | {entry['match']} "
              f"| {seconds * 1e6:,.1f} | {100 * seconds / kernels:.1f}% | {gflops} "
              f"| {entry['bytes'] / seconds * 1e-9:,.2f} |")  # fmt: skip


def plot(results: dict[str, dict[str, Any]], gpu: bool, path: Path) -> None:
    """Latency against tuning minutes, one panel per tuned network (needs matplotlib)."""
    curves = {net: r["curve"] for net, r in results.items() if r.get("curve")}
    if not curves:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no {path}; the curve is in the JSON and tables")
        return
    figure, axes = plt.subplots(1, len(curves), figsize=(5 * len(curves), 4), squeeze=False)
    for ax, (net, curve) in zip(axes[0], curves.items(), strict=True):
        points = [p for p in curve if p["wall_s"] is not None]
        minutes = [p["minutes"] for p in points]
        ax.plot(minutes, [p["wall_s"] * 1e3 for p in points], "o-", label="tuned: wall")
        ax.plot(minutes, [p["kernel_s"] * 1e3 for p in points], "s--", label="tuned: kernels")
        name, seconds = anchor_of(results[net], gpu)
        if seconds:
            ax.axhline(seconds * 1e3, color="gray", linestyle=":", label=name)
        ax.set(title=net, xlabel="tuning minutes", ylabel="latency ms (batch 1)", ylim=(0, None))
        ax.legend()
    figure.suptitle(f"Network latency as tuning goes on, {next(iter(results.values()))['device']}")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"wrote {path}")


# --- the run -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Whole networks at batch 1: octune's configs beside a vendor anchor."
    )
    parser.add_argument(
        "--nets", nargs="+", choices=list(BUILTIN), default=["squeezenet1.1", "mobilenet_v1",
        "resnet50"],
    )  # fmt: skip
    parser.add_argument("--device", default=None, help="OpenCL device index or name substring")
    parser.add_argument("--db", default="sqlite:///networks.db", help="tuned configs' database")
    parser.add_argument(
        "--tune-minutes", type=float, default=0.0,
        help="tuning per network, added to what --db holds (0: none)",
    )  # fmt: skip
    parser.add_argument(
        "--checkpoints", type=int, default=4,
        help="slices of the tuning budget, the latency taken after each",
    )  # fmt: skip
    parser.add_argument(
        "--previous", type=Path, default=None,
        help="an earlier run's JSON on the same --db: continue its curves",
    )  # fmt: skip
    parser.add_argument("--repeat", type=int, default=20, help="timed forward passes")
    parser.add_argument("--calls", type=int, default=20, help="passes per PyTorch CUDA graph")
    parser.add_argument("--seed", type=int, default=0, help="of the inputs and the tuning")
    parser.add_argument("--out", type=Path, default=Path("networks.json"))
    parser.add_argument("--png", type=Path, default=None, help="default: --out with .png")
    parser.add_argument("--log", type=Path, default=None, help="default: --out with .tune.log")
    args = parser.parse_args()
    if args.checkpoints < 1 or args.repeat < 1 or args.tune_minutes < 0:
        parser.error("--checkpoints and --repeat are 1 or more, --tune-minutes 0 or more")
    args.log = args.log or args.out.with_suffix(".tune.log")
    previous = json.loads(args.previous.read_text())["networks"] if args.previous else {}
    if args.db.startswith("sqlite:///"):  # SQLite makes the file, not its folder
        Path(args.db.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)

    device = select_device(args.device)
    require_compiling(device)
    info = DeviceInfo.from_cl(device)
    gpu = bool(device.type & cl.device_type.GPU)
    print(f"device: {info.name} ({'GPU' if gpu else 'CPU'}); database {args.db}; "
          f"{args.tune_minutes:g} tuning minutes per network", flush=True)  # fmt: skip
    payload: dict[str, Any] = {
        "device": info.name, "fingerprint": info.fingerprint, "gpu": gpu, "db": args.db,
        "tune_minutes": args.tune_minutes, "checkpoints": args.checkpoints,
        "repeat": args.repeat, "seed": args.seed, "networks": {},
    }  # fmt: skip
    results: dict[str, dict[str, Any]] = payload["networks"]

    def save() -> None:
        args.out.write_text(json.dumps(payload, indent=1))

    for net in args.nets:
        network = load_model(net)
        result: dict[str, Any] = {"device": info.name, "policies": {}}
        results[net] = result
        if args.tune_minutes > 0:
            earlier = previous.get(net, {}).get("curve", [])
            started = time.perf_counter()
            result["curve"] = tune_network(net, network, device, info, args, earlier)
            result["tuning_wall_s"] = time.perf_counter() - started
            save()
        reference_s = None
        for policy in POLICIES:
            run = measure(net, network, device, info, args.db, policy, args.repeat, args.seed,
                          reference_s)  # fmt: skip
            reference_s = reference_s or run.get("onnxruntime_s")
            result["policies"][policy] = run
            shown = run.get("error") or (
                f"wall {ms(run['wall_s'])} ms, kernels {ms(run['kernel_s'])} ms, "
                f"{run['launches']} launches, loaded in {run['load_s']:.1f} s, {run['matches']}"
            )
            print(f"{net} {policy}: {shown}", flush=True)
        result["onnxruntime_s"] = reference_s
        save()
    if gpu:  # after every OpenCL run: PyTorch's CUDA context and allocator come last
        for net in args.nets:
            try:
                results[net]["anchor"] = torch_seconds(
                    net, load_model(net), args.repeat, args.calls
                )
            except Exception as error:  # a missing anchor must not lose the run
                results[net]["anchor"] = {"error": f"{type(error).__name__}: {error}"}
            print(f"{net} PyTorch: {results[net]['anchor']}", flush=True)
        save()
    report(results, gpu)
    plot(results, gpu, args.png or args.out.with_suffix(".png"))
    print(f"\nwrote {args.out}" + (f"; tuning output in {args.log}" if args.tune_minutes else ""))


if __name__ == "__main__":
    try:
        main()
    except OctuneError as error:
        sys.exit(f"error: {error}")
