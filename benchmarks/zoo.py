"""Real models as exporters write them (issue 44): coverage, then side by side.

The models are the files ``benchmarks/zoo_export.py`` writes (its ``manifest.json``):
torchvision's classification and segmentation models and transformer encoders, through
PyTorch's TorchScript and dynamo exporters, at opsets 11, 17 and 20, with dynamic batches and
external data.

Coverage: each file loaded and normalised as ``octune run`` loads it, then read into the
runtime's steps; what could not be taken is listed (operator, node, reason). No device needed:

    .venv/bin/python benchmarks/zoo.py --zoo /work/zoo --coverage --out coverage.json

Side by side, per model: imports / runs as exported / agrees layer by layer with onnxruntime /
tuned ms / default ms / reference ms. ``--tune-minutes`` first tunes each model with
``octune tune --model FILE --time M`` into ``--db`` (one run per model, the database carried
over), then measures under each policy of ``--policies`` (``default``, ``tuned``; ``confirmed``
times each untuned layer's answers at load): wall time of a forward pass
enqueued back to back with one finish (best of ``--repeat``), and the launch count. The
reference is onnxruntime's CPU provider on the same file, or with ``--torch`` the model rebuilt
by ``lib.zoo_models.build`` in PyTorch (eval, float32, TF32 off, cuDNN benchmark mode), timed as a
CUDA graph of 20 back-to-back passes (``lib.cuda.cuda_graph_seconds``):

    .venv/bin/python benchmarks/zoo.py --zoo /work/zoo --models resnet18 mobilenet_v2 \\
        --tune-minutes 4 --db sqlite:////tmp/zoo.db --out cpu.json
    benchmarks/device_run.sh python3 benchmarks/zoo.py --zoo $OUT/zoo --device NVIDIA \\
        --models resnet18 mobilenet_v2 --tune-minutes 2 --torch --db sqlite:///$OUT/zoo.db \\
        --out $OUT/gpu.json

``--batch N`` runs, tunes and times the files exported with a dynamic batch at N (throughput
batches; ``zoo_export.py`` writes ``NAME.dynamic.onnx`` for the static ResNet-50 and ViT-B/16).
``--profile`` adds where the time goes: octune's profiled kernel time per operator and its
costliest layers, and with ``--torch`` PyTorch's CUDA kernels by name (``torch.profiler``, eager).
``--before`` also times each policy before tuning: what the database's answers for shapes it
was never tuned on (another batch) are worth against the tuned ones.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import onnx

from octune.core.errors import OctuneError
from octune.networks.layers import load_model
from octune.runtime.onnx_loader import load_graph


def manifest(zoo: Path, names: list[str] | None) -> list[dict[str, Any]]:
    """The exported files (stems as ``names`` picks them), in the manifest's order."""
    entries = [e for e in json.loads((zoo / "manifest.json").read_text()) if not e["error"]]
    if names:
        entries = [e for e in entries if e["file"].removesuffix(".onnx") in names]
    return entries


def load(zoo: Path, entry: dict[str, Any], batch: int = 1) -> onnx.ModelProto:
    """As ``octune run`` loads it, at ``batch`` (a file exported with a fixed batch of 1 only
    at 1).
    """
    if not entry["dynamic_batch"] and batch != 1:
        raise OctuneError(f"{entry['file']} was exported with a fixed batch; --batch 1 only")
    return load_model(zoo / entry["file"], batch=batch if entry["dynamic_batch"] else None)


def coverage(zoo: Path, entry: dict[str, Any]) -> dict[str, Any]:
    raw = onnx.load(zoo / entry["file"], load_external_data=False)
    opset = next(o.version for o in raw.opset_import if o.domain in ("", "ai.onnx"))
    row: dict[str, Any] = {
        "file": entry["file"],
        "exporter": entry["exporter"],
        "opset": opset,
        "nodes_exported": len(raw.graph.node),
    }
    started = time.perf_counter()
    try:
        model = load(zoo, entry)
        row["nodes_normalised"] = len(model.graph.node)
        row["load_s"] = round(time.perf_counter() - started, 2)
        row["steps"] = len(load_graph(model).steps)
    except OctuneError as error:
        row["refused"] = str(error)
    return row


def _runtime_row(model: onnx.ModelProto, device: Any, source: Any, policy: str, repeat: int,
                 fuse: bool | None = None, profile: bool = False) -> dict[str, Any]:  # fmt: skip
    from octune.runtime.executor import Runtime
    from octune.runtime.verify import check, random_inputs

    runtime = Runtime(model, device, source, policy, fuse=fuse)  # type: ignore[arg-type]
    outputs = check(runtime, random_inputs(runtime))
    timing = runtime.time(repeat)
    row = {
        "ms": timing.wall_s * 1e3,
        "kernel_ms": timing.total_kernel_s * 1e3,
        "launches": runtime.launches,
        "agrees": all(c.ratio < 1 for c in outputs),
        "max_ratio": max(c.ratio for c in outputs),
        "output_depends_on_input": all(c.depends_on_input for c in outputs),
    }
    if profile:
        row["profile"] = _octune_profile(runtime.plan, timing.kernel_s)
    return row


