"""The runtime's forward pass against onnxruntime's CPU provider, on the same weights and inputs.

A tensor agrees when max |octune - onnxruntime| <= its tolerance x max |onnxruntime| over it:
relative to the tensor's magnitude, so that ReLU's zeros and softmax's small probabilities
neither hide a wrong kernel nor fail a right one. float32 kernels that sum in other orders
than onnxruntime's differ by about 1e-6 of that per layer, so the float32 tolerance is
``TOLERANCE``; a wrong index or a dropped term differs by the magnitude itself. Every step's
output is kept on the device, so a mismatch names the first layer whose output diverged.

The reference is always float32: a float16 file is compared with its float32 twin (the same
weights, widened exactly), so the comparison is the float16 run's accuracy cost. In float16
storage each step rounds the values it reads and writes, about 2^-11 of the magnitude each
(``UNIT_ROUNDOFF``), and passes on what its inputs carried: a tensor's tolerance is
``FLOAT16_STAGE`` unit roundoffs for each step on its longest path from the inputs, times
sqrt(terms) for a tuned step that sums ``terms`` products in half (``HALF=1``), at most
``FLOAT16_MOST``; and a tensor smaller than half's least normal number (2^-14, where its
precision becomes absolute: an untrained MobileNet v2's late layers) is held as if that large.
docs/precision.md states the bound and the errors measured against it.

A quantized model (QDQ nodes) is run in float with its quantization's rounding, where
onnxruntime computes its QLinear equivalents in integers: a value near a rounding's tie lands
one quantum apart, and every layer after it carries the difference on, times its gain (in an
untrained MobileNet v2, 90 of 255 quanta 50 layers deep). So a step after a quantization is
held to onnxruntime running that step alone on the runtime's own inputs to it (``isolated``):
within ``QUANTA`` quanta (a quantized tensor's quantum is 1, a dequantized one's its scale,
other steps pass on their inputs'), where a wrong kernel misses by the whole range.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from octune.core.errors import CheckError
from octune.runtime.executor import Runtime
from octune.runtime.steps import Alias, Step, Tuned

TOLERANCE = 1e-3
UNIT_ROUNDOFF = 2.0**-11
#: Unit roundoffs one float16 step may add: its input's, its weights' and its output's
#: rounding, with room for the sum's order (measured: at most 1.3 on five built-in networks).
FLOAT16_STAGE = 4
#: Past this a comparison would no longer tell a rounding from a wrong kernel.
FLOAT16_MOST = 0.25
#: Quanta a quantized model's tensor may differ by from onnxruntime's integer arithmetic.
QUANTA = 2.0


class DivergenceError(CheckError):
    """The runtime's output disagrees with onnxruntime's; the message names the first layer."""


@dataclass(frozen=True)
class Comparison:
    tensor: str
    error: float  # max |octune - onnxruntime|
    magnitude: float  # max |onnxruntime|
    mean_error: float  # mean |octune - onnxruntime|
    tolerance: float = TOLERANCE  # relative to the magnitude
    floor: float = 0.0  # the least magnitude the tolerance scales (the format's least normal)
    slack: float = 0.0  # allowed beside the tolerance: quanta of a quantized model's tensor
    #: False where onnxruntime gives this output bit for bit on other random inputs too: the
    #: output then says nothing of the layers before it (the per-layer checks still do).
    depends_on_input: bool = True
    #: A quantized model's output, checked step by step: max |octune - onnxruntime| against
    #: onnxruntime's whole model, its rounding differences carried through every layer.
    whole_model_error: float | None = None

    @property
    def ratio(self) -> float:
        """Error over the tolerance: below 1 agrees (NaN or inf: infinite)."""
        allowed = self.tolerance * max(self.magnitude, self.floor) + self.slack
        allowed = allowed or float(np.finfo(np.float32).tiny)
        return self.error / allowed if math.isfinite(self.error) else math.inf

    @staticmethod
    def of(
        tensor: str,
        ours: np.ndarray,
        reference: np.ndarray,
        tolerance: float = TOLERANCE,
        floor: float = 0.0,
        slack: float = 0.0,
    ) -> Comparison:
        difference = np.abs(ours.astype(np.float64) - reference)
        finite = np.isfinite(difference).all()
        error = float(difference.max()) if finite else math.inf
        mean = float(difference.mean()) if finite and difference.size else error
        magnitude = float(np.abs(reference).max())
        return Comparison(tensor, error, magnitude, mean, tolerance, floor, slack)


def random_inputs(runtime: Runtime, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal inputs, one per graph input."""
    rng = np.random.default_rng(seed)
    shapes = runtime.graph.shapes
    return {
        name: rng.standard_normal(shapes[name], dtype=np.float32) for name in runtime.graph.inputs
    }


