"""The tunable layers of an ONNX network: each node a kernel family computes, as its shape.

``load_model`` gives a model with every shape known (a built-in network or a file, dynamic
dimensions fixed, ONNX shape inference run); ``node_layers`` maps each tunable node to its
family and shape, as octune's runtime needs it per node; ``extract_layers`` merges equal
shapes, counting launches, as the tuner needs them. Each family reads the operators it names
(``Family.onnx_ops``: Conv in ``kernels/conv2d.py``, Gemm and MatMul in ``kernels/gemm.py``,
and a user's family its own), so a layer is a workload as ``octune tune`` takes it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import onnx
from google.protobuf.message import DecodeError
from onnx.external_data_helper import (
    ExternalDataInfo,
    load_external_data_for_model,
    uses_external_data,
)

from octune.catalogue.family import Family, OnnxNode, Workload
from octune.catalogue.registry import families, family, resolve_kernels
from octune.core.errors import OctuneError, WorkloadError
from octune.networks.builtin import BUILTIN, did_you_mean
from octune.networks.normalize import normalize
from octune.networks.quantized import int8_layers

# Operators that read and write each element a few times: their time is memory traffic that a
# runtime spends as it is, with nothing to tune. Any other operator that is not a tunable Conv,
# Gemm or MatMul is reported as not tuned.
# fmt: off
ELEMENTWISE = frozenset({
    "Abs", "Add", "And", "ArgMax", "ArgMin", "AveragePool", "BatchNormalization", "Cast", "Ceil",
    "DequantizeLinear", "QuantizeLinear",
    "Clip", "Concat", "Constant", "ConstantOfShape", "Cos", "DepthToSpace", "Div", "Dropout",
    "Elu", "Equal", "Erf", "Exp", "Expand", "Flatten", "Floor", "Gather", "Gelu",
    "GlobalAveragePool", "GlobalMaxPool", "Greater", "GroupNormalization", "HardSigmoid",
    "HardSwish", "Identity", "InstanceNormalization", "LRN", "LayerNormalization", "LeakyRelu",
    "Less", "Log", "LogSoftmax", "Max", "MaxPool", "Mean", "Min", "Mul", "Neg", "Not", "Or",
    "PRelu", "Pad", "Pow", "Range", "Reciprocal", "ReduceL2", "ReduceMax", "ReduceMean",
    "ReduceMin", "ReduceSum", "Relu", "Reshape", "Resize", "Round", "Selu", "Shape", "Sigmoid",
    "Sin", "Size", "Slice", "Softmax", "Softplus", "SpaceToDepth", "Split", "Sqrt", "Squeeze",
    "Sub", "Sum", "Tanh", "Tile", "Transpose", "Unsqueeze", "Upsample", "Where",
})
# fmt: on


@dataclass(frozen=True)
class Layer:
    """One shape of a kernel family and the nodes that have it.

    ``shape`` holds the family's keys as ``octune tune <family> --key value`` takes them;
    ``count`` is how many launches of that shape one forward pass makes (a batched MatMul
    makes one per matrix of its batch); ``dtype`` is what its model stores (``model_dtype``).
    """

    family: str
    shape: dict[str, int]
    nodes: tuple[str, ...]
    count: int
    dtype: str = "float32"

    @property
    def batched(self) -> bool:
        """A batched MatMul's matrices: more launches of its shape than it has nodes, which
        the runtime may run as one launch a node (``runtime/batched.py``).
        """
        return self.count > len(self.nodes)

    def workload(self, dtype: str | None = None) -> Workload:
        """The layer's workload in its own dtype, or in ``dtype`` (a run that stores another)."""
        return family(self.family).workload(self.shape, dtype or self.dtype)

    def record(self) -> dict[str, Any]:
        """As the database keeps it (``db.networks``)."""
        return {"family": self.family, "shape": dict(self.shape), "nodes": list(self.nodes),
                "count": self.count, "dtype": self.dtype}  # fmt: skip

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Layer:
        return cls(
            record["family"], dict(record["shape"]), tuple(record["nodes"]), record["count"],
            record.get("dtype", "float32"),
        )  # fmt: skip


def model_dtype(model: onnx.ModelProto) -> str:
    """float16 for a model that stores most of its weights' elements in half precision (what
    onnxconverter-common's float16 converter and a ``.half()`` PyTorch export write), else
    float32.
    """
    counts = {onnx.TensorProto.FLOAT: 0, onnx.TensorProto.FLOAT16: 0}
    for tensor in model.graph.initializer:
        if tensor.data_type in counts:
            counts[tensor.data_type] += math.prod(tensor.dims)
    half = counts[onnx.TensorProto.FLOAT16] > counts[onnx.TensorProto.FLOAT]
    return "float16" if half else "float32"


