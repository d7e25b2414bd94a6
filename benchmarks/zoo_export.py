"""Export torchvision classification and segmentation models and transformer encoders with random
weights and calibrated BatchNorm statistics, as users' exporters write them: a zoo of real ONNX
files for testing an ONNX loader.

Each model is built with random weights (``weights=None``). A weight matrix that the model's own
init leaves all zero (ViT's classification head is one) would make the output a constant, so it
is re-drawn from N(0, 0.02^2) and named in the manifest; the layers of the 2-layer
``nn.TransformerEncoder``, deep copies of one layer, are re-initialized one by one so that they
differ. BatchNorm is calibrated: its running
statistics are reset and, with ``momentum=None`` (a cumulative average), filled by a few
training-mode forward passes on ``torch.randn`` batches of two, so that inference-mode BN is a
non-trivial affine map. Then the model is put in eval mode and checked to give different outputs
for two different random inputs.

Files are written exactly as PyTorch writes them: ``torch.onnx.export(..., dynamo=False)`` (the
TorchScript exporter) at opset 17 for every model, about half with a dynamic batch axis;
``dynamo=True`` (default opset, default external-data weights) for a subset, saved as
``<name>.dynamo.onnx``; opset 11 for two models; a dynamic batch too for two of the static ones
(``<name>.dynamic.onnx``); and one model re-saved by
``onnx.save_model(..., save_as_external_data=True)``. Each export runs in a child process under
a time limit (``--timeout``, which covers build, calibration and export); one that fails or runs
over is recorded in ``manifest.json`` with its error and the run goes on.

    /work/torchenv/bin/python benchmarks/zoo_export.py --out /work/zoo
    /work/torchenv/bin/python benchmarks/zoo_export.py --out /work/zoo --only resnet18 vit_b_16
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from lib.zoo_models import IMG, MODELS, SEED, Model, Record, build

CALIBRATION_PASSES = 3
CALIBRATION_BATCH = 2


@dataclass(frozen=True)
class Job:
    """One file to write."""

    file: str
    model: Model
    exporter: str  # torchscript, dynamo, torchscript+external_data
    opset: int | None  # None: the exporter's default


GOOGLENET_INIT = Model("googlenet", IMG, False, {"aux_logits": False, "init_weights": True})
DYNAMO = [
    "resnet18",
    "mobilenet_v2",
    "efficientnet_b0",
    "vit_b_16",
    "bert_layer",
    "transformer_encoder",
]
OPSET11 = ["resnet18", "mobilenet_v2"]
# Models whose default export has a fixed batch, also exported with a dynamic one
# (``NAME.dynamic.onnx``): the throughput batches of ``zoo.py --batch`` and ``cross_batch.py``.
DYNAMIC_TOO = ["resnet50", "vit_b_16", "regnet_x_400mf"]


def all_jobs() -> list[Job]:
    by_name = {m.name: m for m in MODELS}
    jobs = [Job(f"{m.name}.onnx", m, "torchscript", 17) for m in MODELS]
    jobs.append(Job("googlenet.initweights.onnx", GOOGLENET_INIT, "torchscript", 17))
    jobs += [Job(f"{n}.opset11.onnx", by_name[n], "torchscript", 11) for n in OPSET11]
    jobs += [
        Job(f"{n}.dynamic.onnx", replace(by_name[n], dynamic_batch=True), "torchscript", 17)
        for n in DYNAMIC_TOO
    ]
    jobs.append(Job("resnet18.external.onnx", by_name["resnet18"], "torchscript+external_data", 17))
    jobs += [Job(f"{n}.dynamo.onnx", by_name[n], "dynamo", None) for n in DYNAMO]
    return jobs


# --- worker side: everything below runs in the child process -------------------------------


def redraw_zero_weights(net: Any) -> list[str]:
    """Re-draw weight matrices / kernels left all zero by the model's init."""
    import torch

    names = []
    with torch.no_grad():
        for name, p in net.named_parameters():
            if p.dim() >= 2 and not bool(p.any()):
                torch.nn.init.normal_(p, std=0.02)
                names.append(name)
    return names


