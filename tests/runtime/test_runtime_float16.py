"""Networks in half precision on the real devices: `octune run --dtype float16` and float16
ONNX files as onnxconverter-common writes them. Every tensor and weight is stored as half, each
conv and GEMM runs a float16 kernel, and every layer is held against the float32 result within
float16's tolerance, which a float32-tight bound would not pass (so the check is live).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers.cli_testing import assert_one_line_error, octune
from onnxconverter_common import float16

from octune.catalogue.registry import load_kernel
from octune.core.errors import OctuneError
from octune.db.queries import StoredDevice
from octune.db.store import Store
from octune.networks.graph import GraphBuilder
from octune.networks.layers import extract_layers, load_model
from octune.networks.report import network_report
from octune.networks.workloads import network_tasks, workloads_yaml
from octune.runtime import verify
from octune.runtime.executor import Runtime
from octune.runtime.steps import Tuned
from octune.runtime.verify import DivergenceError, as_float32, check, random_inputs
from octune.tuner.campaign import load_tasks
from octune.tuner.device import DeviceInfo, compiling_devices


def mixed(g: GraphBuilder) -> tuple[str, list[int]]:
    """A little of everything a CNN classifier does: conv, batch-norm, depthwise, a residual,
    a concat, pools, a linear layer and a softmax."""
    x = g.input("input", [1, 8, 12, 12])
    y = g.relu(g.batch_norm(g.conv(x, "stem", 8, 16, 3), "stem.bn", 16), "stem.relu")
    d = g.relu6(g.batch_norm(g.conv(y, "dw", 16, 16, 3, groups=16), "dw.bn", 16), "dw.relu6")
    p = g.batch_norm(g.conv(d, "pw", 16, 16, 1), "pw.bn", 16, gain=0.5)
    r = g.relu(g.node("Add", [p, y], "add"), "add.relu")
    c = g.node("Concat", [r, y], "cat", axis=1)
    m = g.node("MaxPool", [c], "pool", kernel_shape=[2, 2], strides=[2, 2])
    v = g.node("Flatten", [g.node("GlobalAveragePool", [m], "gap")], "flat")
    logits = g.linear(v, "fc", 32, 10)
    return g.node("Softmax", [logits], "probs", axis=-1), [1, 10]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    g = GraphBuilder("mixed", seed=3)
    path = tmp_path_factory.mktemp("float16") / "mixed.onnx"
    onnx.save(g.model(*mixed(g)), path)
    return path


def _devices() -> list[object]:
    """Every CPU device here that compiles: Intel's runtime (cl_khr_fp16) and PoCL (none)."""
    devices, _ = compiling_devices()
    return [pytest.param(d, id=d.platform.name.split()[0]) for d in devices]


@pytest.mark.parametrize("device", _devices())
def test_a_float32_model_runs_in_float16_storage(model_file: Path, device) -> None:
    runtime = Runtime(load_model(model_file), device, dtype="float16")
    (output,) = check(runtime, random_inputs(runtime))
    assert runtime.dtype == "float16" and runtime.storage == np.float16
    tuned = [p for p in runtime.plan if isinstance(p.step, Tuned)]
    assert len(tuned) == 4
    assert all(load_kernel(p.kernel).space.dtype == "float16" for p in tuned)
    # Half storage, held to half's bound: the error is a rounding's, not a wrong index's.
    assert 0 < output.error < output.tolerance * output.magnitude
    assert output.tolerance < 0.05 and output.mean_error <= output.error


def test_the_float16_check_is_live(model_file: Path, cl_device, monkeypatch) -> None:
    """Held to a float32-sized bound, the same run's rounding is caught and named."""
    runtime = Runtime(load_model(model_file), cl_device, dtype="float16")
    monkeypatch.setattr(verify, "FLOAT16_STAGE", 0.01)
    with pytest.raises(DivergenceError, match=r"diverged first.*\(float16, at least"):
        check(runtime, random_inputs(runtime))


@pytest.mark.parametrize("keep_io_types", [True, False], ids=["float32-io", "float16-io"])
def test_a_converted_float16_file_runs_in_float16(
    model_file: Path, cl_device, tmp_path: Path, keep_io_types: bool
) -> None:
    half = float16.convert_float_to_float16(onnx.load(model_file), keep_io_types=keep_io_types)
    path = tmp_path / "mixed_fp16.onnx"
    onnx.save(half, path)
    model = load_model(path)
    runtime = Runtime(model, cl_device)  # the file's own dtype
    assert runtime.dtype == "float16"
    (output,) = check(runtime, random_inputs(runtime))
    assert output.ratio < 1 and output.magnitude > 0
    # Its layers are float16 layers: `tune --model` tunes them so, `report` looks them up so.
    layers, _ = extract_layers(model)
    assert {layer.dtype for layer in layers} == {"float16"}
    assert {task.workload.dtype for task in network_tasks(layers)} == {"float16"}
    (tmp_path / "layers.yaml").write_text(workloads_yaml("mixed", layers, []))
    assert {task.workload.dtype for task in load_tasks(tmp_path / "layers.yaml")} == {"float16"}
    # The reference is its float32 twin: the same (rounded) weights, nothing half left.
    twin = as_float32(model)
    assert all(t.data_type != onnx.TensorProto.FLOAT16 for t in twin.graph.initializer)
    # `report` answers each layer with a float16 kernel (nothing tuned: the defaults).
    with Store("sqlite://") as store:
        found = network_report(path, store, StoredDevice.of(DeviceInfo.from_cl(cl_device)))
    assert found.layers and all(layer.kernel.endswith("_float16") for layer in found.layers)


def test_run_reports_the_accuracy_cost(model_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    result = octune("run", str(model_file), "--dtype", "float16", "--repeat", "1",
                    "--json", str(out))  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Running" in result.stdout and "in float16" in result.stdout
    assert "float16 against the float32 result, output 'probs': max error" in result.stdout
    payload = json.loads(out.read_text())
    assert payload["dtype"] == "float16"
    (output,) = payload["outputs"]
    assert (
        0 < output["mean_error"] <= output["max_error"] <= output["tolerance"] * output["magnitude"]
    )
    assert all(layer["kernel"].endswith("_float16") for layer in payload["layers"]
               if "Conv" in layer["op"] or "Gemm" in layer["op"])  # fmt: skip


def test_run_refuses_a_dtype_it_does_not_store(model_file: Path, cl_device) -> None:
    result = octune("run", str(model_file), "--dtype", "int8")
    assert_one_line_error(result, "--dtype: octune run stores float32 or float16, not 'int8'")
    with pytest.raises(OctuneError, match="stores tensors as float32 or float16, not int8"):
        Runtime(load_model(model_file), cl_device, dtype="int8")


def test_an_output_below_half_range_is_flagged(tmp_path: Path) -> None:
    """An untrained network's outputs can lie below half's least normal number (torchvision's
    MobileNet v2 exported from `.half()`: about 1e-9): the run says so beside the error."""
    g = GraphBuilder("tiny", seed=5)
    x = g.input("input", [1, 8, 6, 6])
    tiny = g.node("Mul", [x, g.constant("scale", np.array(1e-6, np.float32))], "tiny")
    small = g.conv(tiny, "conv", 8, 8, 3)
    path = tmp_path / "tiny.onnx"
    onnx.save(g.model(small, [1, 8, 6, 6]), path)
    result = octune("run", str(path), "--dtype", "float16", "--repeat", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is below float16's least normal number" in " ".join(result.stdout.split())
