"""A small ONNX graph builder for the built-in networks: named nodes, seeded weights.

Weights are drawn from one seeded generator in the order the graph is built, so a network is
the same bytes on every machine. They are scaled so activations stay O(1) through fifty layers
(He init before a ReLU, BatchNorm gains near one), which keeps a runtime's comparison against
onnxruntime meaningful without any trained weights to download.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17  # LayerNormalization; every other operator here is older

Dim = int | str  # a static size, or a symbolic one ("batch") that load_model fixes


class GraphBuilder:
    """Nodes whose single output tensor carries the node's name, so a node name says both."""

    def __init__(self, name: str, seed: int, weights: bool = True) -> None:
        self.name = name
        self.weights = weights
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def input(self, name: str, shape: Sequence[Dim]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def constant(self, name: str, value: np.ndarray) -> str:
        """An initializer that shape inference must read (a Reshape's shape, Clip's bounds)."""
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def parameter(self, name: str, shape: Sequence[int], std: float, mean: float = 0.0) -> str:
        normal = self.rng.standard_normal
        return self._weight(name, shape, lambda size: mean + std * normal(size, dtype=np.float32))

    def uniform(self, name: str, shape: Sequence[int], low: float, high: float) -> str:
        return self._weight(name, shape, lambda size: self.rng.uniform(low, high, size))

    def _weight(
        self, name: str, shape: Sequence[int], draw: Callable[[tuple[int, ...]], np.ndarray]
    ) -> str:
        """A float weight, or with ``weights=False`` a graph input of its shape: tuning needs
        only the shapes, and skips drawing and copying a hundred megabytes.
        """
        if not self.weights:
            return self.input(name, shape)
        return self.constant(name, draw(tuple(shape)).astype(np.float32))

    def node(self, op: str, inputs: Sequence[str], name: str, **attributes: object) -> str:
        self.nodes.append(helper.make_node(op, list(inputs), [name], name=name, **attributes))
        return name

    def conv(
        self,
        x: str,
        name: str,
        c_in: int,
        c_out: int,
        kernel: int,
        stride: int = 1,
        pad: int | None = None,
        groups: int = 1,
        bias: bool = False,
    ) -> str:
        """A square Conv, padded to keep the size (``kernel // 2``) unless told otherwise."""
        fan_in = c_in // groups * kernel * kernel
        shape = (c_out, c_in // groups, kernel, kernel)
        inputs = [x, self.parameter(f"{name}.weight", shape, math.sqrt(2 / fan_in))]
        if bias:
            inputs.append(self.parameter(f"{name}.bias", (c_out,), 0.01))
        pad = kernel // 2 if pad is None else pad
        return self.node(
            "Conv", inputs, name, kernel_shape=[kernel, kernel], strides=[stride, stride],
            pads=[pad] * 4, group=groups,
        )  # fmt: skip

    def batch_norm(self, x: str, name: str, channels: int, gain: float = 1.0) -> str:
        """Inference BatchNorm with random statistics; ``gain`` scales its output (below one
        on a residual branch, so sixteen residual additions do not blow the sum up).
        """
        scale = self.uniform(f"{name}.weight", (channels,), 0.8 * gain, 1.2 * gain)
        shift = self.parameter(f"{name}.bias", (channels,), 0.1)
        mean = self.parameter(f"{name}.running_mean", (channels,), 0.1)
        var = self.uniform(f"{name}.running_var", (channels,), 0.8, 1.2)
        return self.node("BatchNormalization", [x, scale, shift, mean, var], name, epsilon=1e-5)

    def relu(self, x: str, name: str) -> str:
        return self.node("Relu", [x], name)

    def relu6(self, x: str, name: str) -> str:
        low = self.constant(f"{name}.min", np.array(0.0, dtype=np.float32))
        high = self.constant(f"{name}.max", np.array(6.0, dtype=np.float32))
        return self.node("Clip", [x, low, high], name)

    def linear(self, x: str, name: str, c_in: int, c_out: int) -> str:
        """A fully connected layer as PyTorch exports it: Gemm with the weight transposed."""
        weight = self.parameter(f"{name}.weight", (c_out, c_in), math.sqrt(1 / c_in))
        bias = self.parameter(f"{name}.bias", (c_out,), 0.01)
        return self.node("Gemm", [x, weight, bias], name, transB=1)

    def model(self, output: str, shape: Sequence[Dim]) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            self.name,
            self.inputs,
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, list(shape))],
            self.initializers,
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="octune"
        )
        model.ir_version = 8  # onnxruntime releases of the last years all read IR 8
        return model