#: Element-wise operators that run in launches of their own beside the tuned layers (the rest
#: fuse into a conv's or GEMM's stores, alias their input, or fold into constants).
OWN_LAUNCHES = frozenset({
    "AveragePool", "Concat", "DepthToSpace", "Expand", "Gather", "GlobalAveragePool",
    "GlobalMaxPool", "GroupNormalization", "InstanceNormalization", "LRN", "LayerNormalization",
    "LogSoftmax", "MaxPool", "Pad", "ReduceL2", "ReduceMax", "ReduceMean", "ReduceMin",
    "ReduceSum", "Resize", "Slice", "Softmax", "SpaceToDepth", "Split", "Tile", "Transpose",
    "Upsample", "Where",
})  # fmt: skip


def own_launches(model: onnx.ModelProto) -> list[str]:
    """The model's memory-bound operators of ``OWN_LAUNCHES`` as ``"MaxPool x3"``: untuned,
    and outside a report's estimate of the tuned layers.
    """
    counts = Counter(node.op_type for node in model.graph.node if node.op_type in OWN_LAUNCHES)
    return [f"{op} x{count}" for op, count in counts.items()]


def node_name(node: onnx.NodeProto, index: int) -> str:
    """The node's name, or for an unnamed node ``<op>_<index in the graph>``."""
    return node.name or f"{node.op_type}_{index}"


def load_model(
    source: str | Path,
    batch: int | None = None,
    dims: Mapping[str, int] | None = None,
    *,
    weights: bool = True,
) -> onnx.ModelProto:
    """A built-in network (by name) or an ONNX file, its dynamic dimensions fixed (``batch``:
    each input's first one; ``dims``: by name) and its shapes inferred. Every node is named.
    ``weights=False`` builds a built-in network with its weights as graph inputs: the same
    shapes, without drawing and copying them (a file is read as it is).
    """
    if (batch is not None and batch < 1) or any(size < 1 for size in (dims or {}).values()):
        raise OctuneError("--batch and --dim sizes are 1 or more")
    if isinstance(source, str) and source in BUILTIN:
        build, defaults = BUILTIN[source]
        model, label = build(weights), source
    else:
        path = Path(source)
        if path.is_dir():
            raise OctuneError(f"{path} is a directory: pass the .onnx file in it")
        if not path.is_file():
            raise OctuneError(
                f"no model file or built-in network {str(source)!r}: {did_you_mean(str(source))}"
                f"give an .onnx file that exists or a built-in network: {', '.join(BUILTIN)}"
            )
        model, label, defaults = _read(path), str(path), {}
    _fix_dims(model, label, batch, {**defaults, **(dims or {})}, set(dims or ()))
    if not isinstance(source, str) or source not in BUILTIN:
        model = normalize(model, label)  # octune's own networks are written plain
    for index, node in enumerate(model.graph.node):
        node.name = node_name(node, index)
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except onnx.shape_inference.InferenceError as error:
        raise OctuneError(f"{label}: ONNX shape inference failed: {_first_line(error)}") from None


#: Nodes a model file may have: reading and normalising one of 10^6 took 110 s and 4 GB.
MAX_NODES = 200_000


def _read(path: Path) -> onnx.ModelProto:
    """The model in a file, checked; each way a file can fail to be one is a line naming it
    (protobuf reads an empty file as an empty model, and the checker would only say that it
    has no IR version, or that a "field 'shape'" is missing without naming whose). External
    data is read only from files inside the model's folder, each checked to hold the bytes
    the model says before any is read.
    """
    try:
        empty = path.stat().st_size == 0
        model = onnx.load(path, load_external_data=False)
    except OSError as error:
        raise OctuneError(f"cannot read model {path}: {error.strerror}") from None
    except DecodeError:
        raise OctuneError(
            f"{path} is not an ONNX model (truncated or corrupt): export or download it again"
        ) from None
    if empty:
        raise OctuneError(f"{path} is empty (0 bytes): export or download the model again")
    if len(model.graph.node) > MAX_NODES:
        raise OctuneError(
            f"{path} has {len(model.graph.node):,} nodes, more than the {MAX_NODES:,} octune "
            "reads (the largest exported networks have tens of thousands): check the export"
        )
    _load_external_data(model, path)
    graph = model.graph
    for kind, values in (("input", graph.input), ("output", graph.output)):
        for value in values:
            if value.type.HasField("tensor_type") and not value.type.tensor_type.HasField("shape"):
                raise OctuneError(
                    f"{path}: graph {kind} {value.name!r} has no shape, which ONNX shape "
                    "inference cannot supply: export the model with the shapes of its inputs "
                    "and outputs (a dynamic dimension named, for --batch or --dim)"
                )
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as error:
        raise OctuneError(f"{path} is not a valid ONNX model: {_first_line(error)}") from None
    return model


