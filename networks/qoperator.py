"""Quantized models in onnxruntime's QOperator format, rewritten in their QDQ form.

onnxruntime's quantizer writes a quantized model two ways: QDQ (QuantizeLinear and
DequantizeLinear around float operators) and QOperator (QLinearConv, QLinearMatMul and
onnxruntime's com.microsoft QGemm and QLinear* operators: ``FORMS``). A QLinear node
computes, by its definition, its float operator on its dequantized inputs, quantized to its
output's scale and zero point: so each becomes exactly that, and one reader
(``octune.runtime.onnx_loader``, the tuner's layer extraction) serves both formats. The rewrite
keeps every tensor name, so an output and the layers a report names are the file's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from octune.core.errors import OctuneError

MICROSOFT = "com.microsoft"


@dataclass(frozen=True)
class _Form:
    """Where a QLinear node's quantized inputs (value, scale, zero point triples, from
    ``first``, ``count`` of them, or to the end when None) and its output's scale and zero
    point lie, and the float operator it computes.
    """

    op: str
    first: int
    count: int | None
    output: int  # index of the output's scale; its zero point follows (absent: a float output)
    bias: int | None = None  # an int32 bias at the product's scale (the two inputs' scales)


FORMS: dict[tuple[str, str], _Form] = {
    ("", "QLinearConv"): _Form("Conv", 0, 2, 6, bias=8),
    (MICROSOFT, "QGemm"): _Form("Gemm", 0, 2, 7, bias=6),
    ("", "QLinearMatMul"): _Form("MatMul", 0, 2, 6),
    (MICROSOFT, "QLinearAdd"): _Form("Add", 0, 2, 6),
    (MICROSOFT, "QLinearMul"): _Form("Mul", 0, 2, 6),
    (MICROSOFT, "QLinearConcat"): _Form("Concat", 2, None, 0),
    (MICROSOFT, "QLinearGlobalAveragePool"): _Form("GlobalAveragePool", 0, 1, 3),
    (MICROSOFT, "QLinearAveragePool"): _Form("AveragePool", 0, 1, 3),
    (MICROSOFT, "QLinearSigmoid"): _Form("Sigmoid", 0, 1, 3),
    (MICROSOFT, "QLinearLeakyRelu"): _Form("LeakyRelu", 0, 1, 3),
}


def _input(node: onnx.NodeProto, index: int) -> str:
    return node.input[index] if index < len(node.input) else ""


def qdq_form(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every QLinear node of ``FORMS`` as DequantizeLinear, its float operator
    and QuantizeLinear (in place); other nodes as they were.
    """
    if not any((n.domain or "", n.op_type) in FORMS for n in model.graph.node):
        return model
    graph = model.graph
    constants = {t.name: t for t in graph.initializer}
    nodes: list[onnx.NodeProto] = []
    dequantized: dict[tuple[str, str, str], str] = {}

    def dequantize(value: str, scale: str, zero: str, axis: int = 1) -> str:
        key = (value, scale, zero)
        if key not in dequantized:
            # One value dequantized at several scales (PyTorch's exporter shares equal tensors:
            # the zero biases of a fused batch-norm) is one node, with a name of its own, each.
            count = sum(1 for other in dequantized if other[0] == value)
            name = f"{value}:dequantized" + (f":{count}" if count else "")
            inputs = [value, scale, zero] if zero else [value, scale]
            nodes.append(helper.make_node("DequantizeLinear", inputs, [name], name=name,
                                          axis=axis))  # fmt: skip
            dequantized[key] = name
        return dequantized[key]

    for node in graph.node:
        form = FORMS.get((node.domain or "", node.op_type))
        if form is None:
            nodes.append(node)
            continue
        end = len(node.input) if form.count is None else form.first + 3 * form.count
        floats = []
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        for at in range(form.first, end, 3):
            axis = 1  # per tensor, or per output channel: a conv's weights, Gemm's B
            if at == 3 and form.op in ("Conv", "Gemm"):
                axis = 0 if form.op == "Conv" or attributes.get("transB", 0) else 1
            floats.append(dequantize(*(_input(node, at + i) for i in range(3)), axis))
        if form.bias is not None and _input(node, form.bias):
            floats.append(_bias(node, form.bias, constants, graph, dequantize))
        if attributes.pop("channels_last", 0):
            raise OctuneError(f"{node.op_type} node '{node.name}' is channels-last: not supported")
        out = node.output[0]
        scale, zero = _input(node, form.output), _input(node, form.output + 1)
        result = f"{out}:float" if scale else out
        nodes.append(helper.make_node(form.op, floats, [result], name=node.name, **attributes))
        if not scale:
            continue
        inputs = [result, scale, zero] if zero else [result, scale]
        nodes.append(
            helper.make_node("QuantizeLinear", inputs, [out], name=f"{node.name}:quantize")
        )
    del graph.node[:]
    graph.node.extend(nodes)
    if not any(n.domain == MICROSOFT for n in graph.node):
        kept = [o for o in model.opset_import if o.domain != MICROSOFT]
        del model.opset_import[:]
        model.opset_import.extend(kept)
    return model


def _bias(
    node: onnx.NodeProto,
    index: int,
    constants: dict[str, onnx.TensorProto],
    graph: onnx.GraphProto,
    dequantize: Callable[[str, str, str, int], str],
) -> str:
    """A QLinearConv's or QGemm's int32 bias (input ``index``), dequantized with the scale it
    was quantized with: the input's scale times each output channel's weight scale, zero 0.
    """
    x_scale, w_scale = (constants.get(_input(node, i)) for i in (1, 4))
    if x_scale is None or w_scale is None:
        raise OctuneError(f"{node.op_type} node '{node.name}' needs constant scales for its bias")
    scale = numpy_helper.to_array(x_scale).astype(np.float32) * numpy_helper.to_array(w_scale)
    name = f"{node.name}:bias_scale"
    graph.initializer.append(numpy_helper.from_array(scale.astype(np.float32).reshape(-1), name))
    return dequantize(_input(node, index), name, "", 0)
