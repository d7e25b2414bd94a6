"""A quantized model's int8 layers: the QDQ pattern around a Conv, Gemm or MatMul that an int8
kernel computes whole.

onnxruntime's quantizer writes each quantized layer (QDQ format; QOperator files reach this
module in their QDQ form, ``octune.networks.qoperator``) as

    x_q -> DequantizeLinear -> Conv | Gemm | MatMul -> [Relu | Clip] -> QuantizeLinear -> y_q
           weights: DequantizeLinear(int8), bias: DequantizeLinear(int32)

which is what ``conv2d_int8``, ``conv2d_depthwise_rows_int8`` and ``gemm_int8`` compute in
integers: x uint8 with a zero
point, weights int8 with zero point 0 (per tensor or per output channel), an int32 bias in
units of x's scale times the weights', and one float multiplier per output channel taking the
int32 sum onto y's uint8 grid (round half to even, saturate), as onnxruntime's QLinearConv.
The activation goes only where saturation already computes it (a ReLU into a zero point of 0,
the quantizer's own calibration makes it so): any other keeps the layer in float.

A layer is int8 only where its uint8 tensors can live as bytes: x and y written by a
QuantizeLinear (and reshaped, perhaps) and read by DequantizeLinear nodes alone, so the runtime
stores them as uint8 and every other reader sees their dequantized floats; none a graph output.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

#: Operators that pass a tensor on as it lies (the same bytes, another shape).
RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
#: Where each operator keeps its output channels in its weights, by (op, transB).
_CHANNEL_AXIS = {("Conv", 0): 0, ("Gemm", 1): 0, ("Gemm", 0): 1, ("MatMul", 0): 1}


@dataclass(frozen=True)
class Int8Layer:
    """One layer an int8 kernel computes: its node, what it folds and its integer operands."""

    node: str  # the Conv, Gemm or MatMul
    nodes: tuple[str, ...]  # it, its activation, its QuantizeLinear
    x: str  # the uint8 input its DequantizeLinear reads
    y: str  # the uint8 output its QuantizeLinear writes
    tensors: tuple[str, ...]  # every uint8 tensor of x and y: they and their reshapes
    weight: np.ndarray  # int8, laid out as the node's weights
    scale: np.ndarray  # float32 per output channel: x_scale * w_scale / y_scale
    bias: np.ndarray  # int32 per output channel, in units of x_scale * w_scale
    x_zero: int
    y_zero: int


def _attributes(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


class _Arrays(Mapping[str, np.ndarray]):
    """A model's constants as arrays, each converted when first asked for: the few scales,
    zero points and weights of its quantized layers, not every weight of the model.
    """

    def __init__(self, tensors: Mapping[str, onnx.TensorProto]) -> None:
        self.tensors = tensors
        self.arrays: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.arrays:
            self.arrays[name] = numpy_helper.to_array(self.tensors[name])
        return self.arrays[name]

    def __contains__(self, name: object) -> bool:
        return name in self.tensors

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)


class _Finder:
    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        tensors = {t.name: t for t in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
                tensors[node.output[0]] = node.attribute[0].t
        self.constants = _Arrays(tensors)
        self.producer = {out: node for node in graph.node for out in node.output}
        self.users: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for tensor in node.input:
                self.users.setdefault(tensor, []).append(node)
        self.outputs = {value.name for value in graph.output}

    def quantization(self, node: onnx.NodeProto | None, op: str) -> tuple[np.ndarray, int] | None:
        """A Q or DQ node's scale (float64) and zero point, where both are constant, the
        zero point one for all (per tensor) and the node quantizes by no blocks.
        """
        if node is None or node.op_type != op or _attributes(node).get("block_size", 0):
            return None
        scale = self.constants.get(node.input[1])
        zero_name = node.input[2] if len(node.input) > 2 else ""
        zero = self.constants.get(zero_name) if zero_name else np.zeros((), np.uint8)
        if scale is None or zero is None or np.unique(zero).size != 1:
            return None
        return scale.astype(np.float64).reshape(-1), int(zero.reshape(-1)[0])

    def activation_uint8(self, node: onnx.NodeProto | None, op: str) -> tuple[float, int] | None:
        """A Q or DQ node of a uint8 activation, per tensor: its scale and zero point."""
        found = self.quantization(node, op)
        if node is None or found is None or found[0].size != 1:
            return None
        zero_name = node.input[2] if len(node.input) > 2 else ""
        if zero_name and self.constants[zero_name].dtype != np.uint8:
            return None
        return float(found[0][0]), found[1]

    def bytes_tensors(self, tensor: str) -> tuple[str, ...]:
        """The tensors that live as uint8 with ``tensor``, or none where it cannot: a
        QuantizeLinear's output and the reshapes of it (a QOperator file flattens its uint8
        tensors), each read by DequantizeLinear nodes (per tensor) and those reshapes alone,
        none a graph output.
        """
        source = self.producer.get(tensor)
        while source is not None and source.op_type in RESHAPES:
            source = self.producer.get(source.input[0])
        if self.activation_uint8(source, "QuantizeLinear") is None:
            return ()
        tree, todo = [], [source.output[0]]  # type: ignore[union-attr]
        while todo:
            name = todo.pop()
            users = self.users.get(name, [])
            if name in self.outputs or not users:
                return ()
            for user in users:
                if user.op_type in RESHAPES:
                    todo.append(user.output[0])
                elif self.activation_uint8(user, "DequantizeLinear") is None:
                    return ()
            tree.append(name)
        return tuple(tree)

    def single_user(self, tensor: str) -> onnx.NodeProto | None:
        users = self.users.get(tensor, [])
        return users[0] if len(users) == 1 and tensor not in self.outputs else None

    def layer(self, node: onnx.NodeProto) -> Int8Layer | None:
        attributes = _attributes(node)
        op = node.op_type
        if op == "Conv" and (
            attributes.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID")
            or len(set(attributes.get("pads", [0]))) != 1
        ):
            return None
        if op == "Gemm" and (
            attributes.get("transA", 0) or attributes.get("alpha", 1.0) != 1.0
            or attributes.get("beta", 1.0) != 1.0
        ):  # fmt: skip
            return None
        axis = _CHANNEL_AXIS.get((op, int(attributes.get("transB", 0))))
        x_dq = self.producer.get(node.input[0])
        x_quant = self.activation_uint8(x_dq, "DequantizeLinear")
        if axis is None or x_dq is None or x_quant is None:
            return None
        before = self.bytes_tensors(x_dq.input[0])
        if not before:
            return None
        weights = self.weights(node.input[1], axis, 4 if op == "Conv" else 2)
        if weights is None:
            return None
        weight, w_scale = weights
        channels = weight.shape[axis]
        x_scale, x_zero = x_quant
        bias = self.bias(node.input[2] if len(node.input) > 2 else "", x_scale * w_scale, channels)
        end = self.output(node)
        if bias is None or end is None:
            return None
        nodes, y, (y_scale, y_zero) = end
        scale = (x_scale * w_scale / y_scale).astype(np.float32)
        tensors = (*before, *self.bytes_tensors(y))
        return Int8Layer(node.name, nodes, x_dq.input[0], y, tensors, weight, scale, bias, x_zero,
                         y_zero)  # fmt: skip

    def weights(self, tensor: str, axis: int, rank: int) -> tuple[np.ndarray, np.ndarray] | None:
        """int8 weights of ``rank`` axes with zero point 0, and their scale per output channel
        (along ``axis``).
        """
        dq = self.producer.get(tensor)
        found = self.quantization(dq, "DequantizeLinear")
        if dq is None or found is None or found[1] != 0:
            return None
        weight, scale = self.constants.get(dq.input[0]), found[0]
        if weight is None or weight.dtype != np.int8 or weight.ndim != rank:
            return None
        channels = weight.shape[axis]
        along = int(_attributes(dq).get("axis", 1)) % rank  # type: ignore[call-overload]
        if scale.size != 1 and (scale.size != channels or along != axis):
            return None
        return weight, np.broadcast_to(scale, (channels,)).copy()

    def bias(self, tensor: str, unit: np.ndarray, channels: int) -> np.ndarray | None:
        """The bias in int32 units of x_scale * w_scale: a DequantizeLinear of int32 at that
        scale as it is, any other constant rounded; zeros where there is none.
        """
        if not tensor:
            return np.zeros(channels, np.int32)
        dq = self.producer.get(tensor)
        found = self.quantization(dq, "DequantizeLinear")
        if found is not None and dq is not None and dq.input[0] in self.constants:
            stored = self.constants[dq.input[0]].astype(np.float64).reshape(-1) - found[1]
            if np.allclose(found[0], unit, rtol=1e-6, atol=0):
                value = stored
            else:
                value = np.rint(stored * found[0] / unit)
        elif tensor in self.constants:
            value = np.rint(self.constants[tensor].astype(np.float64).reshape(-1) / unit)
        else:
            return None
        if value.size not in (1, channels) or np.abs(value).max(initial=0) >= 2**31:
            return None
        return np.broadcast_to(value, (channels,)).astype(np.int32)

    def output(self, node: onnx.NodeProto) -> tuple[tuple[str, ...], str, tuple[float, int]] | None:
        """The nodes from ``node`` to its QuantizeLinear, the uint8 tensor it writes and its
        scale and zero point; None where an activation between them is not saturation's.
        """
        nodes = [node.name]
        after = self.single_user(node.output[0])
        activation = None
        if after is not None and after.op_type in ("Relu", "Clip"):
            activation = after
            nodes.append(after.name)
            after = self.single_user(after.output[0])
        quant = self.activation_uint8(after, "QuantizeLinear")
        if quant is None or after is None or not self.bytes_tensors(after.output[0]):
            return None
        if activation is not None and not self.saturates(activation, *quant):
            return None
        return (*nodes, after.name), after.output[0], quant

    def saturates(self, activation: onnx.NodeProto, scale: float, zero: int) -> bool:
        """Whether quantizing to uint8 at ``scale`` and ``zero`` already clips as the
        activation does (ReLU into a zero point of 0; a Clip whose bounds lie outside the grid).
        """
        bounds = [-np.inf, np.inf] if activation.op_type == "Clip" else [0.0, np.inf]
        for index, name in enumerate(activation.input[1:3]):
            if name and name not in self.constants:
                return False
            if name:
                bounds[index] = float(self.constants[name].reshape(()))
        attributes = _attributes(activation)  # opset 6 keeps Clip's bounds as attributes
        low = float(attributes.get("min", bounds[0]))  # type: ignore[arg-type]
        high = float(attributes.get("max", bounds[1]))  # type: ignore[arg-type]
        return bool(np.rint(low / scale) + zero <= 0 and np.rint(high / scale) + zero >= 255)


def int8_layers(model: onnx.ModelProto) -> Mapping[str, Int8Layer]:
    """The model's layers an int8 kernel computes whole, by node name (empty for a float
    model).
    """
    if not any(node.op_type == "QuantizeLinear" for node in model.graph.node):
        return {}  # a float model: nothing to read
    finder = _Finder(model)
    found = {}
    for node in model.graph.node:
        if node.op_type in ("Conv", "Gemm", "MatMul") and node.domain in ("", "ai.onnx"):
            layer = finder.layer(node)
            if layer is not None:
                found[node.name] = layer
    return found
