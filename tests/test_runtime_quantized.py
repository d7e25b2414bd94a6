"""Quantized models as onnxruntime's quantizer writes them (static, random calibration, int8
weights per channel, uint8 activations), in both its formats, through `octune run`: the
weights' DequantizeLinear folded into constants, each QuantizeLinear an epilogue's rounding and
saturation, every layer checked against onnxruntime's integer kernels running it alone on the
runtime's own inputs, within two quanta.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers.cli_testing import octune
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

from octune.networks.graph import GraphBuilder
from octune.networks.layers import load_model
from octune.networks.workloads import network_layers
from octune.runtime import executor
from octune.runtime.executor import Runtime
from octune.runtime.graph import Tuned
from octune.runtime.verify import DivergenceError, check, quanta, random_inputs

SHAPE = [1, 8, 10, 10]


def classifier(g: GraphBuilder) -> tuple[str, list[int]]:
    """Convs with ReLU, a residual, a concat, pools and a linear layer: what the quantizer
    wraps in QDQ pairs, or turns into QLinearConv, QLinearAdd, QLinearConcat..."""
    x = g.input("input", SHAPE)
    y = g.relu(g.conv(x, "stem", 8, 16, 3, bias=True), "stem.relu")
    z = g.relu(g.conv(y, "block", 16, 16, 3, bias=True), "block.relu")
    r = g.node("Add", [z, y], "add")
    c = g.node("Concat", [r, y], "cat", axis=1)
    m = g.node("MaxPool", [c], "pool", kernel_shape=[2, 2], strides=[2, 2])
    v = g.node("Flatten", [g.node("GlobalAveragePool", [m], "gap")], "flat")
    return g.linear(v, "fc", 32, 10), [1, 10]


class _Random(CalibrationDataReader):
    def __init__(self) -> None:
        self.batches = iter(np.random.default_rng(seed).standard_normal(SHAPE, np.float32)
                            for seed in range(4))  # fmt: skip

    def get_next(self) -> dict[str, np.ndarray] | None:
        batch = next(self.batches, None)
        return None if batch is None else {"input": batch}


@pytest.fixture(scope="module", params=[QuantFormat.QDQ, QuantFormat.QOperator],
                ids=["qdq", "qoperator"])  # fmt: skip
def quantized(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("quantized")
    g = GraphBuilder("classifier", seed=11)
    onnx.save(g.model(*classifier(g)), folder / "float.onnx")
    path = folder / f"{request.param.name.lower()}.onnx"
    quantize_static(folder / "float.onnx", path, _Random(), quant_format=request.param,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)  # fmt: skip
    return path


def test_a_quantized_model_agrees_with_onnxruntime(quantized: Path, cl_device) -> None:
    model = load_model(quantized)
    runtime = Runtime(model, cl_device)
    (output,) = check(runtime, random_inputs(runtime))
    assert output.ratio < 1 and output.magnitude > 0
    steps = [planned.step for planned in runtime.plan]
    # Weights dequantized once, at load: every tuned layer reads float32 constants.
    for step in (s for s in steps if isinstance(s, Tuned)):
        assert runtime.graph.constants[step.inputs[1]].dtype == np.float32
    # Each activation quantized where it is computed: rounding and saturation in the epilogue.
    quantizing = [s for s in steps if s.epilogue.activation == "quantize"]
    assert quantizing and all((s.epilogue.low, s.epilogue.high) == (0, 255) for s in quantizing)
    assert any(isinstance(s, Tuned) for s in quantizing)


def test_quanta_carry_along_the_graph(quantized: Path, cl_device) -> None:
    runtime = Runtime(load_model(quantized), cl_device)
    found = quanta(runtime)
    assert all(found[name] == 0 for name in runtime.graph.inputs)
    first = next(p.step for p in runtime.plan if "QuantizeLinear" in p.step.ops)
    assert found[first.output] == 1  # a quantized tensor counts in its integers
    # The output is dequantized: its quantum is its scale.
    (output,) = runtime.graph.outputs
    (last,) = [n for n in runtime.model.graph.node if output in n.output]
    assert last.op_type == "DequantizeLinear"
    assert found[output] == float(runtime.graph.constants[last.input[1]])


def test_run_and_tune_read_a_quantized_file(quantized: Path) -> None:
    result = octune("run", str(quantized), "--repeat", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    printed = " ".join(result.stdout.split())
    assert "Output agrees with onnxruntime" in printed
    assert "against onnxruntime's whole model its max error is" in printed
    layers, untuned = network_layers(quantized, None, {})
    assert {layer.family for layer in layers} == {"conv2d", "gemm"}
    assert not any("Quantize" in op for op in untuned)


def test_a_wrong_quantization_is_named(quantized: Path, cl_device, monkeypatch) -> None:
    """The per-step check is live: QuantizeLinear's epilogue built as another activation
    (negation, where rounding and saturation belong) diverges at the first quantizing layer."""
    monkeypatch.setitem(executor.ACTIVATIONS, "quantize", executor.ACTIVATIONS["neg"])
    runtime = Runtime(load_model(quantized), cl_device)
    with pytest.raises(DivergenceError, match=r"QuantizeLinear.*of quantization"):
        check(runtime, random_inputs(runtime))
