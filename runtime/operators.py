"""The ONNX operators the runtime runs, by how it runs them: aliases, an epilogue's functions
and arithmetic, broadcasting functions, reductions, index maps, pools, quantization.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx

ALIASES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Dropout", "Identity"})
#: One-input functions an epilogue applies last, by ONNX operator (Pow: by a constant exponent;
#: Cast: to bool or an integer type, float casts being aliases; Gelu: by its approximation).
UNARY = {
    "Relu": "relu", "Clip": "clip", "Erf": "erf", "Sigmoid": "sigmoid",
    "HardSigmoid": "hardsigmoid", "HardSwish": "hardswish", "Tanh": "tanh",
    "LeakyRelu": "leakyrelu", "Elu": "elu", "Gelu": "gelu", "Softplus": "softplus", "Exp": "exp",
    "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Neg": "neg", "Abs": "abs",
    "Pow": "pow", "Floor": "floor", "Ceil": "ceil", "Round": "round", "Not": "not",
    "Sign": "sign", "Sin": "sin", "Cos": "cos", "Cast": "cast",
}  # fmt: skip
#: Element-wise operators an epilogue takes: with a constant (a broadcast vector) or a tensor
#: that broadcasts along one block of the output's axes.
ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div", "BatchNormalization"})
#: Aliases an epilogue can run through: the same elements in the same order.
RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
#: Broadcasting functions of two or three tensors (``broadcast`` of ``ops.cl``).
FUNCTIONS = {
    "Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow", "Min": "min",
    "Max": "max", "Mod": "mod", "Equal": "equal", "Less": "less", "LessOrEqual": "less_equal",
    "Greater": "greater", "GreaterOrEqual": "greater_equal", "And": "and", "Or": "or",
    "Xor": "xor", "PRelu": "prelu", "Where": "where", "Expand": "expand",
}  # fmt: skip
REDUCTIONS = {
    "ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
    "ReduceL2": "l2", "ReduceSumSquare": "sum_square", "ReduceProd": "prod",
}  # fmt: skip
RESIZE_COORDINATES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                      "tf_half_pixel_for_nn")  # fmt: skip
RESIZE_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
INDEXING = frozenset({"Transpose", "Slice", "Split", "Gather", "Tile", "Pad"})
POOLS = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})
#: A quantized model's QDQ nodes (onnxruntime's quantizer, QDQ format): on weights, folded into
#: float32 constants; on activations, an epilogue's scale and bias, Quantize ending in the
#: ``quantize`` activation (round half to even, saturate to the zero point's type).
QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})
QUANTIZED_RANGES = {onnx.TensorProto.UINT8: (0.0, 255.0), onnx.TensorProto.INT8: (-128.0, 127.0)}
OTHERS = frozenset({"Conv", "Gemm", "MatMul", "Concat", "Softmax", "LayerNormalization",
                    "Constant", "Resize", "Upsample", "ConvTranspose"})  # fmt: skip
SUPPORTED = sorted(
    ALIASES
    | UNARY.keys()
    | ARITHMETIC
    | FUNCTIONS.keys()
    | REDUCTIONS.keys()
    | INDEXING
    | POOLS
    | OTHERS
    | QDQ
)
INTEGER_TYPES = frozenset({onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32,
                            onnx.TensorProto.INT64, onnx.TensorProto.UINT8,
                            onnx.TensorProto.UINT16, onnx.TensorProto.UINT32,
                            onnx.TensorProto.UINT64})  # fmt: skip


FLOAT_INPUTS = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16})


def node_attribute(node: onnx.NodeProto, name: str, default: Any) -> Any:
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


def node_int(node: onnx.NodeProto, name: str, default: int) -> int:
    return int(node_attribute(node, name, default))


def node_float(node: onnx.NodeProto, name: str, default: float) -> float:
    return float(node_attribute(node, name, default))


def node_ints(node: onnx.NodeProto, name: str, default: Sequence[int]) -> list[int]:
    return [int(v) for v in node_attribute(node, name, default)]