def _load_external_data(model: onnx.ModelProto, path: Path) -> None:
    """Read the tensors stored beside the model, refusing a location outside its folder, a
    missing file and one shorter than the tensor's offset and length (before reading any).
    """
    folder = path.parent.resolve()
    constants = (a.t for node in model.graph.node for a in node.attribute if a.HasField("t"))
    tensors = [*model.graph.initializer, *constants]
    external = [tensor for tensor in tensors if uses_external_data(tensor)]
    for tensor in external:
        info = ExternalDataInfo(tensor)
        target = (folder / info.location).resolve()
        if Path(info.location).is_absolute():  # onnx itself refuses it, with a traceback
            raise OctuneError(
                f"{path}: tensor {tensor.name!r} keeps its data at the absolute path "
                f"{info.location!r}: save the model with its external data named relative to it"
            )
        if not info.location or not target.is_relative_to(folder):
            raise OctuneError(
                f"{path}: tensor {tensor.name!r} keeps its data at {info.location!r}, outside "
                "the model's folder: octune reads external data only beside the model"
            )
        if not target.is_file():
            raise OctuneError(
                f"{path}: tensor {tensor.name!r} keeps its data in {info.location!r}, which is "
                "missing: copy it beside the model"
            )
        end = (info.offset or 0) + (info.length or 0)
        if end > target.stat().st_size:
            raise OctuneError(
                f"{path}: tensor {tensor.name!r} needs bytes up to {end} of {info.location!r}, "
                f"which has {target.stat().st_size} (truncated): copy it again"
            )
    if external:
        try:
            load_external_data_for_model(model, str(folder))
        except (OSError, ValueError, onnx.checker.ValidationError) as error:
            raise OctuneError(
                f"{path}: cannot read its external data: {_first_line(error)}"
            ) from None


def _first_line(error: Exception) -> str:
    return next((line.strip() for line in str(error).splitlines() if line.strip()), "no detail")


def _fix_dims(
    model: onnx.ModelProto,
    label: str,
    batch: int | None,
    sizes: dict[str, int],
    given: set[str],
) -> None:
    """Give each symbolic dimension of the graph's inputs and outputs a size, or say which
    option would: ``--batch`` sets every input's dynamic first dimension, ``--dim`` any by name.
    """
    graph = model.graph
    weights = {tensor.name for tensor in graph.initializer}
    inputs = [value for value in graph.input if value.name not in weights]
    named = {dim.dim_param for value in inputs for dim in _dims(value) if dim.dim_param}
    unknown = sorted(given - named)
    if unknown:
        having = f"it has {', '.join(sorted(named))}" if named else "it has none"
        raise OctuneError(f"{label} has no dynamic dimension {unknown[0]!r} for --dim; {having}")
    if batch is not None:
        firsts = [next(_dims(value)) for value in inputs if value.type.tensor_type.shape.dim]
        dynamic = [dim for dim in firsts if not dim.HasField("dim_value")]
        fixed = {dim.dim_value for dim in firsts if dim.HasField("dim_value")}
        if not dynamic and fixed != {batch}:  # asking for the batch it has is no mistake
            raise OctuneError(
                f"{label} has a fixed batch size of {', '.join(map(str, sorted(fixed)))}: leave "
                "out --batch, or export the model with a dynamic batch"
            )
        for dim in dynamic:
            if dim.dim_param and dim.dim_param not in given:
                sizes[dim.dim_param] = batch
            elif not dim.dim_param:
                dim.dim_value = batch
    for value in (*inputs, *graph.output, *graph.value_info):
        for dim in _dims(value):
            if dim.dim_param in sizes:
                dim.dim_value = sizes[dim.dim_param]
    for value in inputs:
        dims = list(_dims(value))
        dynamic = [i for i, dim in enumerate(dims) if not dim.HasField("dim_value")]
        if not dynamic:
            continue
        shape = ", ".join(str(dim.dim_value or dim.dim_param or "?") for dim in dims)
        if any(i > 0 and not dims[i].dim_param for i in dynamic):
            raise OctuneError(
                f"{label} input {value.name!r} has dimensions [{shape}]: a ? after the first "
                "has neither a size nor a name, so neither --batch (the first) nor --dim "
                "NAME=SIZE can set it: export the model with that size, or the dimension named"
            )
        raise OctuneError(
            f"{label} input {value.name!r} has dynamic dimensions [{shape}]: give their "
            "sizes with --batch N and/or --dim NAME=SIZE"
        )


