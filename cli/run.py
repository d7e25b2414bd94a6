"""`octune run`: a whole network through the reference runtime, checked against onnxruntime,
timed per layer (the runtime, onnx and onnxruntime load only when it runs).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer

from octune.cli.labels import fitted_table, layer_label
from octune.cli.options import BatchOption, DimOption, PublicKey, json_on_stdout, write_json
from octune.core.console import console
from octune.core.errors import OctuneError

if TYPE_CHECKING:
    from octune.runtime.config_sources import ConfigSource, Policy
    from octune.runtime.executor import Runtime, Timing
    from octune.runtime.verify import Comparison
    from octune.tuner.device import DeviceInfo


def run(
    model: Annotated[
        str,
        typer.Argument(
            help="a built-in network (squeezenet1.1, mobilenet_v1, mobilenet_v2, resnet18, "
            "resnet50, bert_base_layer) or an .onnx file"
        ),
    ],
    batch: BatchOption = None,
    dim: DimOption = None,
    server: Annotated[
        str | None, typer.Option(help="config server URL: one batch lookup per kernel family")
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(envvar="OCTUNE_TOKEN", help="read token, for a --server that requires one"),
    ] = None,
    bundle: Annotated[
        Path | None, typer.Option(help="firmware bundle exported for this device")
    ] = None,
    public_key: PublicKey = None,
    db: Annotated[
        str | None,
        typer.Option(help="database URL (default: $OCTUNE_DATABASE_URL, else the user's SQLite)"),
    ] = None,
    device: Annotated[
        str | None,
        typer.Option("--device", "-d", help="device index or name substring (`octune devices`)"),
    ] = None,
    configs: Annotated[
        str,
        typer.Option(
            help="tuned: each layer's answer; confirmed: tuned, then each layer not tuned at "
            "its shape runs every kernel's answer once at load and keeps the fastest verified; "
            "one-per-device: the largest tuned layer's config for every layer its kernel takes; "
            "default: octune's untuned defaults"
        ),
    ] = "tuned",
    repeat: Annotated[
        int, typer.Option(min=1, help="timed forward passes: median kernel times, best wall")
    ] = 10,
    seed: Annotated[int, typer.Option(help="seed of the random inputs")] = 0,
    fuse: Annotated[
        bool | None,
        typer.Option(
            "--fuse/--no-fuse",
            help="run each layer's bias, batch-norm, residual and activation in its kernel's "
            "stores where the kernel allows it (--fuse), in a launch of their own (--no-fuse); "
            "by default, for each conv and GEMM, whichever of the two ran faster at load",
            show_default=False,
        ),
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            help="what tensors and weights are stored as: float32 or float16 (float16 kernels; "
            "the accuracy cost against the float32 result is reported); default: the model's"
        ),
    ] = None,
    record: Annotated[
        bool,
        typer.Option(
            help="with --configs confirmed and a database as the source: keep what the "
            "confirmation measured in it, so the next load runs those layers as tuned at their "
            "shapes and confirms nothing"
        ),
    ] = True,
    json_out: Annotated[
        Path | None,
        typer.Option("--json", help="also write the results to this JSON file (- for stdout)"),
    ] = None,
) -> None:
    """Run a network on random inputs with octune's configs: check it against onnxruntime,
    then time it per layer (OpenCL profiling) and whole (back to back, one finish).
    """
    from octune.core.precision import STORAGE
    from octune.networks.layers import load_model
    from octune.networks.workloads import parse_dims
    from octune.runtime.config_sources import POLICIES, StoreConfigs
    from octune.runtime.executor import Runtime
    from octune.runtime.verify import check, onnxruntime_seconds, random_inputs
    from octune.tuner.device import DeviceInfo, require_compiling, select_device

    json_on_stdout(json_out)
    if configs not in POLICIES:
        raise OctuneError(f"unknown --configs '{configs}': use one of {', '.join(POLICIES)}")
    if dtype is not None and dtype not in STORAGE:
        raise OctuneError(
            f"--dtype: octune run stores float32 or float16, not {dtype!r}; a quantized model "
            "(QDQ or QOperator) runs as its file is written"
        )
    given = [flag for flag, value in (("--server", server), ("--bundle", bundle), ("--db", db))
             if value is not None]  # fmt: skip
    if len(given) > 1:
        raise OctuneError(f"give one config source, not {' and '.join(given)}")
    network = load_model(model, batch, parse_dims(dim or []))  # a bad model: before any device
    cl_device = select_device(device)
    require_compiling(cl_device)
    info = DeviceInfo.from_cl(cl_device)
    policy = cast("Policy", configs)
    source = None if policy == "default" else _source(info, server, token, bundle, public_key, db)
    where = "octune's defaults" if source is None else source.where
    # Loading builds every kernel (from the cache after the first time) and times what it
    # must choose at load: a confirmation runs candidates for each layer nobody tuned.
    doing = "confirming configs of untuned layers, " if policy == "confirmed" else ""
    started = time.perf_counter()
    with console.status(f"Loading {model}: {doing}building and timing its kernels") as status:
        store = source.store if record and isinstance(source, StoreConfigs) else None
        runtime = Runtime(
            network, cl_device, source, policy, fuse=fuse, dtype=dtype, record=store,
            progress=lambda now: status.update(f"Loading {model}: {now}"),
        )  # fmt: skip
    console.print(
        f"Running {model} in {runtime.dtype} on [bold]{info.name}[/] with {policy} configs "
        f"from {where} (loaded in {time.perf_counter() - started:.1f} s)"
    )
    inputs = random_inputs(runtime, seed)
    outputs = check(runtime, inputs)
    timing = runtime.time(repeat)
    reference_s = onnxruntime_seconds(network, inputs, repeat)
    _print(runtime, timing, outputs, reference_s)
    if json_out is not None:
        payload = _payload(model, info, policy, where, runtime, timing, outputs, reference_s)
        write_json(json_out, json.dumps(payload, indent=2))


def _source(
    info: DeviceInfo,
    server: str | None,
    token: str | None,
    bundle: Path | None,
    public_key: str | None,
    db: str | None,
) -> ConfigSource:
    from octune.db.store import Store
    from octune.runtime.config_sources import BundleConfigs, ServerConfigs, StoreConfigs

    if server is not None:
        return ServerConfigs(server, info, token, public_key)
    if bundle is not None:
        return BundleConfigs(bundle, info, public_key)
    return StoreConfigs(Store(db or Store.default_url()), info)


def _print(runtime: Runtime, timing: Timing, outputs: list[Comparison], reference_s: float) -> None:
    total = timing.total_kernel_s or 1.0
    columns = {"layer": True, "op": False, "kernel": True, "match": True, "time µs": True,
               "share": True}  # fmt: skip
    table = fitted_table(console, f"{runtime.graph.name} on {runtime.info.name}", columns)
    shown = [column.header for column in table.columns]
    for planned, seconds in zip(runtime.plan, timing.kernel_s, strict=True):
        if planned.launches:
            row = {
                "layer": layer_label(planned.step.name),
                "op": planned.step.op,
                "kernel": planned.kernel,
                "match": planned.match,
                "time µs": f"{seconds * 1e6:,.1f}",
                "share": f"{100 * seconds / total:.1f}%",
            }
            table.add_row(*(row[column] for column in shown))  # fmt: skip
    console.print(table)
    worst = max(outputs, key=lambda c: c.ratio)
    console.print(
        f"kernels {timing.total_kernel_s * 1e3:.3f} ms (profiled, median of {timing.repeats}), "
        f"wall {timing.wall_s * 1e3:.3f} ms (best of {timing.repeats}, back to back), "
        f"{runtime.launches} launches; onnxruntime CPU {reference_s * 1e3:.3f} ms (best of "
        f"{timing.repeats}): octune's wall is {timing.wall_s / reference_s:.2f} x it. Output "
        f"agrees with onnxruntime: max error {worst.error:.3g} = {worst.ratio:.2g} x the tolerance "
        f"({worst.tolerance:.3g} x max |output| {worst.magnitude:.3g})"
    )
    if runtime.dtype != "float32":
        for c in outputs:  # the accuracy cost, as a user of half precision reads it
            console.print(
                f"{runtime.dtype} against the float32 result, output '{c.tensor}': max error "
                f"{c.error:.3g} ({c.error / (c.magnitude or 1):.2%} of max |output| "
                f"{c.magnitude:.3g}), mean error {c.mean_error:.3g}"
            )
            if c.magnitude < c.floor:
                console.print(
                    f"[yellow]Output '{c.tensor}' is below {runtime.dtype}'s least normal number "
                    f"({c.floor:.2g})[/]: half storage keeps little or nothing of it; run it in "
                    "float32 (an untrained model's outputs are often this small)"
                )
    for c in (c for c in outputs if c.whole_model_error is not None):
        console.print(
            f"Quantized output '{c.tensor}' was checked layer by layer; against onnxruntime's "
            f"whole model its max error is {c.whole_model_error:.3g} "
            f"({c.whole_model_error / (c.magnitude or 1):.2%} of max |output| {c.magnitude:.3g}): "
            "rounding ties carried through the layers"
        )
    for fixed in (c for c in outputs if not c.depends_on_input):
        console.print(
            f"[yellow]Output '{fixed.tensor}' does not depend on the input[/] (onnxruntime gives "
            "it bit for bit on other inputs): its agreement proves nothing about the layers "
            "before it; every layer's own output was checked"
        )


def _payload(
    model: str,
    info: DeviceInfo,
    policy: str,
    where: str,
    runtime: Runtime,
    timing: Timing,
    outputs: list[Comparison],
    reference_s: float,
) -> dict[str, object]:
    layers = [
        {
            "layer": planned.step.name,
            "nodes": list(planned.step.nodes),
            "op": planned.step.op,
            "kernel": planned.kernel,
            "match": planned.match,
            "config": planned.config,
            "launches": len(planned.launches),
            "kernel_s": seconds,
        }
        for planned, seconds in zip(runtime.plan, timing.kernel_s, strict=True)
        if planned.launches
    ]
    return {
        "model": model,
        "device": info.name,
        "device_fingerprint": info.fingerprint,
        "configs": policy,
        "dtype": runtime.dtype,
        "source": where,
        "layers": layers,
        "kernel_s": timing.total_kernel_s,
        "wall_s": timing.wall_s,
        "repeats": timing.repeats,
        "launches": runtime.launches,
        "onnxruntime_s": reference_s,
        "wall_over_onnxruntime": timing.wall_s / reference_s,
        "outputs": [
            {
                "tensor": c.tensor,
                "max_error": c.error,
                "mean_error": c.mean_error,
                "magnitude": c.magnitude,
                "tolerance": c.tolerance,
                "whole_model_error": c.whole_model_error,
                "depends_on_input": c.depends_on_input,
            }
            for c in outputs
        ],
    }
