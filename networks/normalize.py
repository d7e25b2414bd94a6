"""Models as exporters write them, made plain before octune reads them.

PyTorch's TorchScript and dynamo exporters, tf2onnx and the model zoo write graphs full of
bookkeeping: ``Identity`` over initializers, ``Constant`` nodes feeding ``Clip`` bounds and
``Reshape`` shapes, ``Shape → Gather → Concat → Reshape`` chains that compute a size the
dimensions already fix, ``Cast`` of constants, ``Dropout`` and no-op ``Slice``/``Unsqueeze``.
octune does not re-implement those passes: onnxruntime's basic graph optimisations (constant
folding, redundant-node elimination, Conv/BatchNorm/Add/Mul fusion; every one of them
semantics-preserving and free of contrib operators) rewrite the model once the dynamic
dimensions have sizes, and ONNX shape inference then gives every tensor its static shape.

onnxruntime is the library octune already checks its runtime against, so what it folds is
folded exactly as the reference computes it; onnxsim would add a dependency to do the same
through the same onnxruntime. ``benchmarks/zoo.py`` measures what the pass takes.

Quantized models in onnxruntime's QOperator format (QLinearConv and the like) are first
rewritten in their QDQ form (``octune.networks.qoperator``), so one reader serves both.

One rewrite is octune's own: an ``Einsum`` that is a (batched) matrix product, as attention
layers write it (``bhid,bhjd->bhij``), becomes a ``MatMul`` with its operands transposed where
the equation says, so the tuner tunes it and the runtime runs it as any other MatMul.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
from onnx import helper

from octune.core.errors import OctuneError
from octune.networks.qoperator import qdq_form

#: protobuf cannot hold a model past 2 GiB in one message.
LIMIT_BYTES = 2**31 - 1


def normalize(model: onnx.ModelProto, label: str) -> onnx.ModelProto:
    """``model`` with constants folded and no-ops removed by onnxruntime's basic level (its
    shapes must be static for ``Shape`` chains to fold); node names are kept. A model with
    operators of other domains, which onnxruntime cannot load, is left as it is: its tunable
    layers can still be read, and ``octune run`` names the foreign operator.
    """
    import onnxruntime as ort

    model = qdq_form(model)
    if any(node.domain not in ("", "ai.onnx") for node in model.graph.node):
        return einsums_as_matmuls(model)
    if model.ByteSize() > LIMIT_BYTES:
        raise OctuneError(
            f"{label} is {model.ByteSize() / 2**30:.1f} GiB in memory: octune reads models "
            "under 2 GiB (protobuf's limit)"
        )
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.log_severity_level = 3  # onnxruntime's warnings are about its own kernels
    with tempfile.TemporaryDirectory(prefix="octune-normalize-") as folder:
        options.optimized_model_filepath = str(Path(folder) / "normalized.onnx")
        try:
            ort.InferenceSession(
                model.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
        except Exception as error:  # onnxruntime raises its own Fail / InvalidGraph types
            why = _first_line(error)
            raise OctuneError(f"{label}: onnxruntime cannot load it: {why}") from None
        normalized = onnx.load(options.optimized_model_filepath)
    normalized.graph.name = model.graph.name
    return einsums_as_matmuls(normalized)


def einsums_as_matmuls(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every two-operand Einsum that is a batched matrix product, as Transpose and MatMul
    nodes (in place); any other Einsum is left for the runtime to name.
    """
    nodes: list[onnx.NodeProto] = []
    for node in model.graph.node:
        plan = _matmul_plan(node) if node.op_type == "Einsum" else None
        if plan is None:
            nodes.append(node)
            continue
        inputs = list(node.input)
        for index, transposed in enumerate(plan):
            if transposed:
                rank = len(_terms(node)[index])
                perm = [*range(rank - 2), rank - 1, rank - 2]
                name = f"{node.name}:transpose{index}"
                nodes.append(helper.make_node("Transpose", [inputs[index]], [name], name=name,
                                              perm=perm))  # fmt: skip
                inputs[index] = name
        nodes.append(helper.make_node("MatMul", inputs, list(node.output), name=node.name))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _terms(node: onnx.NodeProto) -> list[str]:
    equation = next(a.s for a in node.attribute if a.name == "equation").decode()
    inputs, _, output = equation.replace(" ", "").partition("->")
    return [*inputs.split(","), output]


def _matmul_plan(node: onnx.NodeProto) -> tuple[bool, bool] | None:
    """Whether each operand needs its last two axes swapped for ``a @ b``, or None where the
    Einsum is no batched matrix product (shared leading axes in one order, one contracted).
    """
    terms = _terms(node)
    if len(terms) != 3 or "..." in "".join(terms) or not terms[2]:
        return None
    a, b, out = terms
    if len(set(a)) != len(a) or len(set(b)) != len(b) or len(a) != len(b) or len(a) < 2:
        return None
    batch, (i, j) = out[:-2], out[-2:]
    if a[:-2] != batch or b[:-2] != batch:
        return None
    contracted = set(a[-2:]) - {i}
    if len(contracted) != 1 or set(a[-2:]) != {i, *contracted} or i == j:
        return None
    (k,) = contracted
    if set(b[-2:]) != {k, j}:
        return None
    return a[-2:] == k + i, b[-2:] == j + k


def _first_line(error: Exception) -> str:
    text = str(error).replace("\n", " ").strip()
    return text[:300] or type(error).__name__