def _octune_profile(plan: Any, kernel_s: tuple[float, ...], top: int = 25) -> dict[str, Any]:
    """Profiled kernel ms per operator (with its launches), and the costliest steps."""
    by_op: dict[str, list[float]] = {}
    steps = []
    for planned, seconds in zip(plan, kernel_s, strict=True):
        if planned.launches:
            total = by_op.setdefault(planned.step.op, [0.0, 0])
            total[0] += seconds * 1e3
            total[1] += len(planned.launches)
            steps.append({"step": planned.step.name, "op": planned.step.op,
                          "kernel": planned.kernel, "match": planned.match,
                          "us": round(seconds * 1e6, 2)})  # fmt: skip
    steps.sort(key=lambda s: -s["us"])
    ops = sorted(by_op.items(), key=lambda kv: -kv[1][0])
    return {"ops": {op: {"ms": round(ms, 4), "launches": n} for op, (ms, n) in ops},
            "steps": steps[:top]}  # fmt: skip


def tune(zoo: Path, entry: dict[str, Any], minutes: float, db: str, device: str | None,
         log: Path, batch: int = 1) -> float:  # fmt: skip
    """``octune tune --model`` for ``minutes``; its wall seconds. Not ``--resume``: one database
    serves the whole zoo, and a resume counts what earlier networks' sessions spent on the
    shapes they share with this one against its minutes (FCN-ResNet50 after ResNet-50 had
    none left for its own layers).
    """
    command = [sys.executable, "-c", "from octune.cli import main; main()", "tune",
               "--model", str(zoo / entry["file"]), "--time", f"{minutes * 60:.0f}s",
               "--db", db]  # fmt: skip
    if entry["dynamic_batch"]:
        command += ["--batch", str(batch)]
    if device:
        command += ["--device", device]
    started = time.perf_counter()
    with log.open("a") as out:
        subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
    return time.perf_counter() - started


def torch_model(entry: dict[str, Any], batch: int = 1) -> tuple[Any, Any]:
    """The model in PyTorch on CUDA (eval, float32, TF32 off, cuDNN benchmark mode) and an
    input batch for it.
    """
    import torch
    from lib.zoo_models import MODELS, build

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    spec = next(m for m in MODELS if m.name == entry["model"])
    net = build(spec).eval().cuda()
    return net, torch.randn(batch, *spec.input_shape[1:], device="cuda")


def torch_ms(net: Any, x: Any) -> float:
    """``torch_model``'s model as a CUDA graph of back-to-back passes."""
    import torch
    from lib.cuda import cuda_graph_seconds

    with torch.no_grad():
        return cuda_graph_seconds(lambda: net(x)) * 1e3


