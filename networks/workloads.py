"""A network as tuning work: its layers as tasks or a workloads file, each weighted by its
estimated share of the network's time, so one budget goes where the network spends its time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import onnx
import yaml

from octune.catalogue.expr import Expression
from octune.core.errors import OctuneError
from octune.networks.builtin import BUILTIN
from octune.networks.layers import Layer, extract_layers, load_model, own_launches
from octune.tuner.campaign import Task, tasks_for

# About a device's ratio of arithmetic to memory traffic (GPUs do 10 to 20 flops per byte they
# read, CPUs a few): a layer costs its flops or this many per operand element, whichever is
# more, so memory-bound layers (depthwise convs, GEMV) are not weighted as if free.
FLOPS_PER_ELEMENT = 40


def network_layers(
    source: str | Path, batch: int | None, dims: Mapping[str, int]
) -> tuple[list[Layer], list[str]]:
    """The distinct layers of a built-in network or a file, and the operators not tuned."""
    _, layers, untuned = network_model(source, batch, dims)
    return layers, untuned


def network_model(
    source: str | Path, batch: int | None, dims: Mapping[str, int]
) -> tuple[onnx.ModelProto, list[Layer], list[str]]:
    """The model as tuning reads it (``network_layers``), its layers and the operators not
    tuned. Tuning needs only shapes, so a built-in network is built without weights.
    """
    model = load_model(source, batch, dims, weights=False)
    layers, untuned = extract_layers(model)
    if not layers:
        not_tuned = f" (not tuned: {', '.join(untuned)})" if untuned else ""
        raise OctuneError(f"{source} has no Conv, Gemm or MatMul to tune{not_tuned}")
    return model, layers, untuned


def network_record(
    source: str | Path,
    batch: int | None,
    model: onnx.ModelProto,
    layers: Sequence[Layer],
    untuned: Sequence[str],
) -> dict[str, Any]:
    """What the database keeps of a network tuned (``Store.save_network``): its name (a file's
    name, not its path), layers and what runs beside them.
    """
    name = str(source) if str(source) in BUILTIN else Path(source).name
    return {
        "name": name if batch is None else f"{name} (batch {batch})",
        "layers": [layer.record() for layer in layers],
        "not_tuned": list(untuned),
        "left_out": own_launches(model),
    }  # fmt: skip


def parse_dims(texts: Sequence[str]) -> dict[str, int]:
    """``--dim NAME=SIZE`` options as a mapping."""
    dims = {}
    for text in texts:
        name, _, size = text.partition("=")
        if not name or not size.isdigit():
            raise OctuneError(f"--dim takes NAME=SIZE, e.g. --dim sequence=128, not {text!r}")
        dims[name] = int(size)
    return dims


def estimated_cost(layer: Layer) -> int:
    """A layer's flops in one forward pass, or its operands' traffic where that is more."""
    workload = layer.workload()
    values = workload.shape_vars()
    extents = (Expression(text, values) for text in workload.family.extents)
    elements = sum(int(extent.evaluate(values)) for extent in extents)
    return layer.count * max(workload.flops, FLOPS_PER_ELEMENT * elements)


def time_shares(layers: Sequence[Layer]) -> list[float]:
    """Each layer's estimated share of the network's time, in percent, to 3 digits."""
    costs = [estimated_cost(layer) for layer in layers]
    return [float(f"{100 * cost / sum(costs):.3g}") for cost in costs]


def network_tasks(layers: Sequence[Layer], dtype: str | None = None) -> list[Task]:
    """The layers as tuning tasks, as the workloads file ``workloads_yaml`` writes reads: each
    in its own dtype (its model's), or in ``dtype``.
    """
    return [
        replace(task, nodes=layer.nodes, launches=layer.count, batched=layer.batched)
        for layer, weight in zip(layers, time_shares(layers), strict=True)
        for task in tasks_for(layer.family, layer.shape, dtype or layer.dtype, weight=weight)
    ]


def describe(label: str, layers: Sequence[Layer], untuned: Sequence[str]) -> str:
    """E.g. ``resnet50: 53 conv2d (23 distinct), 1 gemm (1 distinct) per forward pass``."""
    distinct = Counter(layer.family for layer in layers)
    launches: Counter[str] = Counter()
    for layer in layers:
        launches[layer.family] += layer.count
    parts = [f"{launches[name]} {name} ({count} distinct)" for name, count in distinct.items()]
    line = f"{label}: {', '.join(parts)} per forward pass"
    return line + (f"; not tuned: {', '.join(untuned)}" if untuned else "")


def workloads_yaml(label: str, layers: Sequence[Layer], untuned: Sequence[str]) -> str:
    """A workloads file for ``octune tune --workloads``: one entry per layer with its weight
    and its launches per pass, and as a comment its nodes.
    """
    lines = [
        f"# {describe(label, layers, untuned)}",
        "# weight: the layer's estimated share of the network's time, in percent; launches: per",
        "# forward pass (a second round weighs each layer by its measured time times these);",
        "# batched: a batched MatMul's matrices, which keep their estimate (the runtime may run",
        "# them in one launch of its own kernel)",
        "workloads:",
    ]
    for layer, weight in zip(layers, time_shares(layers), strict=True):
        more = len(layer.nodes) - 3
        nodes = ", ".join(layer.nodes[:3]) + (f" and {more} more" if more > 0 else "")
        dtype = {} if layer.dtype == "float32" else {"dtype": layer.dtype}
        batched = {"batched": True} if layer.batched else {}
        entry = {"kernel": layer.family, **layer.shape, **dtype, "weight": weight,
                 "launches": layer.count, **batched}  # fmt: skip
        flow = yaml.safe_dump(entry, default_flow_style=True, sort_keys=False, width=1 << 16)
        lines += [f"  # {nodes}", f"  - {flow.strip()}"]
    return "\n".join(lines) + "\n"