def calibrate_batchnorm(net: Any, input_shape: tuple[int, ...]) -> None:
    """Fill BN running stats with the cumulative average over a few random batches."""
    import torch

    bns = [m for m in net.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    momenta = [bn.momentum for bn in bns]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    net.train()
    with torch.no_grad():
        for _ in range(CALIBRATION_PASSES):
            net(torch.randn(CALIBRATION_BATCH, *input_shape[1:]))
    for bn, momentum in zip(bns, momenta, strict=True):
        bn.momentum = momentum


def depends_on_input(net: Any, input_shape: tuple[int, ...]) -> tuple[bool, float, list[int]]:
    import torch

    with torch.no_grad():
        a = net(torch.randn(*input_shape))
        b = net(torch.randn(*input_shape))
    diff = float((a - b).abs().max())
    scale = float(torch.maximum(a.abs().max(), b.abs().max()))
    return diff > 1e-6 * max(scale, 1e-30), diff, list(a.shape)


def run_job(job: Job, record: Record, out: Path, threads: int) -> None:
    """Build, calibrate, check and export one file, filling in `record` as it goes."""
    import torch

    torch.set_num_threads(threads)
    model = job.model
    net = build(model)
    record.reinitialized_zero_weights = redraw_zero_weights(net)
    torch.manual_seed(SEED + 1)
    calibrate_batchnorm(net, model.input_shape)
    net.eval()
    ok, diff, shape = depends_on_input(net, model.input_shape)
    record.output_depends_on_input, record.output_max_abs_diff, record.output_shape = (
        ok,
        diff,
        shape,
    )

    x = torch.randn(*model.input_shape)
    path = out / job.file
    names = {"input_names": ["input"], "output_names": ["output"]}
    dynamic_axes = {"input": {0: "batch"}} if model.dynamic_batch else None
    start = time.perf_counter()
    if job.exporter == "torchscript":
        torch.onnx.export(
            net,
            (x,),
            str(path),
            opset_version=job.opset,
            dynamo=False,
            dynamic_axes=dynamic_axes,
            **names,
        )
    elif job.exporter == "torchscript+external_data":
        import onnx

        with tempfile.TemporaryDirectory() as tmp:
            staged = Path(tmp) / job.file
            torch.onnx.export(
                net,
                (x,),
                str(staged),
                opset_version=job.opset,
                dynamo=False,
                dynamic_axes=dynamic_axes,
                **names,
            )
            proto = onnx.load_model(str(staged))
        onnx.save_model(
            proto,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=f"{job.file}.data",
        )
    elif job.exporter == "dynamo":
        torch.onnx.export(
            net,
            (x,),
            str(path),
            opset_version=job.opset,
            dynamo=True,
            dynamic_axes=dynamic_axes,
            **names,
        )
    else:
        raise ValueError(job.exporter)
    record.export_seconds = round(time.perf_counter() - start, 2)
    if job.opset is None:
        import onnx

        proto = onnx.load_model(str(path), load_external_data=False)
        record.opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))


def finish(record: Record, out: Path) -> Record:
    """Name the data files beside the model and count the bytes of both."""
    path = out / record.file
    record.data_files = sorted(
        p.name for p in out.glob(f"{record.file}.*") if p.name != record.file
    )
    record.bytes = (
        sum(
            (out / f).stat().st_size
            for f in [record.file, *record.data_files]
            if (out / f).exists()
        )
        if path.exists()
        else 0
    )
    return record


# --- driver ---------------------------------------------------------------------------------


def remove_outputs(out: Path, file: str) -> None:
    for p in [out / file, *out.glob(f"{file}.*")]:
        if p.is_file():
            p.unlink()


def drive(jobs: list[Job], out: Path, timeout: float, threads: int) -> list[Record]:
    manifest_path = out / "manifest.json"
    kept: list[dict[str, Any]] = []
    if manifest_path.exists():  # keep entries of files not redone in this run
        redo = {j.file for j in jobs}
        kept = [r for r in json.loads(manifest_path.read_text()) if r["file"] not in redo]
    records: list[Record] = []
    for i, job in enumerate(jobs, 1):
        remove_outputs(out, job.file)
        result = out / f".{job.file}.record.json"
        cmd = [
            sys.executable,
            __file__,
            "--out",
            str(out),
            "--threads",
            str(threads),
            "--worker",
            job.file,
            "--record",
            str(result),
        ]
        print(f"[{i}/{len(jobs)}] {job.file} ...", flush=True)
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, timeout=timeout, capture_output=True, text=True)
            if result.exists():
                record = Record(**json.loads(result.read_text()))
            else:
                record = new_record(job, f"worker exited {proc.returncode}: {proc.stderr[-2000:]}")
        except subprocess.TimeoutExpired:
            record = new_record(
                job, f"timeout: over {timeout:.0f} s (build+calibrate+export); skipped"
            )
        result.unlink(missing_ok=True)
        if record.error:
            remove_outputs(out, job.file)
        records.append(finish(record, out))
        status = (
            record.error.splitlines()[-1][:160]
            if record.error
            else (f"ok {record.bytes / 1e6:.1f} MB, export {record.export_seconds} s")
        )
        print(f"    {status} ({time.perf_counter() - start:.0f} s wall)", flush=True)
        manifest_path.write_text(json.dumps(kept + [asdict(r) for r in records], indent=1) + "\n")
    return records


def new_record(job: Job, error: str | None) -> Record:
    return Record(
        job.file,
        job.model.name,
        job.exporter,
        job.opset,
        job.model.dynamic_batch,
        list(job.model.input_shape),
        error=error,
        build_kwargs=dict(job.model.kwargs),
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=Path("/work/zoo"))
    ap.add_argument(
        "--only", nargs="*", default=None, help="model names or file names to (re)do; default all"
    )
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per file")
    ap.add_argument("--threads", type=int, default=1, help="torch threads in each worker")
    ap.add_argument("--list", action="store_true", help="print the files and exit")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--record", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()

    jobs = all_jobs()
    if args.worker:
        job = next(j for j in jobs if j.file == args.worker)
        record = new_record(job, None)
        try:
            run_job(job, record, args.out, args.threads)
        except Exception:  # recorded in the manifest; the driver goes on
            record.error = traceback.format_exc(limit=-6)
        args.record.write_text(json.dumps(asdict(record)))
        return

    if args.only:
        jobs = [j for j in jobs if j.model.name in args.only or j.file in args.only]
    if args.list:
        for j in jobs:
            print(
                j.file,
                j.exporter,
                j.opset,
                j.model.input_shape,
                "dynamic" if j.model.dynamic_batch else "static",
            )
        return
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    records = drive(jobs, args.out, args.timeout, args.threads)
    ok = [r for r in records if not r.error]
    print(
        f"{len(ok)}/{len(records)} files written to {args.out}; "
        f"{sum(r.bytes for r in ok) / 1e6:.0f} MB"
    )


if __name__ == "__main__":
    main()