def _session(model: onnx.ModelProto, optimized: bool = True) -> ort.InferenceSession:
    """onnxruntime's CPU session; not ``optimized``, each node computes what ONNX defines (its
    optimizer fuses a DequantizeLinear -> Conv -> QuantizeLinear into integer kernels whose
    rounding strayed from that on a MobileNet v2 layer by more than a tie's). Where the
    optimizer fails on a model (onnxruntime 1.32 on Hugging Face's BERT with every
    intermediate tensor an output: "Attempt to replace the existing tensor"), the session
    runs it unoptimized, its log of that failure silenced.
    """
    options = ort.SessionOptions()
    if optimized:
        options.log_severity_level = 4  # fatal only: a failure is retried unoptimized
    else:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        return ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    except Exception:  # onnxruntime raises its own Fail and InvalidGraph types
        if not optimized:
            raise
        return _session(model, optimized=False)


def as_float32(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every float16 tensor, input, output and cast widened to float32: the
    float32 result a float16 run is held to (the same model when nothing is float16).
    """
    half, single = onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    graph = wide.graph

    def widen(tensor: onnx.TensorProto) -> None:
        if tensor.data_type == half:
            value = numpy_helper.to_array(tensor).astype(np.float32)
            tensor.CopyFrom(numpy_helper.from_array(value, tensor.name))

    for tensor in graph.initializer:
        widen(tensor)
    for value in (*graph.input, *graph.output, *graph.value_info):
        if value.type.tensor_type.elem_type == half:
            value.type.tensor_type.elem_type = single
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.TENSOR:
                widen(attribute.t)
            elif node.op_type == "Cast" and attribute.name == "to" and attribute.i == half:
                attribute.i = single
    return wide


def quanta(runtime: Runtime) -> dict[str, float]:
    """Each tensor's quantum in a quantized model (the module's header; 0 where nothing is
    quantized before it).
    """
    nodes = {node.name: node for node in runtime.model.graph.node}
    constants = runtime.graph.constants
    quantum = dict.fromkeys(runtime.graph.inputs, 0.0)
    for planned in runtime.plan:
        step = planned.step
        q = max((quantum.get(name, 0.0) for name in step.inputs), default=0.0)
        for name, op in zip(step.nodes, step.ops, strict=True):
            if op == "QuantizeLinear":
                q = 1.0
            elif op == "DequantizeLinear":
                q = float(np.max(constants[nodes[name].input[1]]))
        quantum[step.output] = q
    return quantum


def tolerances(runtime: Runtime) -> dict[str, float]:
    """Each planned step's output tolerance, relative to its magnitude (the module's header)."""
    tensors = [*runtime.graph.inputs, *(planned.step.output for planned in runtime.plan)]
    if runtime.dtype == "float32":
        return dict.fromkeys(tensors, TOLERANCE)
    allowed = dict.fromkeys(runtime.graph.inputs, FLOAT16_STAGE * UNIT_ROUNDOFF)
    for planned in runtime.plan:
        step = planned.step
        e = step.epilogue
        carried = max((allowed.get(name, 0.0) for name in (*step.inputs, e.other) if name),
                      default=0.0)  # fmt: skip
        stage = 0.0 if isinstance(step, Alias) else FLOAT16_STAGE * UNIT_ROUNDOFF
        if isinstance(step, Tuned) and planned.config.get("HALF"):
            outputs = math.prod(runtime.graph.shapes[step.output])
            terms = step.layer.workload().flops * step.layer.count / (2 * max(outputs, 1))
            stage *= math.sqrt(max(terms, 1.0))
        allowed[step.output] = min(carried + stage, FLOAT16_MOST)
    return allowed


def check(runtime: Runtime, inputs: Mapping[str, np.ndarray]) -> list[Comparison]:
    """Run both on ``inputs`` and compare every step's output, in order; the graph outputs'
    comparisons (each saying whether it depends on the inputs at all), or a one-line
    DivergenceError naming the first layer that diverged.
    """
    runtime.run(inputs)
    graph = runtime.graph
    allowed = tolerances(runtime)
    floor = 0.0 if runtime.dtype == "float32" else float(np.finfo(np.float16).tiny)
    quantum = quanta(runtime)
    slack = {name: QUANTA * q for name, q in quantum.items()}
    produced = {tensor for node in runtime.model.graph.node for tensor in node.output}
    steps = [  # the runtime's own tensors (an uneven conv's padded input) have no reference
        planned
        for planned in runtime.plan
        if not isinstance(planned.step, Alias) and planned.step.output in produced
    ]
    probed = as_float32(runtime.model)
    outputs = {value.name for value in probed.graph.output}
    types = {v.name: v.type.tensor_type.elem_type for v in probed.graph.value_info}
    for planned in steps:
        name = planned.step.output
        if name not in outputs:
            kind = types.get(name) or onnx.TensorProto.FLOAT  # masks are bool, indices ints
            probed.graph.output.append(
                onnx.helper.make_tensor_value_info(name, kind, graph.shapes[name])
            )
            outputs.add(name)
    names = list(dict.fromkeys([*(planned.step.output for planned in steps), *graph.outputs]))
    session = _session(probed)
    reference = dict(zip(names, session.run(names, dict(inputs)), strict=True))
    others = {name: -2 * value + 1 for name, value in inputs.items()}  # other signs, other scale
    again = dict(zip(graph.outputs, session.run(graph.outputs, others), strict=True))
    quantized = [planned.step for planned in steps if quantum[planned.step.output]]
    whole = {name: reference[name] for name in graph.outputs}
    reference.update(isolated(runtime, quantized))
    for planned in steps:
        step = planned.step
        found = Comparison.of(
            step.output,
            runtime.read(step.output),
            reference[step.output],
            allowed[step.output],
            floor,
            slack[step.output],
        )
        if found.ratio >= 1:
            config = f" config {planned.config}" if planned.config else ""
            raise DivergenceError(
                f"{graph.name}: the output disagrees with onnxruntime; layer '{step.name}' "
                f"({step.op}, kernel {planned.kernel}{config}) diverged first: max error "
                f"{found.error:.3g} against {found.tolerance:.3g} x its magnitude "
                f"{found.magnitude:.3g}"
                + ("" if runtime.dtype == "float32" else f" (float16, at least {floor:.2g})")
                + (f" + {found.slack:.3g} of quantization" if found.slack else "")
            )
    found = []
    for name in graph.outputs:
        ours = runtime.read(name)
        compared = Comparison.of(name, ours, reference[name], allowed[name], floor, slack[name])
        whole_error = Comparison.of(name, ours, whole[name]).error if quantum[name] else None
        changes = not np.array_equal(again[name], reference[name])
        found.append(replace(compared, depends_on_input=changes, whole_model_error=whole_error))
    return found


def isolated(runtime: Runtime, steps: Sequence[Step]) -> dict[str, np.ndarray]:
    """Each step's output as onnxruntime computes the step's nodes alone, on the runtime's own
    values of their inputs (and, where the runtime keeps no buffer for one, the nodes before it
    too), each node as ONNX defines it: a layer's reference that carries no other layer's
    differences.
    """
    model = runtime.model
    nodes = {node.name: node for node in model.graph.node}
    producer = {out: node for node in model.graph.node for out in node.output}
    initializers = {tensor.name: tensor for tensor in model.graph.initializer}
    values = (*model.graph.input, *model.graph.value_info, *model.graph.output)
    types = {v.name: v.type.tensor_type.elem_type for v in values}
    kept = runtime.graph.constants.keys() | runtime.buffers.keys() | initializers.keys()
    found = {}
    for step in steps:
        chosen = {name: nodes[name] for name in step.nodes}
        while True:
            made = {out for node in chosen.values() for out in node.output}
            needed = {t for node in chosen.values() for t in node.input if t and t not in made}
            missing = [t for t in needed if t not in kept]
            if not missing:
                break
            chosen.update({producer[t].name: producer[t] for t in missing})
        feeds, weights = {}, []
        for t in sorted(needed):
            if t in initializers:
                weights.append(initializers[t])
            elif t in runtime.graph.constants:
                weights.append(numpy_helper.from_array(runtime.graph.constants[t], t))
            else:
                kind = onnx.helper.tensor_dtype_to_np_dtype(types.get(t, onnx.TensorProto.FLOAT))
                feeds[t] = runtime.read(t).astype(kind)
        ordered = [node for node in model.graph.node if node.name in chosen]
        graph = onnx.helper.make_graph(
            ordered, f"{step.name}:alone",
            [onnx.helper.make_tensor_value_info(t, types.get(t, onnx.TensorProto.FLOAT),
                                                value.shape) for t, value in feeds.items()],
            [onnx.helper.make_tensor_value_info(step.output, types.get(step.output, 1), None)],
            weights,
        )  # fmt: skip
        alone = onnx.helper.make_model(graph, opset_imports=model.opset_import)
        alone.ir_version = model.ir_version
        (found[step.output],) = _session(alone, optimized=False).run([step.output], feeds)
    return found


def onnxruntime_seconds(
    model: onnx.ModelProto, inputs: Mapping[str, np.ndarray], repeats: int
) -> float:
    """onnxruntime's best time for one forward pass on the CPU (its default threads), in
    float32 (a float16 file's float32 twin: its CPU provider computes in float).
    """
    session = _session(as_float32(model))
    session.run(None, dict(inputs))
    best = math.inf
    for _ in range(repeats):
        started = time.perf_counter()
        session.run(None, dict(inputs))
        best = min(best, time.perf_counter() - started)
    return best
