"""Element-wise tails an ONNX exporter writes out that the runtime fuses as one activation:
a unary operator with its parameters, Clip's bounds, SiLU and HardSwish written as a gate,
GELU written with Erf. Read over the loader's tensors (``OnnxLoader`` mixes this in).
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from octune.runtime.operators import INTEGER_TYPES, UNARY, node_attribute, node_float, node_int


class ActivationPatterns:
    """Recognisers over a loaded graph: who reads each tensor, its constants and shapes."""

    constants: dict[str, np.ndarray]
    shapes: dict[str, tuple[int, ...]]
    users: dict[str, list[onnx.NodeProto]]
    outputs: list[str]
    done: set[str]  # nodes already in a step

    def constant(self, node: onnx.NodeProto, tensor: str) -> np.ndarray:
        """A constant operand of ``node``; the loader's raises the one-line error."""
        raise NotImplementedError

    def cast(self, node: onnx.NodeProto) -> str:
        """A Cast as an activation: none (to a float type), bool, or trunc (to an integer)."""
        to = node_int(node, "to", onnx.TensorProto.FLOAT)
        if to == onnx.TensorProto.BOOL:
            return "bool"
        return "trunc" if to in INTEGER_TYPES else "none"

    def activation(self, node: onnx.NodeProto) -> tuple[str, float, float] | None:
        """The node as an epilogue's activation and its two parameters, or None."""
        op = node.op_type
        if op not in UNARY:
            return None
        if op == "Clip":
            return ("clip", *self.clip_bounds(node))
        if op == "Cast":
            return self.cast(node), 0.0, 0.0
        if op == "Pow":
            exponent = self.constants.get(node.input[1])
            if exponent is None or exponent.size != 1:
                return None
            return "pow", float(exponent.reshape(())), 0.0
        if op == "HardSigmoid":
            return "hardsigmoid", node_float(node, "alpha", 0.2), node_float(node, "beta", 0.5)
        if op in ("LeakyRelu", "Elu"):
            return UNARY[op], node_float(node, "alpha", 0.01 if op == "LeakyRelu" else 1.0), 0.0
        if op == "Gelu" and node_attribute(node, "approximate", b"none") == b"tanh":
            return "gelu_tanh", 0.0, 0.0
        return UNARY[op], 0.0, 0.0

    def clip_bounds(self, node: onnx.NodeProto) -> tuple[float, float]:
        bounds = [-math.inf, math.inf]
        for index, name in enumerate(node.input[1:3]):
            if name:
                bounds[index] = float(self.constant(node, name).reshape(()))
        for index, key in enumerate(("min", "max")):  # opset 6 keeps them as attributes
            bounds[index] = node_float(node, key, bounds[index])
        return bounds[0], bounds[1]

    def gate(self, tensor: str) -> tuple[list[onnx.NodeProto], str] | None:
        """SiLU or HardSwish written out: ``tensor * sigmoid(tensor)`` (or HardSigmoid at
        1/6, 1/2) with ``tensor`` read by those two nodes only, or GELU written out (``gelu``):
        the nodes and the activation.
        """
        users = self.users.get(tensor, [])
        if len(users) != 2 or tensor in self.outputs:
            return None
        gelu = self.gelu(tensor, users)
        if gelu is not None:
            return gelu, "gelu"
        gates = [n for n in users if n.op_type in ("Sigmoid", "HardSigmoid")]
        products = [n for n in users if n.op_type == "Mul"]
        if len(gates) != 1 or len(products) != 1:
            return None
        gate, product = gates[0], products[0]
        if (
            sorted(product.input) != sorted([tensor, gate.output[0]])
            or len(self.users.get(gate.output[0], [])) != 1
            or gate.output[0] in self.outputs
            or {gate.name, product.name} & self.done
        ):
            return None
        if gate.op_type == "Sigmoid":
            return [gate, product], "silu"
        alpha, beta = node_float(gate, "alpha", 0.2), node_float(gate, "beta", 0.5)  # float32s
        if math.isclose(alpha, 1 / 6, rel_tol=1e-6) and beta == 0.5:
            return [gate, product], "hardswish"
        return None

    def gelu(self, tensor: str, users: list[onnx.NodeProto]) -> list[onnx.NodeProto] | None:
        """GELU as PyTorch's exporters write it, ``x * (erf(x / sqrt 2) + 1) * 0.5`` (the 0.5
        first or last): its five nodes, each but the last read by the next alone, or None.
        """
        scaled = next((n for n in users if self._by(n, tensor, ("Div", 2**0.5), ("Mul", 2**-0.5))),
                      None)  # fmt: skip
        erf = self._single_user(scaled, "Erf")
        plus = self._single_user(erf, "Add")
        if plus is None or not self._by(plus, erf.output[0], ("Add", 1.0)):
            return None
        other = next(n for n in users if n is not scaled)
        if self._by(other, tensor, ("Mul", 0.5)):  # x * 0.5 first, then times (erf + 1)
            product = self._single_user(other, "Mul")
            pair = sorted([other.output[0], plus.output[0]])
            if product is None or sorted(product.input) != pair:
                return None
            nodes = [scaled, erf, plus, other, product]
        else:  # x times (erf + 1), then * 0.5
            half = self._single_user(other, "Mul")
            if (
                other.op_type != "Mul"
                or sorted(other.input) != sorted([tensor, plus.output[0]])
                or half is None
                or not self._by(half, other.output[0], ("Mul", 0.5))
            ):
                return None
            nodes = [scaled, erf, plus, other, half]
        if any(n.name in self.done or n.output[0] not in self.shapes for n in nodes) or any(
            n.output[0] in self.outputs for n in nodes[:-1]
        ):
            return None
        return nodes

    def _single_user(self, node: onnx.NodeProto | None, op: str) -> onnx.NodeProto | None:
        """The one node that reads ``node``'s output, if it is an ``op``."""
        if node is None or node.output[0] in self.outputs:
            return None
        users = self.users.get(node.output[0], [])
        return users[0] if len(users) == 1 and users[0].op_type == op else None

    def _by(self, node: onnx.NodeProto, tensor: str, *forms: tuple[str, float]) -> bool:
        """Whether ``node`` is ``tensor`` op a scalar constant, for one of ``forms`` (op,
        value; a Div only with the constant second).
        """
        if len(node.input) != 2 or tensor not in node.input:
            return False
        operand = node.input[1] if node.input[0] == tensor else node.input[0]
        value = self.constants.get(operand)
        if value is None or value.size != 1 or (node.op_type == "Div" and operand != node.input[1]):
            return False
        return any(
            node.op_type == op and math.isclose(float(value.reshape(())), v, rel_tol=1e-5)
            for op, v in forms
        )
