"""Export Keras models to ONNX with tf2onnx, as TensorFlow users write them: a zoo of real
tf2onnx-produced ONNX files (NHWC inputs, Keras layer patterns) for testing an ONNX loader.

Models are built with random weights (``weights=None``) under a fixed seed
(``tf.keras.utils.set_random_seed``). BatchNormalization is calibrated so that inference-mode BN
is a non-trivial affine map: every BN layer's momentum is set so that its moving statistics
become the cumulative average of the batch statistics over a few training-mode forward passes
on random batches, then restored. Each model is then checked to give different outputs for two
different random inputs (``output_depends_on_input`` / ``output_max_abs_diff``), exported with
``tf2onnx.convert.from_keras(model, input_signature=[tf.TensorSpec(shape, tf.float32,
name='input')], opset=..., output_path=...)`` and, where onnxruntime is installed, the ONNX file
is run once and compared with Keras (printed, not recorded).

Each export runs in a child process under a time limit; a failure is recorded in
``manifest.json`` (same keys as /work/zoo/manifest.json) with its error, and the run goes on.

TensorFlow 2.15 (Keras 2: tf2onnx's ``from_keras`` does not take Keras 3) in its own venv:

    python3 -m venv /work/tfenv && /work/tfenv/bin/pip install "tensorflow-cpu==2.15.1" \
        tf2onnx "onnx==1.17.0" onnxruntime
    OMP_NUM_THREADS=1 TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 \
        /work/tfenv/bin/python benchmarks/zoo_export_tf.py --out /work/zoo_tf
    ... zoo_export_tf.py --out /work/zoo_tf --only mobilenet_v2 mha_block
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lib.zoo_models import Record  # one manifest format for both zoos

for _var in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

SEED = 0
CALIBRATION_PASSES = 3
CALIBRATION_BATCH = 2
IMG = (224, 224, 3)  # NHWC, as Keras has it


@dataclass(frozen=True)
class Job:
    file: str
    model: str
    opset: int
    dynamic_batch: bool
    sample_shape: tuple[int, ...] = IMG  # without the batch axis
    build_kwargs: dict[str, Any] = field(default_factory=dict)


JOBS: list[Job] = [
    Job("mobilenet_v2.onnx", "mobilenet_v2", 13, True),
    Job("resnet50.onnx", "resnet50", 13, False),
    Job("efficientnet_b0.onnx", "efficientnet_b0", 13, True),
    Job("densenet121.onnx", "densenet121", 13, False),
    Job("small_cnn.onnx", "small_cnn", 13, False),
    Job("mha_block.onnx", "mha_block", 13, True, (16, 64)),
    Job("mobilenet_v2.opset17.onnx", "mobilenet_v2", 17, False),
    Job("small_cnn.opset17.onnx", "small_cnn", 17, True),
]


# --- models ---------------------------------------------------------------------------------


def small_cnn(tf: Any) -> Any:
    """Conv(same, stride 2) / depthwise / BN / ReLU6 / GAP / Dense-softmax, MobileNet-like."""
    L = tf.keras.layers
    inp = tf.keras.Input(shape=IMG, name="input")
    x = L.Conv2D(16, 3, strides=2, padding="same", use_bias=False)(inp)
    x = L.BatchNormalization()(x)
    x = L.ReLU(max_value=6.0)(x)
    for filters in (32, 64):
        x = L.DepthwiseConv2D(3, padding="same", use_bias=False)(x)
        x = L.BatchNormalization()(x)
        x = L.ReLU(max_value=6.0)(x)
        x = L.Conv2D(filters, 1, padding="same", use_bias=False)(x)
        x = L.BatchNormalization()(x)
        x = L.ReLU(max_value=6.0)(x)
        x = L.Conv2D(filters, 3, strides=2, padding="same")(x)
        x = L.ReLU(max_value=6.0)(x)
    x = L.GlobalAveragePooling2D()(x)
    out = L.Dense(10, activation="softmax")(x)
    return tf.keras.Model(inp, out, name="small_cnn")


def mha_block(tf: Any) -> Any:
    """Pre-LN transformer block: LayerNorm + MultiHeadAttention + residual, LayerNorm + MLP."""
    L = tf.keras.layers
    inp = tf.keras.Input(shape=(16, 64), name="input")
    h = L.LayerNormalization(epsilon=1e-6)(inp)
    h = L.MultiHeadAttention(num_heads=4, key_dim=16)(h, h)
    x = L.Add()([inp, h])
    h = L.LayerNormalization(epsilon=1e-6)(x)
    h = L.Dense(128, activation="gelu")(h)
    h = L.Dense(64)(h)
    out = L.Add()([x, h])
    return tf.keras.Model(inp, out, name="mha_block")


def build(tf: Any, job: Job) -> Any:
    apps = tf.keras.applications
    kw = dict(weights=None, input_shape=IMG, **job.build_kwargs)
    builders = {
        "mobilenet_v2": lambda: apps.MobileNetV2(**kw),
        "resnet50": lambda: apps.ResNet50(**kw),
        "efficientnet_b0": lambda: apps.EfficientNetB0(**kw),
        "densenet121": lambda: apps.DenseNet121(**kw),
        "small_cnn": lambda: small_cnn(tf),
        "mha_block": lambda: mha_block(tf),
    }
    return builders[job.model]()


def calibrate_batchnorm(tf: Any, net: Any, sample_shape: tuple[int, ...]) -> None:
    """Set BN moving stats to the cumulative average of batch stats over a few random batches."""
    bns = [m for m in net.submodules if isinstance(m, tf.keras.layers.BatchNormalization)]
    if not bns:
        return
    momenta = [bn.momentum for bn in bns]
    for k in range(CALIBRATION_PASSES):
        for bn in bns:  # moving = moving * k/(k+1) + batch * 1/(k+1)
            bn.momentum = k / (k + 1)
        net(tf.random.normal((CALIBRATION_BATCH, *sample_shape)), training=True)
    for bn, momentum in zip(bns, momenta, strict=True):
        bn.momentum = momentum


def redraw_zero_weights(tf: Any, net: Any) -> list[str]:
    """Re-draw any all-zero weight matrix (it would make the output constant)."""
    names = []
    for w in net.trainable_weights:
        if len(w.shape) >= 2 and not bool(tf.reduce_any(w != 0)):
            w.assign(tf.random.normal(w.shape, stddev=0.02))
            names.append(w.name)
    return names


def depends_on_input(tf: Any, net: Any, shape: tuple[int, ...]) -> tuple[bool, float, list[int]]:
    a = net(tf.random.normal(shape), training=False).numpy()
    b = net(tf.random.normal(shape), training=False).numpy()
    diff = float(abs(a - b).max())
    scale = float(max(abs(a).max(), abs(b).max()))
    return diff > 1e-6 * max(scale, 1e-30), diff, list(a.shape)


def run_job(job: Job, record: Record, out: Path) -> None:
    import numpy as np
    import tensorflow as tf
    import tf2onnx

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.keras.utils.set_random_seed(SEED)
    net = build(tf, job)
    record.reinitialized_zero_weights = redraw_zero_weights(tf, net)
    tf.keras.utils.set_random_seed(SEED + 1)
    calibrate_batchnorm(tf, net, job.sample_shape)
    shape = (1, *job.sample_shape)
    ok, diff, out_shape = depends_on_input(tf, net, shape)
    record.output_depends_on_input, record.output_max_abs_diff, record.output_shape = (
        ok,
        diff,
        out_shape,
    )

    path = out / job.file
    batch = None if job.dynamic_batch else 1
    spec = [tf.TensorSpec((batch, *job.sample_shape), tf.float32, name="input")]
    start = time.perf_counter()
    tf2onnx.convert.from_keras(net, input_signature=spec, opset=job.opset, output_path=str(path))
    record.export_seconds = round(time.perf_counter() - start, 2)

    try:
        import onnxruntime as ort
    except ImportError:
        return
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(SEED).standard_normal(shape).astype(np.float32)
    got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    want = net(x, training=False).numpy()
    print(
        f"[{job.file}] onnxruntime vs keras max abs diff {float(abs(got - want).max()):.3g}",
        flush=True,
    )


def finish(record: Record, out: Path) -> Record:
    path = out / record.file
    record.data_files = sorted(
        p.name for p in out.glob(f"{record.file}.*") if p.name != record.file
    )
    record.bytes = (
        sum(
            (out / f).stat().st_size
            for f in (record.file, *record.data_files)
            if (out / f).exists()
        )
        if path.exists()
        else 0
    )
    return record


def new_record(job: Job) -> Record:
    return Record(
        file=job.file,
        model=job.model,
        exporter="tf2onnx",
        opset=job.opset,
        dynamic_batch=job.dynamic_batch,
        input_shape=[1, *job.sample_shape],
        build_kwargs=dict(job.build_kwargs),
    )


def child(job_file: str, out: Path, result: Path) -> None:
    job = next(j for j in JOBS if j.file == job_file)
    record = new_record(job)
    try:
        run_job(job, record, out)
    except Exception as exc:
        traceback.print_exc()
        record.error = f"{type(exc).__name__}: {exc}"[:2000]
    result.write_text(json.dumps(asdict(record)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    ap.add_argument("--only", nargs="*", help="model names or file names")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per export")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        child(args.child, args.out, args.result)
        return

    jobs = [j for j in JOBS if not args.only or j.model in args.only or j.file in args.only]
    manifest_path = args.out / "manifest.json"
    previous = {}
    if args.only and manifest_path.exists():  # keep entries of jobs not re-run
        previous = {r["file"]: r for r in json.loads(manifest_path.read_text())}
    records: dict[str, dict[str, Any]] = dict(previous)
    for job in jobs:
        for p in [args.out / job.file, *args.out.glob(f"{job.file}.*")]:
            p.unlink(missing_ok=True)
        result = args.out / f".{job.file}.result.json"
        result.unlink(missing_ok=True)
        print(f"== {job.file}", flush=True)
        cmd = [
            sys.executable,
            __file__,
            "--out",
            str(args.out),
            "--child",
            job.file,
            "--result",
            str(result),
        ]
        try:
            subprocess.run(cmd, timeout=args.timeout, check=False)
            if result.exists():
                record = Record(**json.loads(result.read_text()))
            else:
                record = new_record(job)
                record.error = "child process exited without a result"
        except subprocess.TimeoutExpired:
            record = new_record(job)
            record.error = f"timed out after {args.timeout:.0f} s"
        result.unlink(missing_ok=True)
        if record.error:
            (args.out / job.file).unlink(missing_ok=True)
        record = finish(record, args.out)
        print(
            f"   bytes={record.bytes} export_seconds={record.export_seconds} "
            f"depends_on_input={record.output_depends_on_input} error={record.error}",
            flush=True,
        )
        records[job.file] = asdict(record)
    order = {j.file: i for i, j in enumerate(JOBS)}
    ordered = sorted(records.values(), key=lambda r: order.get(r["file"], len(order)))
    manifest_path.write_text(json.dumps(ordered, indent=1) + "\n")


if __name__ == "__main__":
    main()