def _dims(value: onnx.ValueInfoProto) -> Iterator[onnx.TensorShapeProto.Dimension]:
    return iter(value.type.tensor_type.shape.dim)


def node_layers(model: onnx.ModelProto) -> tuple[dict[str, Layer], dict[str, str]]:
    """Each tunable node's family and shape, by node name (one node, its own launch count),
    and for each Conv, Gemm or MatMul no family takes, why not.
    """
    layers, _, reasons = _scan(model)
    return {layer.nodes[0]: layer for layer in layers}, reasons


def extract_layers(model: onnx.ModelProto) -> tuple[list[Layer], list[str]]:
    """The distinct shapes in network order, each with its nodes and launches per pass, and
    the operators not tuned (neither a tunable node nor elementwise), as ``"Op xCOUNT"``.
    """
    per_node, untuned, _ = _scan(model)
    merged: dict[tuple[str, str, tuple[tuple[str, int], ...]], Layer] = {}
    for layer in per_node:
        key = (layer.family, layer.dtype, tuple(layer.shape.items()))
        first = merged.get(key)
        if first is not None:
            layer = replace(first, nodes=first.nodes + layer.nodes, count=first.count + layer.count)
        merged[key] = layer
    return list(merged.values()), [f"{op} x{count}" for op, count in untuned.items()]


def _scan(model: onnx.ModelProto) -> tuple[list[Layer], Counter[str], dict[str, str]]:
    """Every tunable node as a one-node layer, in graph order; the untuned operators; why
    each Conv, Gemm or MatMul that is not tunable is not.
    """
    graph = model.graph
    shapes = {tensor.name: list(tensor.dims) for tensor in graph.initializer}
    for value in (*graph.input, *graph.value_info, *graph.output):
        dims = list(_dims(value))
        if value.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = [d.dim_value for d in dims]
    layers: list[Layer] = []
    untuned: Counter[str] = Counter()
    reasons: dict[str, str] = {}
    readers = _readers()
    dtype = model_dtype(model)
    int8 = int8_layers(model)  # a quantized model's layers an int8 kernel computes whole
    for index, node in enumerate(graph.node):
        name = node_name(node, index)
        if node.domain not in ("", "ai.onnx"):
            untuned[f"{node.domain}.{node.op_type}"] += 1
            continue
        reader = readers.get(node.op_type)
        if reader is None:
            if node.op_type not in ELEMENTWISE:
                untuned[node.op_type] += 1
            continue
        missing = next((x for x in node.input[:2] if x not in shapes), None)
        if missing is not None:
            raise OctuneError(_no_shape(model, node, name, missing))
        found = reader.read_onnx(onnx_node(node, [shapes[x] for x in node.input[:2]]))
        if isinstance(found, str):
            untuned[f"{node.op_type} ({found})"] += 1
            reasons[name] = found
            continue
        shape, count = found
        try:
            workload = reader.workload(shape)
        except WorkloadError as error:
            untuned[f"{node.op_type} ({error})"] += 1
            reasons[name] = str(error)
            continue
        if name in int8 and count == 1 and _int8_kernel(reader.workload(shape, "int8")):
            dtype_of = "int8"
        else:
            dtype_of = dtype
        layers.append(Layer(reader.name, workload.shape, (name,), count, dtype_of))
    return layers, untuned, reasons


def _int8_kernel(workload: Workload) -> bool:
    """Whether an int8 kernel of the workload's family takes it (a grouped conv that is not
    depthwise has none): where none does, the layer runs in float.
    """
    return any(kernel.takes(workload) is None for kernel in resolve_kernels(workload.family.name))


def _no_shape(model: onnx.ModelProto, node: onnx.NodeProto, name: str, tensor: str) -> str:
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    return (
        f"{model.graph.name or 'the model'}: {node.op_type} node {name!r} has no static shape "
        f"for its input {tensor!r} after ONNX shape inference (opset {opset}): export the model "
        "with static input shapes and standard operators, or convert it to a newer opset"
    )


def onnx_node(node: onnx.NodeProto, inputs: Sequence[Sequence[int]]) -> OnnxNode:
    """``node`` as a family reads it: its attributes as values, strings decoded, and the
    static shapes of its first two inputs.
    """
    attributes = {}
    for attribute in node.attribute:
        value = onnx.helper.get_attribute_value(attribute)
        attributes[attribute.name] = value.decode() if isinstance(value, bytes) else value
    return OnnxNode(node.op_type, attributes, tuple(tuple(shape) for shape in inputs[:2]))


def _readers() -> dict[str, Family]:
    """The family that reads each ONNX operator (``Family.onnx_ops``): the first to name it."""
    readers: dict[str, Family] = {}
    for found in families().values():
        for op in found.onnx_ops:
            readers.setdefault(op, found)
    return readers
