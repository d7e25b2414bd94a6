"""The element-wise chain that follows a Conv, Gemm or MatMul (bias, batch-norm, scale,
residual, gate, activation, quantization), gathered in float64 and fused into the layer's
epilogue (``steps.Epilogue``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import onnx

from octune.core.errors import OctuneError
from octune.runtime import layout
from octune.runtime.operators import ARITHMETIC, QDQ, RESHAPES, node_float
from octune.runtime.steps import Epilogue


class ChainLoader(Protocol):
    """What a chain reads of the model being loaded (``onnx_loader.OnnxLoader`` is one): its
    tensors, their readers, the nodes already taken, and how it reads an activation, a gate
    and a quantization.
    """

    shapes: dict[str, tuple[int, ...]]
    constants: dict[str, np.ndarray]
    typed: dict[str, str]
    users: dict[str, list[onnx.NodeProto]]
    outputs: list[str]
    done: set[str]

    def fail(self, node: onnx.NodeProto, why: str) -> OctuneError: ...
    def constant(self, node: onnx.NodeProto, tensor: str) -> np.ndarray: ...
    def add_constant(self, name: str, value: np.ndarray, typed: bool = False) -> str: ...
    def quantization(self, node: onnx.NodeProto) -> tuple[np.ndarray, np.ndarray, int]: ...
    def quantized_range(self, node: onnx.NodeProto) -> tuple[float, float]: ...
    def activation(self, node: onnx.NodeProto) -> tuple[str, float, float] | None: ...
    def gate(self, tensor: str) -> tuple[list[onnx.NodeProto], str] | None: ...


class EpilogueChain:
    """The epilogue being gathered after one node, in float64 until ``finish``."""

    def __init__(self, loader: ChainLoader, first: onnx.NodeProto, shape: tuple[int, ...]) -> None:
        self.loader = loader
        self.shape = self.first_shape = shape  # the chain's shape: reshapes pass it on
        self.nodes = [first]
        self.scale: np.ndarray | None = None
        self.bias: np.ndarray | None = None
        self.inner, self.channels = 1, 1
        self.other: str | None = None
        self.other_inner, self.other_size = 1, 1
        self.multiply = False
        self.activation, self.low, self.high = "none", 0.0, 0.0
        self.writes_bytes = False  # whether the chain may end in a uint8 tensor

    def channel_axis(self) -> int | None:
        """The axis of the first node's output scale and bias run along, where they run along
        exactly one.
        """
        shape = self.first_shape
        for axis in range(len(shape)):
            if shape[axis] == self.channels and math.prod(shape[axis + 1 :]) == self.inner:
                return axis
        return None

    def extend(self, tensor: str) -> None:
        """Absorb the nodes that follow while each is the only reader of the one before (or
        the two nodes of a SiLU or HardSwish written out).
        """
        loader = self.loader
        while tensor not in loader.outputs and tensor not in loader.typed:
            reshaped = self.reshape_before_more(tensor)
            if reshaped is not None:  # the same elements in the same order: nothing to do
                self.nodes.append(reshaped)
                loader.done.add(reshaped.name)
                tensor = reshaped.output[0]
                self.shape = loader.shapes[tensor]
                continue
            gated = loader.gate(tensor)
            if gated is not None and self.activation == "none":
                self.activation = gated[1]
                self.nodes.extend(gated[0])
                loader.done.update(node.name for node in gated[0])
                tensor = gated[0][-1].output[0]
                continue
            users = loader.users.get(tensor, [])
            if len(users) != 1:
                return
            node = users[0]
            if node.name in loader.done or (
                node.op_type not in ARITHMETIC | QDQ and loader.activation(node) is None
            ):
                return
            if node.op_type in ("Sub", "Div") and node.input[0] != tensor:
                return
            if not self.absorb(node, tensor):
                return
            self.nodes.append(node)
            loader.done.add(node.name)
            tensor = node.output[0]

    def reshape_before_more(self, tensor: str) -> onnx.NodeProto | None:
        """The reshape that alone reads ``tensor``, where what alone reads its output could
        join the epilogue too (a GEMM's bias, then GELU after ORT's 3-D -> 2-D -> 3-D
        reshapes): the chain goes through it.
        """
        loader = self.loader
        users = loader.users.get(tensor, [])
        if len(users) != 1 or users[0].op_type not in RESHAPES or users[0].name in loader.done:
            return None
        out = users[0].output[0]
        if out in loader.outputs or out not in loader.shapes:
            return None
        if loader.gate(out) is not None:
            return users[0]
        after = loader.users.get(out, [])
        if len(after) != 1 or after[0].name in loader.done:
            return None
        joins = after[0].op_type in ARITHMETIC or loader.activation(after[0]) is not None
        return users[0] if joins else None

    def absorb(self, node: onnx.NodeProto, tensor: str) -> bool:
        """Take ``node`` (reading ``tensor``) into the epilogue, or say it cannot. After a
        tensor operand, only constants that commute with it follow: added after an addition,
        multiplied after a product.
        """
        if self.activation != "none" or node.output[0] not in self.loader.shapes:
            return False
        op, loader = node.op_type, self.loader
        if node.output[0] in loader.typed and not self.writes_bytes:
            return False
        if op in QDQ:
            return self.quantize(node) if op == "QuantizeLinear" else self.dequantize(node)
        activation = loader.activation(node)
        if activation is not None:
            if loader.shapes[node.output[0]] != self.shape:
                return False
            self.activation, self.low, self.high = activation
            return True
        if op == "BatchNormalization":
            if self.other is not None:
                return False
            gamma, beta, mean, var = (
                loader.constant(node, name).astype(np.float64) for name in node.input[1:5]
            )
            scale = gamma / np.sqrt(var + node_float(node, "epsilon", 1e-5))
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
        found = layout.block(loader.shapes.get(operand, ()), self.shape)
        if found is None or loader.shapes.get(node.output[0]) != self.shape:
            return False
        self.other, self.multiply = operand, op == "Mul"
        self.other_inner, self.other_size = found
        return True

    def quantize(self, node: onnx.NodeProto) -> bool:
        """QuantizeLinear: x / scale + zero, rounded half to even and saturated (the
        ``quantize`` activation). Per tensor: activations are quantized so.
        """
        scale, point, _ = self.loader.quantization(node)
        if scale.size != 1 or self.other is not None:
            return False
        self.scale_by(node, 1.0 / scale.reshape(1))
        self.add_vector(node, point.reshape(1))
        self.activation = "quantize"
        self.low, self.high = self.loader.quantized_range(node)
        return True

    def dequantize(self, node: onnx.NodeProto) -> bool:
        """DequantizeLinear: (x - zero) * scale, per tensor."""
        scale, point, _ = self.loader.quantization(node)
        if scale.size != 1 or self.other is not None:
            return False
        return self.add_vector(node, -point.reshape(1)) and self.scale_by(node, scale.reshape(1))

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
            other_inner=self.other_inner,
            other_size=self.other_size,
        )
        return {
            **common,
            "nodes": tuple(node.name for node in self.nodes),
            "ops": tuple(node.op_type for node in self.nodes),
            "output": last.output[0],
            "epilogue": epilogue,
        }
