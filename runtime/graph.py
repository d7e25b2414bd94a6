"""An ONNX model as the runtime's steps: one step per launch group, in an order that runs.

Loading folds what an inference runtime folds, so a forward pass makes few launches:

* BatchNormalization after a Conv goes into the Conv's weights and a bias;
* the bias, batch-norm, constant scale, residual Add (or product) and activation that follow a
  Conv, Gemm or MatMul, or that follow each other, become one element-wise epilogue
  (``Epilogue``, kernel ``epilogue`` of ``ops.cl``), applied in place after a conv or GEMM;
* Reshape, Flatten, Squeeze, Unsqueeze, Dropout and Identity alias their input: no launch.

A fused step runs where its last node stands in the graph, so every input of every node it
holds (a residual computed on another branch) is ready by then. Conv, Gemm and MatMul nodes get
their family and shape from ``octune.networks.layers``, the same the tuner tunes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from octune.networks.layers import Layer, node_layers
from octune.tuner.errors import OctuneError

ALIASES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Dropout", "Identity"})
ACTIVATIONS = {"Relu": "relu", "Clip": "clip", "Erf": "erf"}
#: Element-wise operators an epilogue takes: with a constant (a broadcast vector) or a tensor
#: of the output's shape.
ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div", "BatchNormalization"})
POOLS = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})
OTHERS = frozenset({"Conv", "Gemm", "MatMul", "Concat", "Softmax", "LayerNormalization",
                    "Transpose", "Constant"})  # fmt: skip
SUPPORTED = sorted(ALIASES | set(ACTIVATIONS) | ARITHMETIC | POOLS | OTHERS)


@dataclass(frozen=True)
class Epilogue:
    """y = act(x * scale[c] + bias[c] (+ or *) other), c = (i // inner) % channels: names of
    constants (scale, bias) and of a tensor of the output's shape (other).
    """

    scale: str | None = None
    bias: str | None = None
    other: str | None = None
    multiply: bool = False  # other multiplies instead of adding
    activation: str = "none"  # none, relu, clip (low..high), erf
    low: float = 0.0
    high: float = 0.0
    inner: int = 1
    channels: int = 1

    @property
    def empty(self) -> bool:
        return (self.scale, self.bias, self.other, self.activation) == (None, None, None, "none")


@dataclass(frozen=True, kw_only=True)
class Step:
    """Nodes that run as one group; ``inputs`` are tensor or constant names, in kernel order."""

    name: str  # the first node's: the layer as tables and messages name it
    nodes: tuple[str, ...]
    ops: tuple[str, ...]
    inputs: tuple[str, ...]
    output: str
    epilogue: Epilogue = field(default_factory=Epilogue)

    @property
    def op(self) -> str:
        return "+".join(self.ops)


@dataclass(frozen=True, kw_only=True)
class Tuned(Step):
    """A Conv (x, weight) or Gemm / MatMul (A, B) through octune's tuned kernels."""

    layer: Layer
    alpha: float = 1.0


@dataclass(frozen=True, kw_only=True)
class Elementwise(Step):
    """The epilogue alone, on one input."""


@dataclass(frozen=True, kw_only=True)
class Pool(Step):
    max: bool
    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right
    include_pad: bool = False


@dataclass(frozen=True, kw_only=True)
class Concat(Step):
    axis: int


@dataclass(frozen=True, kw_only=True)
class Softmax(Step):
    """Over ``length`` elements ``inner`` apart (ONNX before opset 13: the flattened rest)."""

    length: int
    inner: int


@dataclass(frozen=True, kw_only=True)
class LayerNorm(Step):
    """Over the last axis; inputs (x, gamma, beta)."""

    epsilon: float


@dataclass(frozen=True, kw_only=True)
class Transpose(Step):
    perm: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class Alias(Step):
    """The output is the input's buffer, reshaped."""


@dataclass
class Graph:
    name: str
    steps: list[Step]
    shapes: dict[str, tuple[int, ...]]
    constants: dict[str, np.ndarray]
    inputs: list[str]  # the tensors a caller feeds
    outputs: list[str]


def _attribute(node: onnx.NodeProto, name: str, default: Any) -> Any:
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


def _int(node: onnx.NodeProto, name: str, default: int) -> int:
    return int(_attribute(node, name, default))


def _float(node: onnx.NodeProto, name: str, default: float) -> float:
    return float(_attribute(node, name, default))


def _ints(node: onnx.NodeProto, name: str, default: Sequence[int]) -> list[int]:
    return [int(v) for v in _attribute(node, name, default)]


class _Loader:
    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        self.label = graph.name or "the model"
        self.constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.shapes = {name: tuple(v.shape) for name, v in self.constants.items()}
        for value in (*graph.input, *graph.value_info, *graph.output):
            tensor = value.type.tensor_type
            dims = tensor.shape.dim
            if all(d.HasField("dim_value") for d in dims) and tensor.HasField("shape"):
                self.shapes[value.name] = tuple(d.dim_value for d in dims)
        self.nodes = list(graph.node)
        self.position = {node.name: i for i, node in enumerate(self.nodes)}
        self.users: dict[str, list[onnx.NodeProto]] = {}
        for node in self.nodes:
            for tensor in node.input:
                self.users.setdefault(tensor, []).append(node)
        self.outputs = [value.name for value in graph.output]
        self.inputs = [v.name for v in graph.input if v.name not in self.constants]
        for value in graph.input:
            kind = value.type.tensor_type.elem_type
            if value.name in self.inputs and kind != onnx.TensorProto.FLOAT:
                raise OctuneError(
                    f"{self.label}: input '{value.name}' is {onnx.TensorProto.DataType.Name(kind)}"
                    "; octune run feeds float32 inputs"
                )
        self.layers = node_layers(model)
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.done: set[str] = set()

    def fail(self, node: onnx.NodeProto, why: str) -> OctuneError:
        return OctuneError(f"{self.label}: {node.op_type} node '{node.name}' {why}")

    def shape(self, node: onnx.NodeProto, tensor: str) -> tuple[int, ...]:
        found = self.shapes.get(tensor)
        if found is None:
            raise self.fail(node, f"has no static shape for '{tensor}' after shape inference")
        return found

    def constant(self, node: onnx.NodeProto, tensor: str) -> np.ndarray:
        found = self.constants.get(tensor)
        if found is None:
            raise self.fail(node, f"needs '{tensor}' to be a constant (an initializer)")
        return found

    def add_constant(self, name: str, value: np.ndarray) -> str:
        while name in self.constants or name in self.shapes:
            name += "'"
        self.constants[name] = np.ascontiguousarray(value, dtype=np.float32)
        self.shapes[name] = self.constants[name].shape
        return name

    def load(self) -> list[Step]:
        steps: list[tuple[int, Step]] = []
        for node in self.nodes:
            if node.name in self.done:
                continue
            if node.domain not in ("", "ai.onnx") or node.op_type not in SUPPORTED:
                raise self.fail(
                    node, f"is not an operator octune run supports ({', '.join(SUPPORTED)})"
                )
            if node.op_type == "Constant":
                tensor = _attribute(node, "value", None)
                if not isinstance(tensor, onnx.TensorProto):
                    raise self.fail(node, "is not a tensor constant: use value=")
                value = numpy_helper.to_array(tensor)
                self.constants[node.output[0]] = value
                self.shapes[node.output[0]] = value.shape
                self.done.add(node.name)
                continue
            step = self.step(node)
            steps.append((max(self.position[name] for name in step.nodes), step))
        return [step for _, step in sorted(steps, key=lambda pair: pair[0])]

    def step(self, node: onnx.NodeProto) -> Step:
        self.done.add(node.name)
        op, out = node.op_type, node.output[0]
        common = {"name": node.name, "nodes": (node.name,), "ops": (op,), "output": out}
        if op in ("Conv", "Gemm", "MatMul"):
            return self.tuned(node, common)
        if op in ALIASES:
            return Alias(inputs=(node.input[0],), **common)
        if op in POOLS:
            return self.pool(node, common)
        if op == "Concat":
            axis = _int(node, "axis", 0) % len(self.shape(node, out))
            return Concat(inputs=tuple(node.input), axis=axis, **common)
        if op == "Softmax":
            return self.softmax(node, common)
        if op == "LayerNormalization":
            return self.layer_norm(node, common)
        if op == "Transpose":
            rank = len(self.shape(node, out))
            perm = tuple(_ints(node, "perm", range(rank - 1, -1, -1)))
            return Transpose(inputs=(node.input[0],), perm=perm, **common)
        return self.elementwise(node, common)

    def tuned(self, node: onnx.NodeProto, common: dict[str, Any]) -> Step:
        layer = self.layers.get(node.name)
        if layer is None:
            raise self.fail(
                node,
                "has no shape octune's kernels take (conv2d: 2-D, one stride and dilation for "
                "both axes, the same padding on every side)",
            )
        x, w = node.input[0], node.input[1]
        if node.op_type == "Conv":
            self.constant(node, w)
        chain = _Chain(self, node, self.shape(node, node.output[0]))
        if len(node.input) > 2 and node.input[2]:  # Conv's bias, Gemm's C
            bias = self.constant(node, node.input[2]) * _float(node, "beta", 1.0)
            if not chain.add_vector(node, bias, axis_end=1 if node.op_type == "Conv" else -1):
                raise self.fail(node, f"broadcasts its bias {bias.shape} along several axes")
        chain.extend(node.output[0])
        if node.op_type == "Conv" and chain.scale is not None and chain.channel_axis() == 1:
            folded = self.constant(node, w) * chain.scale.reshape(-1, 1, 1, 1)
            w, chain.scale = self.add_constant(f"{w}:folded", folded), None
        alpha = _float(node, "alpha", 1.0)
        return Tuned(layer=layer, alpha=alpha, inputs=(x, w), **chain.finish(common))

    def pool(self, node: onnx.NodeProto, common: dict[str, Any]) -> Step:
        x = node.input[0]
        shape = self.shape(node, x)
        if len(shape) != 4:
            raise self.fail(node, f"pools a {len(shape) - 2}-D input; octune run pools 2-D")
        if node.op_type.startswith("Global"):
            kernel, strides, pads = list(shape[2:]), [1, 1], [0, 0, 0, 0]
        else:
            kernel = _ints(node, "kernel_shape", ())
            strides = _ints(node, "strides", [1, 1])
            pads = _ints(node, "pads", [0, 0, 0, 0])
            if _attribute(node, "auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID"):
                raise self.fail(node, "pads with auto_pad SAME: give explicit pads")
            if _ints(node, "dilations", [1, 1]) != [1, 1]:
                raise self.fail(node, "has dilations: octune run pools dense windows")
        return Pool(
            inputs=(x,),
            max="Max" in node.op_type,
            kernel=(kernel[0], kernel[1]),
            strides=(strides[0], strides[1]),
            pads=(pads[0], pads[1], pads[2], pads[3]),
            include_pad=bool(_int(node, "count_include_pad", 0)),
            **common,
        )

    def softmax(self, node: onnx.NodeProto, common: dict[str, Any]) -> Step:
        shape = self.shape(node, node.output[0])
        axis = _int(node, "axis", -1 if self.opset >= 13 else 1) % len(shape)
        if self.opset < 13:
            length, inner = math.prod(shape[axis:]), 1
        else:
            length, inner = shape[axis], math.prod(shape[axis + 1 :])
        return Softmax(inputs=(node.input[0],), length=length, inner=inner, **common)

    def layer_norm(self, node: onnx.NodeProto, common: dict[str, Any]) -> Step:
        rank = len(self.shape(node, node.input[0]))
        if _int(node, "axis", -1) % rank != rank - 1:
            raise self.fail(node, "normalises more than the last axis; octune run takes axis -1")
        if len(node.input) < 3 or len(node.output) > 1:
            raise self.fail(node, "needs a bias and gives mean and variance: not supported")
        for weight in node.input[1:3]:
            self.constant(node, weight)
        epsilon = _float(node, "epsilon", 1e-5)
        return LayerNorm(inputs=tuple(node.input[:3]), epsilon=epsilon, **common)

    def elementwise(self, node: onnx.NodeProto, common: dict[str, Any]) -> Step:
        """An epilogue of its own: x is the node's first tensor input (not a constant)."""
        tensors = [name for name in node.input[:2] if name and name not in self.constants]
        if not tensors:
            raise self.fail(node, "computes on constants only: fold it before exporting")
        if node.op_type in ("Sub", "Div") and tensors[0] != node.input[0]:
            raise self.fail(node, "has its tensor second: octune run takes constant - x / x")
        x = tensors[0]
        chain = _Chain(self, node, self.shape(node, node.output[0]))
        if not chain.absorb(node, x):
            raise self.fail(node, "broadcasts a constant along several axes: not supported")
        chain.extend(node.output[0])
        return Elementwise(inputs=(x,), **chain.finish(common))


class _Chain:
    """The epilogue being gathered after one node, in float64 until ``finish``."""

    def __init__(self, loader: _Loader, first: onnx.NodeProto, shape: tuple[int, ...]) -> None:
        self.loader = loader
        self.shape = shape
        self.nodes = [first]
        self.scale: np.ndarray | None = None
        self.bias: np.ndarray | None = None
        self.inner, self.channels = 1, 1
        self.other: str | None = None
        self.multiply = False
        self.activation, self.low, self.high = "none", 0.0, 0.0

    def channel_axis(self) -> int | None:
        """The axis scale and bias run along, where they run along exactly one."""
        for axis in range(len(self.shape)):
            if (
                self.shape[axis] == self.channels
                and math.prod(self.shape[axis + 1 :]) == self.inner
            ):
                return axis
        return None

    def extend(self, tensor: str) -> None:
        """Absorb the nodes that follow while each is the only reader of the one before."""
        loader = self.loader
        while tensor not in loader.outputs and len(users := loader.users.get(tensor, [])) == 1:
            node = users[0]
            if node.name in loader.done or node.op_type not in ARITHMETIC | ACTIVATIONS.keys():
                return
            if node.op_type in ("Sub", "Div") and node.input[0] != tensor:
                return
            if not self.absorb(node, tensor):
                return
            self.nodes.append(node)
            loader.done.add(node.name)
            tensor = node.output[0]

    def absorb(self, node: onnx.NodeProto, tensor: str) -> bool:
        """Take ``node`` (reading ``tensor``) into the epilogue, or say it cannot. After a
        tensor operand, only constants that commute with it follow: added after an addition,
        multiplied after a product.
        """
        if self.activation != "none" or node.output[0] not in self.loader.shapes:
            return False
        op, loader = node.op_type, self.loader
        if op in ACTIVATIONS:
            self.activation = ACTIVATIONS[op]
            if op == "Clip":
                self.low, self.high = self._clip_bounds(node)
            return True
        if op == "BatchNormalization":
            if self.other is not None:
                return False
            gamma, beta, mean, var = (
                loader.constant(node, name).astype(np.float64) for name in node.input[1:5]
            )
            scale = gamma / np.sqrt(var + _float(node, "epsilon", 1e-5))
            return self.scale_by(node, scale, axis_end=1) and self.add_vector(
                node, beta - mean * scale, axis_end=1
            )
        operands = [name for name in node.input if name != tensor] or [tensor]
        operand = operands[0]
        if operand in loader.constants:
            value = loader.constants[operand].astype(np.float64)
            if op in ("Add", "Sub"):
                if self.multiply:
                    return False
                return self.add_vector(node, value if op == "Add" else -value)
            if self.other is not None and not self.multiply:
                return False
            return self.scale_by(node, value if op == "Mul" else 1.0 / value)
        if op not in ("Add", "Mul") or self.other is not None:
            return False
        if loader.shapes.get(operand) != self.shape:
            raise loader.fail(node, f"broadcasts {loader.shapes.get(operand)} to {self.shape}: "
                              "octune run adds and multiplies tensors of one shape")  # fmt: skip
        self.other, self.multiply = operand, op == "Mul"
        return True

    def _clip_bounds(self, node: onnx.NodeProto) -> tuple[float, float]:
        bounds = [-math.inf, math.inf]
        for index, name in enumerate(node.input[1:3]):
            if name:
                bounds[index] = float(self.loader.constant(node, name))
        for index, key in enumerate(("min", "max")):  # opset 6 keeps them as attributes
            bounds[index] = _float(node, key, bounds[index])
        return bounds[0], bounds[1]

    def _vector(
        self, node: onnx.NodeProto, value: np.ndarray, axis_end: int | None
    ) -> tuple[np.ndarray, int, int] | None:
        """``value`` as a vector along one block of the output's axes (its inner and channel
        counts), or None where it broadcasts otherwise. ``axis_end``: a per-channel vector of
        a conv (axis 1) or GEMM (axis -1), whose shape is just (channels,).
        """
        shape = self.shape
        if axis_end is not None and value.ndim == 1 and value.size > 1:
            end = axis_end % len(shape)
            value = value.reshape(value.shape + (1,) * (len(shape) - end - 1))
        if value.ndim > len(shape):
            raise self.loader.fail(node, f"broadcasts {value.shape} beyond its output {shape}")
        dims = (1,) * (len(shape) - value.ndim) + value.shape
        wide = [axis for axis, size in enumerate(dims) if size != 1]
        if not wide:
            return value.reshape(1), 1, 1
        first, last = wide[0], wide[-1]
        if list(dims[first : last + 1]) != list(shape[first : last + 1]):
            return None
        return value.reshape(-1), math.prod(shape[last + 1 :]), math.prod(shape[first : last + 1])

    def _align(self, vector: tuple[np.ndarray, int, int] | None) -> np.ndarray | None:
        """The vector at the chain's broadcast, which it takes on if it has none yet."""
        if vector is None:
            return None
        value, inner, channels = vector
        if channels == 1:
            return np.repeat(value, self.channels)
        if self.channels == 1:
            self.inner, self.channels = inner, channels
            self.scale = None if self.scale is None else np.repeat(self.scale, channels)
            self.bias = None if self.bias is None else np.repeat(self.bias, channels)
            return value
        return value if (inner, channels) == (self.inner, self.channels) else None

    def scale_by(
        self, node: onnx.NodeProto, value: np.ndarray, axis_end: int | None = None
    ) -> bool:
        vector = self._align(self._vector(node, value, axis_end))
        if vector is None:
            return False
        self.scale = vector if self.scale is None else self.scale * vector
        self.bias = None if self.bias is None else self.bias * vector
        return True

    def add_vector(
        self, node: onnx.NodeProto, value: np.ndarray, axis_end: int | None = None
    ) -> bool:
        vector = self._align(self._vector(node, value, axis_end))
        if vector is None:
            return False
        self.bias = vector if self.bias is None else self.bias + vector
        return True

    def finish(self, common: Mapping[str, Any]) -> dict[str, Any]:
        loader, last = self.loader, self.nodes[-1]
        name = str(common["name"])
        epilogue = Epilogue(
            scale=None if self.scale is None else loader.add_constant(f"{name}:scale", self.scale),
            bias=None if self.bias is None else loader.add_constant(f"{name}:bias", self.bias),
            other=self.other,
            multiply=self.multiply,
            activation=self.activation,
            low=self.low,
            high=self.high,
            inner=self.inner,
            channels=self.channels,
        )
        return {
            **common,
            "nodes": tuple(node.name for node in self.nodes),
            "ops": tuple(node.op_type for node in self.nodes),
            "output": last.output[0],
            "epilogue": epilogue,
        }


def load_graph(model: onnx.ModelProto) -> Graph:
    """The steps of a model as ``octune.networks.layers.load_model`` gives it (shapes
    inferred, nodes named); a one-line OctuneError for what the runtime cannot run.
    """
    loader = _Loader(model)
    steps = loader.load()
    for tensor in (*loader.inputs, *(s.output for s in steps)):
        if tensor not in loader.shapes:
            raise OctuneError(f"{loader.label}: tensor '{tensor}' has no static shape")
    return Graph(
        name=loader.label,
        steps=steps,
        shapes=loader.shapes,
        constants=loader.constants,
        inputs=loader.inputs,
        outputs=loader.outputs,
    )
