"""The runtime's forward pass against onnxruntime's CPU provider, on the same weights and inputs.

A tensor agrees when max |octune - onnxruntime| <= ``TOLERANCE`` x max |onnxruntime| over it:
relative to the tensor's magnitude, so that ReLU's zeros and softmax's small probabilities
neither hide a wrong kernel nor fail a right one. float32 kernels that sum in other orders
than onnxruntime's differ by about 1e-6 of that per layer; a wrong index or a dropped term
differs by the magnitude itself. Every step's output is kept on the device, so a mismatch
names the first layer whose output diverged.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import onnx
import onnxruntime as ort

from octune.core.errors import OctuneError
from octune.runtime.executor import Runtime
from octune.runtime.graph import Alias

TOLERANCE = 1e-3


class DivergenceError(OctuneError):
    """The runtime's output disagrees with onnxruntime's; the message names the first layer."""


@dataclass(frozen=True)
class Comparison:
    tensor: str
    error: float  # max |octune - onnxruntime|
    magnitude: float  # max |onnxruntime|
    #: False where onnxruntime gives this output bit for bit on other random inputs too: the
    #: output then says nothing of the layers before it (the per-layer checks still do).
    depends_on_input: bool = True

    @property
    def ratio(self) -> float:
        """Error over the tolerance: below 1 agrees (NaN or inf: infinite)."""
        allowed = TOLERANCE * self.magnitude or np.finfo(np.float32).tiny
        return self.error / allowed if math.isfinite(self.error) else math.inf

    @staticmethod
    def of(tensor: str, ours: np.ndarray, reference: np.ndarray) -> Comparison:
        difference = np.abs(ours.astype(np.float64) - reference)
        error = math.inf if not np.isfinite(difference).all() else float(difference.max())
        return Comparison(tensor, error, float(np.abs(reference).max()))


def random_inputs(runtime: Runtime, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal inputs, one per graph input."""
    rng = np.random.default_rng(seed)
    shapes = runtime.graph.shapes
    return {
        name: rng.standard_normal(shapes[name], dtype=np.float32) for name in runtime.graph.inputs
    }


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def check(runtime: Runtime, inputs: Mapping[str, np.ndarray]) -> list[Comparison]:
    """Run both on ``inputs`` and compare every step's output, in order; the graph outputs'
    comparisons (each saying whether it depends on the inputs at all), or a one-line
    DivergenceError naming the first layer that diverged.
    """
    runtime.run(inputs)
    graph = runtime.graph
    produced = {tensor for node in runtime.model.graph.node for tensor in node.output}
    steps = [  # the runtime's own tensors (an uneven conv's padded input) have no reference
        planned
        for planned in runtime.plan
        if not isinstance(planned.step, Alias) and planned.step.output in produced
    ]
    probed = onnx.ModelProto()
    probed.CopyFrom(runtime.model)
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
    for planned in steps:
        step = planned.step
        found = Comparison.of(step.output, runtime.read(step.output), reference[step.output])
        if found.ratio >= 1:
            config = f" config {planned.config}" if planned.config else ""
            raise DivergenceError(
                f"{graph.name}: the output disagrees with onnxruntime; layer '{step.name}' "
                f"({step.op}, kernel {planned.kernel}{config}) diverged first: max error "
                f"{found.error:.3g} against {TOLERANCE:g} x its magnitude {found.magnitude:.3g}"
            )
    return [
        replace(
            Comparison.of(name, runtime.read(name), reference[name]),
            depends_on_input=not np.array_equal(again[name], reference[name]),
        )
        for name in graph.outputs
    ]


def onnxruntime_seconds(
    model: onnx.ModelProto, inputs: Mapping[str, np.ndarray], repeats: int
) -> float:
    """onnxruntime's best time for one forward pass on the CPU (its default threads)."""
    session = _session(model)
    session.run(None, dict(inputs))
    best = math.inf
    for _ in range(repeats):
        started = time.perf_counter()
        session.run(None, dict(inputs))
        best = min(best, time.perf_counter() - started)
    return best