def torch_profile(net: Any, x: Any, passes: int = 5) -> list[dict[str, Any]]:
    """PyTorch's CUDA kernels of a forward pass, eager (a graph hides them from the profiler):
    per kernel name the GPU ms and calls a pass, costliest first.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        for _ in range(3):
            net(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(passes):
                net(x)
            torch.cuda.synchronize()
    rows = []
    for event in prof.key_averages():
        us = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
        if us:
            rows.append({"kernel": event.key[:160], "ms": round(us / passes / 1e3, 4),
                         "calls": event.count / passes})  # fmt: skip
    return sorted(rows, key=lambda r: -r["ms"])


def side_by_side(zoo: Path, entry: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    from octune.db.store import Store
    from octune.runtime.config_sources import StoreConfigs
    from octune.runtime.verify import onnxruntime_seconds, random_inputs
    from octune.tuner.device import DeviceInfo, select_device

    row: dict[str, Any] = {"file": entry["file"], "batch": args.batch}
    try:
        model = load(zoo, entry, args.batch)
    except OctuneError as error:
        return {**row, "imports": False, "refused": str(error)}
    row["imports"] = True
    device = select_device(args.device)
    info = DeviceInfo.from_cl(device)
    row["device"] = info.name
    try:
        if "default" in args.policies or not args.db:
            row["default"] = _runtime_row(model, device, None, "default", args.repeat)
        if args.db:
            if args.tune_minutes and args.before:  # the database's answers before tuning
                source = StoreConfigs(Store(args.db), info)
                for policy in [p for p in args.policies if p != "default"]:
                    row[f"{policy}_before"] = _runtime_row(model, device, source, policy,
                                                           args.repeat)  # fmt: skip
            if args.tune_minutes:
                log = Path(args.out).with_suffix(".tune.log")
                row["tune_s"] = tune(
                    zoo, entry, args.tune_minutes, args.db, args.device, log, args.batch
                )
            source = StoreConfigs(Store(args.db), info)
            for policy in [p for p in args.policies if p != "default"]:
                row[policy] = _runtime_row(
                    model, device, source, policy, args.repeat, profile=args.profile
                )
                if args.unfused:
                    row[f"{policy}_unfused"] = _runtime_row(
                        model,
                        device,
                        source,
                        policy,
                        args.repeat,
                        fuse=False,
                        profile=args.profile,
                    )
    except OctuneError as error:
        row["refused"] = str(error)
        return row
    if args.torch:
        net, x = torch_model(entry, args.batch)
        row["reference"], row["reference_ms"] = "PyTorch CUDA graph", torch_ms(net, x)
        if args.profile:
            try:  # the timings above stay recorded when the profiler fails
                row["reference_profile"] = torch_profile(net, x)
            except Exception as error:
                row["reference_profile"] = f"failed: {error!r}"[:300]
    else:
        from octune.runtime.executor import Runtime

        inputs = random_inputs(Runtime(model, device))
        row["reference"] = "onnxruntime CPU"
        row["reference_ms"] = onnxruntime_seconds(model, inputs, args.repeat) * 1e3
    return row


def report(rows: list[dict[str, Any]], policies: list[str]) -> None:
    """A line per model: each policy's wall ms beside the reference, and the geometric mean of
    the first policy's ratio to it.
    """
    print(f"{'model':34} {'agrees':>6} {'default ms':>10} "
          + " ".join(f"{p + ' ms':>12}" for p in policies)
          + f" {'ref ms':>8} {policies[0] + '/ref':>12} {'launches':>8}")  # fmt: skip
    ratios = []
    for row in rows:
        measured = [row[key] for key in ("default", *policies) if key in row]
        agrees = bool(measured) and all(r["agrees"] for r in measured)
        first = row.get(policies[0])
        ratio = first["ms"] / row["reference_ms"] if first and "reference_ms" in row else None
        if ratio:
            ratios.append(ratio)
        times = " ".join(f"{row.get(p, {}).get('ms', math.nan):12.3f}" for p in policies)
        print(f"{row['file']:34} {agrees!s:>6} {row.get('default', {}).get('ms', math.nan):10.3f} "
              f"{times} {row.get('reference_ms', math.nan):8.3f} {ratio or math.nan:12.2f} "
              f"{(first or row.get('default', {})).get('launches', 0):8}")  # fmt: skip
        if "refused" in row:
            print(f"    refused: {row['refused']}")
    if ratios:
        mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"geometric mean {policies[0]}/reference over {len(ratios)}: {mean:.2f}, "
              f"worst {max(ratios):.2f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--zoo", type=Path, required=True, help="zoo_export.py's --out folder")
    parser.add_argument("--models", nargs="*", help="file stems (default: every file)")
    parser.add_argument("--coverage", action="store_true", help="only load every file")
    parser.add_argument("--device", help="OpenCL device (index or name substring)")
    parser.add_argument("--db", help="database URL of tuned configs (the tuned column)")
    parser.add_argument("--tune-minutes", type=float, default=0.0)
    parser.add_argument("--batch", type=int, default=1, help="of files with a dynamic batch")
    parser.add_argument(
        "--policies",
        nargs="+",
        default=["default", "tuned"],
        help="policies measured (all but default from --db)",
    )
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument(
        "--unfused", action="store_true", help="also each policy with every epilogue unfused"
    )
    parser.add_argument("--torch", action="store_true", help="PyTorch on CUDA as the reference")
    parser.add_argument(
        "--profile", action="store_true", help="also the time per operator and kernel"
    )
    parser.add_argument(
        "--before",
        action="store_true",
        help="with --tune-minutes, also each policy before tuning (as POLICY_before)",
    )
    parser.add_argument("--out", required=True, help="JSON results")
    args = parser.parse_args()
    entries = manifest(args.zoo, args.models)
    rows = []
    for entry in entries:
        row = coverage(args.zoo, entry) if args.coverage else side_by_side(args.zoo, entry, args)
        print(json.dumps(row), flush=True)
        rows.append(row)
        Path(args.out).write_text(json.dumps(rows, indent=1))
    if args.coverage:
        refused = [row for row in rows if "refused" in row]
        print(f"{len(rows) - len(refused)} of {len(rows)} files taken; not taken:")
        for row in refused:
            print(f"  {row['file']}: {row['refused'][:200]}")
    else:
        measured = [p for p in args.policies if p != "default"] if args.db else []
        measured += [f"{p}_unfused" for p in measured] if args.unfused else []
        report(rows, measured or ["default"])


if __name__ == "__main__":
    main()
