"""Quantized models as onnxruntime's quantizer writes them (static, random calibration, int8
weights per channel, uint8 activations), in both its formats, through `octune run`: each
quantized conv and linear layer an int8 kernel on uint8 tensors, the rest in float with each
QuantizeLinear an epilogue's rounding and saturation, every layer checked against onnxruntime
running it alone on the runtime's own inputs, within two quanta.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers.cli_testing import octune
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

from octune.catalogue import registry
from octune.networks.graph import GraphBuilder
from octune.networks.layers import load_model
from octune.networks.qoperator import qdq_form
from octune.networks.workloads import network_layers
from octune.runtime import ops_cl
from octune.runtime.executor import Runtime
from octune.runtime.steps import Tuned
from octune.runtime.verify import DivergenceError, check, quanta, random_inputs

SHAPE = [1, 8, 10, 10]


def classifier(g: GraphBuilder) -> tuple[str, list[int]]:
    """Convs (dense, depthwise, grouped) with ReLU, a residual, a concat, pools and a linear
    layer: what the quantizer wraps in QDQ pairs, or turns into QLinearConv, QLinearAdd..."""
    x = g.input("input", SHAPE)
    y = g.relu(g.conv(x, "stem", 8, 16, 3, bias=True), "stem.relu")
    d = g.relu(g.conv(y, "depthwise", 16, 16, 3, groups=16, bias=True), "depthwise.relu")
    z = g.relu(g.conv(d, "grouped", 16, 16, 1, groups=2, bias=True), "grouped.relu")
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


def test_a_quantized_model_runs_its_layers_in_int8(quantized: Path, cl_device) -> None:
    model = load_model(quantized)
    runtime = Runtime(model, cl_device)
    (output,) = check(runtime, random_inputs(runtime))
    assert output.ratio < 1 and output.magnitude > 0
    # Every conv and the linear layer an int8 kernel takes: from uint8 bytes to uint8 bytes,
    # its QuantizeLinear folded in, its weights int8 and its bias int32. No int8 kernel takes a
    # grouped conv that is not depthwise: it runs in float, between DequantizeLinear and
    # QuantizeLinear.
    tuned = [planned for planned in runtime.plan if isinstance(planned.step, Tuned)]
    kernels = [p.kernel for p in tuned]
    assert kernels[:2] + kernels[3:] == ["conv2d_int8", "conv2d_depthwise_rows_int8", "gemm_int8"]
    grouped = tuned[2].step
    assert grouped.layer.dtype == "float32" and grouped.layer.shape["groups"] == 2
    assert runtime.graph.constants[grouped.inputs[1]].dtype == np.float32
    for step in (p.step for p in tuned if p.step is not grouped):
        assert step.ops[-1] == "QuantizeLinear"
        types = [runtime.buffers[t].size // math.prod(runtime.graph.shapes[t])
                 for t in (*step.inputs, step.output)]  # fmt: skip
        assert types == [1, 1, 4, 4, 1]  # bytes in, int8 weights, float scales, int32 bias, bytes
        assert runtime.graph.constants[step.inputs[1]].dtype == np.int8
    # The rest runs in float, each uint8 tensor dequantized by its reader's epilogue.
    quantizing = [s for s in (p.step for p in runtime.plan) if s.epilogue.activation == "quantize"]
    assert quantizing and all((s.epilogue.low, s.epilogue.high) == (0, 255) for s in quantizing)
    assert output.whole_model_error is not None and output.whole_model_error <= output.slack


def test_an_int8_layer_with_a_wrong_zero_point_is_named(quantized: Path, cl_device,
                                                        monkeypatch) -> None:  # fmt: skip
    """The check is live for the int8 kernels: a conv given its output's zero point as its
    input's diverges there, named."""
    family = type(registry.family("conv2d"))
    launch = family.launch_arguments

    def swapped(self, workload, entry, alpha=1.0, zeros=(0, 0)):  # type: ignore[no-untyped-def]
        return launch(self, workload, entry, alpha, (zeros[0] + 7, zeros[1]))

    monkeypatch.setattr(family, "launch_arguments", swapped)
    runtime = Runtime(load_model(quantized), cl_device)
    with pytest.raises(DivergenceError, match=r"layer 'stem\w*' \(Conv\+QuantizeLinear, "
                                              r"kernel conv2d_int8"):  # fmt: skip
        check(runtime, random_inputs(runtime))


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
    # tune --model tunes each layer in the dtype the run computes it in.
    dtypes = {(layer.family, layer.shape.get("groups", 1), layer.dtype) for layer in layers}
    assert dtypes == {("conv2d", 1, "int8"), ("conv2d", 16, "int8"), ("conv2d", 2, "float32"),
                      ("gemm", 1, "int8")}  # fmt: skip
    assert not any("Quantize" in op for op in untuned)


def test_a_wrong_quantization_is_named(quantized: Path, cl_device, monkeypatch) -> None:
    """The per-step check is live: QuantizeLinear's epilogue built as another activation
    (negation, where rounding and saturation belong) diverges at the first quantizing layer."""
    monkeypatch.setitem(ops_cl.ACTIVATIONS, "quantize", ops_cl.ACTIVATIONS["neg"])
    runtime = Runtime(load_model(quantized), cl_device)
    with pytest.raises(DivergenceError, match=r"QuantizeLinear.*of quantization"):
        check(runtime, random_inputs(runtime))


def test_one_value_dequantized_at_two_scales_gets_two_nodes() -> None:
    """PyTorch's exporter shares equal tensors (the zero biases of fused batch-norms), so one
    int32 bias feeds QLinearConvs of different scales: each gets a DequantizeLinear of its own
    name, and the rewritten graph stays valid ONNX (onnxruntime refused the first rewrite)."""
    f, u8, i8, i32 = (onnx.TensorProto.FLOAT, onnx.TensorProto.UINT8, onnx.TensorProto.INT8,
                      onnx.TensorProto.INT32)  # fmt: skip
    tensor = onnx.helper.make_tensor
    init = [
        tensor("xs", f, [], [0.1]),
        tensor("z", u8, [], [0]),
        tensor("wz", i8, [], [0]),
        tensor("w", i8, [2, 2, 1, 1], [1, 2, 3, 4]),
        tensor("b", i32, [2], [0, 0]),
        tensor("ws1", f, [], [0.5]),
        tensor("ws2", f, [], [0.25]),
    ]
    convs = [
        onnx.helper.make_node(
            "QLinearConv", [x, "xs", "z", "w", ws, "wz", "xs", "z", "b"], [y], name=y
        )
        for x, ws, y in (("x", "ws1", "h"), ("h", "ws2", "y"))
    ]
    graph = onnx.helper.make_graph(
        convs, "shared", [onnx.helper.make_tensor_value_info("x", u8, [1, 2, 3, 3])],
        [onnx.helper.make_tensor_value_info("y", u8, [1, 2, 3, 3])], init)  # fmt: skip
    rewritten = qdq_form(
        onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])
    )
    onnx.checker.check_model(rewritten, full_check=True)
    names = [node.name for node in rewritten.graph.node]
    assert len(names) == len(set(names))
    assert sum(node.input[0] == "b" for node in rewritten.graph.node) == 2
