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
through the same onnxruntime. ``benchmarks/zoo.py`` measures what the pass removes.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx

from octune.tuner.errors import OctuneError

#: protobuf cannot hold a model past 2 GiB in one message.
LIMIT_BYTES = 2**31 - 1


def normalize(model: onnx.ModelProto, label: str) -> onnx.ModelProto:
    """``model`` with constants folded and no-ops removed by onnxruntime's basic level (its
    shapes must be static for ``Shape`` chains to fold); node names are kept. A model with
    operators of other domains, which onnxruntime cannot load, is left as it is: its tunable
    layers can still be read, and ``octune run`` names the foreign operator.
    """
    import onnxruntime as ort

    if any(node.domain not in ("", "ai.onnx") for node in model.graph.node):
        return model
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
    return normalized


def _first_line(error: Exception) -> str:
    text = str(error).replace("\n", " ").strip()
    return text[:300] or type(error).__name__
