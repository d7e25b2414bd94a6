"""The reference runtime (`octune run`): real graphs on the real device, checked against
onnxruntime; configs from a database a real tuning run wrote, from its bundle and from a live
server on a loopback socket; a real wrong kernel named as the first layer that diverged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from helpers.cli_testing import assert_one_line_error, octune
from helpers.networks_testing import residual
from helpers.server_testing import LiveServer, free_port

from octune.catalogue.registry import (
    KernelSpec,
    families,
    kernel_from_texts,
    kernels_of,
    load_kernel,
)
from octune.core.errors import OctuneError
from octune.core.precision import STORAGE
from octune.db.store import Store
from octune.kernels.gemm import gemm_workload
from octune.lookup.data import Answer
from octune.networks.graph import GraphBuilder
from octune.networks.layers import load_model
from octune.runtime.batched import BATCHED_PLANS, TILES
from octune.runtime.config_sources import (
    BundleConfigs,
    ServerConfigs,
    StoreConfigs,
    choose,
    default_configs,
)
from octune.runtime.executor import Runtime
from octune.runtime.onnx_loader import load_graph
from octune.runtime.ops_cl import divisor
from octune.runtime.steps import Tuned
from octune.runtime.verify import check, random_inputs
from octune.tuner.device import DeviceInfo

# --- small graphs against onnxruntime -----------------------------------------------------------


def conv_bn_relu(g: GraphBuilder) -> tuple[str, list[int]]:
    x = g.input("input", [1, 8, 12, 12])
    y = g.relu(g.batch_norm(g.conv(x, "conv", 8, 16, 3, bias=True), "bn", 16), "relu")
    return y, [1, 16, 12, 12]


def depthwise(g: GraphBuilder) -> tuple[str, list[int]]:
    x = g.input("input", [1, 16, 15, 15])
    y = g.batch_norm(g.conv(x, "dw", 16, 16, 3, stride=2, groups=16), "dw.bn", 16)
    y = g.relu6(y, "dw.relu6")
    y = g.relu6(g.batch_norm(g.conv(y, "pw", 16, 24, 1), "pw.bn", 24), "pw.relu6")
    return y, [1, 24, 8, 8]


def pools(g: GraphBuilder) -> tuple[str, list[int]]:
    """Max with ceil mode, averages with and without the padding counted, global pools."""
    x = g.input("input", [1, 4, 14, 14])
    a = g.node("MaxPool", [x], "max", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    b = g.node("AveragePool", [x], "avg_pad", kernel_shape=[3, 3], strides=[2, 2],
               pads=[1, 1, 1, 1], count_include_pad=1)  # fmt: skip
    c = g.node("AveragePool", [x], "avg", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    d = g.node("Add", [g.node("Add", [a, b], "ab"), c], "abc")
    e = g.node("GlobalMaxPool", [d], "gmax")
    f = g.node("GlobalAveragePool", [d], "gavg")
    return g.node("Concat", [e, f], "pooled", axis=1), [1, 8, 1, 1]


def concat(g: GraphBuilder) -> tuple[str, list[int]]:
    x = g.input("input", [1, 8, 9, 9])
    s = g.relu(g.conv(x, "squeeze", 8, 4, 1, bias=True), "squeeze.relu")
    e1 = g.relu(g.conv(s, "e1", 4, 8, 1, bias=True), "e1.relu")
    e3 = g.relu(g.conv(s, "e3", 4, 8, 3, bias=True), "e3.relu")
    y = g.node("Concat", [e1, e3], "fire", axis=1)
    return g.node("Concat", [y, y], "rows", axis=2), [1, 16, 18, 9]


def gemm_softmax(g: GraphBuilder) -> tuple[str, list[int]]:
    x = g.input("input", [3, 2, 4, 4])
    flat = g.node("Flatten", [x], "flatten")
    h = g.relu(g.linear(flat, "fc1", 32, 20), "fc1.relu")
    weight = g.parameter("fc2.weight", (20, 10), 0.2)
    logits = g.node("Gemm", [h, weight, g.parameter("fc2.bias", (1, 10), 0.1)], "fc2",
                    alpha=0.5, beta=2.0)  # fmt: skip
    return g.node("Softmax", [logits], "probs", axis=-1), [3, 10]


@pytest.mark.parametrize(
    ("build", "launches"),
    [
        (conv_bn_relu, 2),
        (depthwise, 3),
        (residual, 8),
        (pools, 9),
        (concat, 10),
        (gemm_softmax, 5),
    ],
    ids=lambda value: getattr(value, "__name__", str(value)),
)
def test_small_graphs_agree_with_onnxruntime(
    build: Callable[[GraphBuilder], tuple[str, list[int]]],
    launches: int,
    cl_device,
    tmp_path: Path,
) -> None:
    g = GraphBuilder(build.__name__, seed=7)
    output, shape = build(g)
    path = tmp_path / "model.onnx"
    onnx.save(g.model(output, shape), path)
    model = load_model(path)
    runtime = Runtime(model, cl_device, fuse=True)
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1 and found.magnitude > 0
    # Batch-norm folds into the conv, bias + residual + activation into one epilogue in the
    # kernel's stores; untuned, the CPU runs the kernels written for it, whose panel GEMMs pack
    # first (a launch each).
    assert runtime.launches == launches
    timing = runtime.time(2)
    assert len(timing.kernel_s) == len(runtime.plan) and timing.wall_s > 0


def fused_conv(g: GraphBuilder) -> tuple[str, list[int]]:
    """A conv with bias, batch-norm, a residual and an activation after it."""
    x, other = g.input("input", [1, 8, 10, 10]), g.input("other", [1, 16, 10, 10])
    y = g.batch_norm(g.conv(x, "conv", 8, 16, 3, bias=True), "bn", 16)
    return g.relu(g.node("Add", [y, other], "add"), "relu"), [1, 16, 10, 10]


def fused_pointwise(g: GraphBuilder) -> tuple[str, list[int]]:
    # Two images: a batched kernel's second image finds its own channels and residual.
    x, other = g.input("input", [2, 8, 10, 10]), g.input("other", [2, 16, 10, 10])
    y = g.batch_norm(g.conv(x, "conv", 8, 16, 1, pad=0), "bn", 16)
    return g.relu6(g.node("Add", [other, y], "add"), "relu6"), [2, 16, 10, 10]


def fused_depthwise(g: GraphBuilder) -> tuple[str, list[int]]:
    x = g.input("input", [1, 16, 11, 11])
    y = g.batch_norm(g.conv(x, "conv", 16, 16, 3, stride=2, groups=16), "bn", 16)
    return g.relu6(y, "relu6"), [1, 16, 6, 6]


def fused_linear(g: GraphBuilder) -> tuple[str, list[int]]:
    x, other = g.input("input", [5, 288]), g.input("other", [5, 20])  # deep enough to split
    y = g.node("Add", [g.linear(x, "fc", 288, 20), other], "add")
    return g.node("Sigmoid", [y], "gate"), [5, 20]


class OneKernel:
    """Every layer's answer from one kernel (octune's default config for it): a config source
    that picks which kernel the runtime under test runs.
    """

    def __init__(self, kernel: str, info: DeviceInfo) -> None:
        self.kernel_name, self.defaults = kernel, default_configs(info)
        self.where = self.defaults.where

    def answers(
        self, family: str, shapes: Sequence[Mapping[str, int]], dtype: str = "float32"
    ) -> list[Answer]:
        return self.defaults.answers(self.kernel_name, shapes, dtype)

    def kernel(self, answer: Answer) -> KernelSpec:
        return self.defaults.kernel(answer)


FUSED = [
    (build, kernel)
    for build, family in [
        (fused_conv, "conv2d"),
        (fused_pointwise, "conv2d"),
        (fused_depthwise, "conv2d"),
        (fused_linear, "gemm"),
    ]
    for kernel in kernels_of(family)
    if kernel not in families()  # a family's name answers for the family: gemm.cl's plain
    # entry runs as conv2d_1x1
]


@pytest.mark.parametrize(("build", "kernel"), FUSED, ids=[f"{b.__name__}-{k}" for b, k in FUSED])
def test_kernels_run_the_epilogue_in_their_stores(
    build: Callable[[GraphBuilder], tuple[str, list[int]]], kernel: str, cl_device, tmp_path: Path
) -> None:
    """Bias, batch-norm, residual and activation in the stores of every kernel whose template
    includes kernels/epilogue.clh, as a launch of its own after the others, agreeing with
    onnxruntime either way; a float16 kernel in a run that stores float16.
    """
    g = GraphBuilder(build.__name__, seed=3)
    output, shape = build(g)
    path = tmp_path / "model.onnx"
    onnx.save(g.model(output, shape), path)
    model = load_model(path)
    (layer,) = [s.layer for s in load_graph(model).steps if isinstance(s, Tuned)]
    spec = load_kernel(kernel)
    dtype = spec.space.dtype
    if dtype not in STORAGE:
        pytest.skip(f"{kernel} computes {dtype}: a network runs it through quantized nodes")
    if spec.takes(layer.workload(dtype)) is not None:
        pytest.skip(f"{kernel} does not take this layer")
    source = OneKernel(kernel, DeviceInfo.from_cl(cl_device))
    runtime = Runtime(model, cl_device, source, fuse=True, dtype=dtype)
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1 and found.magnitude > 0
    (planned,) = [p for p in runtime.plan if isinstance(p.step, Tuned)]
    assert planned.kernel == kernel
    names = [launch.kernel.function_name for launch in planned.launches]
    assert ("epilogue" in names) is not spec.fuses_epilogue


def test_without_fusion_each_epilogue_is_a_launch_of_its_own(cl_device, tmp_path: Path) -> None:
    """`octune run --no-fuse`: the same kernel and config, its epilogue in a launch after it."""
    g = GraphBuilder("fused_conv", seed=3)
    output, shape = fused_conv(g)
    onnx.save(g.model(output, shape), tmp_path / "model.onnx")
    model = load_model(tmp_path / "model.onnx")
    source = OneKernel("conv2d_direct", DeviceInfo.from_cl(cl_device))
    fused, unfused = (Runtime(model, cl_device, source, fuse=fuse) for fuse in (True, False))
    for runtime in (fused, unfused):
        (found,) = check(runtime, random_inputs(runtime))
        assert found.ratio < 1 and found.magnitude > 0
    assert (fused.launches, unfused.launches) == (1, 2)


def test_by_default_the_faster_placement_of_an_epilogue_is_timed_once_per_shape(
    cl_device, tmp_path: Path
) -> None:
    """`octune run` without --fuse/--no-fuse: each conv's epilogue in its stores or apart,
    whichever ran faster at load; a layer of the same kernel, config, shape and epilogue as one
    timed before takes its placement untimed, so a network's repeated blocks run alike.
    """
    g = GraphBuilder("repeated_convs", seed=5)
    x = g.input("input", [1, 16, 10, 10])
    for layer in range(3):
        x = g.relu(g.conv(x, f"conv{layer}", 16, 16, 3, bias=True), f"relu{layer}")
    onnx.save(g.model(x, [1, 16, 10, 10]), tmp_path / "model.onnx")
    model = load_model(tmp_path / "model.onnx")
    source = OneKernel("conv2d_direct", DeviceInfo.from_cl(cl_device))
    runtime = Runtime(model, cl_device, source)
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1 and found.magnitude > 0
    placements = {len(p.launches) for p in runtime.plan if isinstance(p.step, Tuned)}
    assert len(placements) == 1 and placements <= {1, 2}  # the same for all three


def test_a_confirming_load_says_what_it_is_doing_as_it_goes(cl_device, tmp_path: Path) -> None:
    """A first-use confirmation can take minutes: the runtime tells its ``progress`` callback
    about the builds, then each layer it confirms, by count and shape (``octune run``'s status
    line); a layer tuned at its shape is not confirmed, so the next load says nothing of it.
    """
    g = GraphBuilder("two_convs", seed=2)
    x = g.relu(g.conv(g.input("input", [1, 4, 8, 8]), "conv1", 4, 8, 3), "relu1")
    x = g.relu(g.conv(x, "conv2", 8, 8, 1), "relu2")
    onnx.save(g.model(x, [1, 8, 8, 8]), tmp_path / "model.onnx")
    model = load_model(tmp_path / "model.onnx")
    told: list[str] = []
    with Store(f"sqlite:///{tmp_path / 'configs.db'}") as store:
        source = StoreConfigs(store, DeviceInfo.from_cl(cl_device))
        Runtime(model, cl_device, source, "confirmed", record=store, progress=told.append)
        again: list[str] = []
        Runtime(model, cl_device, source, "confirmed", record=store, progress=again.append)
    assert told[0].startswith("building ") and told[0].endswith(" untuned conv2d layers")
    assert [text.split(" (")[0] for text in told[1:]] == [
        "confirming conv2d layer 1 of 2",
        "confirming conv2d layer 2 of 2",
    ]
    assert "conv2d 4→8 3x3 8x8" in told[1] and told[2].endswith(" candidates")
    assert again == []


def test_a_bert_layer_agrees_with_onnxruntime(cl_device) -> None:
    """Attention (its products, the transposes around them and the softmax: one step), layer
    norm, and GELU by Erf in the epilogue of the GEMM before it.
    """
    model = load_model("bert_base_layer", dims={"sequence": 16})
    runtime = Runtime(model, cl_device)
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1
    ops = {planned.step.op for planned in runtime.plan}
    assert {"MatMul+Add+Div+Erf+Add+Mul+Mul", "LayerNormalization"} <= ops
    assert any(op.startswith("MatMul+Div+Softmax+MatMul") for op in ops)


@pytest.mark.parametrize("plan", BATCHED_PLANS)
def test_batched_matmuls_by_every_plan_agree(cl_device, plan) -> None:
    """Attention's batched products (a plan named: not fused with the softmax) as one tuned
    launch per matrix (after the transposes) or as one launch of the runtime's kernel (simple
    or tiled, reading and writing where the transposes would have): the same answers every way.
    """
    model = load_model("bert_base_layer", batch=2, dims={"sequence": 8})
    runtime = Runtime(model, cl_device, batched=plan)
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1
    batched = [p for p in runtime.plan if isinstance(p.step, Tuned) and p.step.layer.count > 1]
    assert [p.step.layer.count for p in batched] == [24, 24]  # 2 images x 12 heads, twice
    kernels = {"simple": "batched_matmul", "tiled": "batched_matmul_tiled"}
    transposes = [p for p in runtime.plan if "Transpose" in p.step.ops and len(p.step.ops) == 1]
    for planned in batched:
        one_launch = planned.kernel.startswith("batched_matmul")
        assert one_launch == (plan != "per-matrix")
        assert plan not in kernels or planned.kernel == kernels[plan]
        # One launch, or a kernel's launches for each of the 24 matrices (and the scale's).
        assert len(planned.launches) == 1 if one_launch else len(planned.launches) >= 24
    # Q, K and V's transposes, and the context's: read and written in place by one launch.
    assert len(transposes) == (4 if plan == "per-matrix" else 0)


def test_a_batched_matmul_with_odd_broadcast_matrices_by_either_kernel(cl_device) -> None:
    """Matrices no 64 x 64 tile divides, one operand broadcast over the batch: only the
    runtime's kernels take it (no sub-buffers), and both agree with onnxruntime.
    """
    g = GraphBuilder("odd_batched", seed=5)
    a, b = g.input("a", [3, 2, 67, 45]), g.parameter("b", [1, 2, 45, 70], std=1.0)
    model = g.model(g.node("MatMul", [a, b], "product"), [3, 2, 67, 70])
    for plan in ("simple", *TILES):
        runtime = Runtime(model, cl_device, batched=plan)
        (found,) = check(runtime, random_inputs(runtime))
        assert found.ratio < 1 and found.magnitude > 0
        (planned,) = [p for p in runtime.plan if isinstance(p.step, Tuned)]
        assert planned.kernel == ("batched_matmul" if plan == "simple" else "batched_matmul_tiled")


@pytest.mark.parametrize("plan", BATCHED_PLANS)
def test_a_batched_matmul_whose_epilogue_took_a_reshape_in(cl_device, plan, tmp_path: Path) -> None:
    """Swin's shifted windows at batch 2: the scores (B * windows, heads, N, N) plus their
    position bias, reshaped to (B, windows, heads, N, N) for the mask: the product's matrices
    are its operands', not its stored tensor's (that diverged before this test).
    """
    g = GraphBuilder("windows", seed=9)
    a, b = g.input("a", [4, 3, 5, 6]), g.input("b", [4, 3, 6, 5])
    scores = g.node(
        "Add",
        [g.node("MatMul", [a, b], "scores"), g.parameter("bias", [3, 5, 5], std=1.0)],
        "biased",
    )
    split = g.node("Reshape", [scores, g.constant("windows", np.array([2, 2, 3, 5, 5]))], "split")
    masked = g.node("Add", [split, g.input("mask", [1, 2, 1, 5, 5])], "masked")
    onnx.save(g.model(masked, [2, 2, 3, 5, 5]), tmp_path / "model.onnx")
    runtime = Runtime(load_model(tmp_path / "model.onnx"), cl_device, batched=plan)
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1 and found.magnitude > 0
    assert next(p.step.op for p in runtime.plan) == "MatMul+Add+Reshape"


def test_timing_the_plans_leaves_the_weights_as_they_are(cl_device, tmp_path: Path) -> None:
    """The plans are timed at load on operands filled with ones, never on a weight's buffer,
    also where the weight reaches the product through a Reshape (the same buffer).
    """
    g = GraphBuilder("weights_kept", seed=6)
    a, w = g.input("a", [2, 3, 16, 32]), g.parameter("w", [6, 32, 16], std=1.0)
    shape = g.constant("shape", np.array([2, 3, 32, 16], np.int64))
    product = g.node("MatMul", [a, g.node("Reshape", [w, shape], "w4")], "product")
    onnx.save(g.model(product, [2, 3, 16, 16]), tmp_path / "model.onnx")
    runtime = Runtime(load_model(tmp_path / "model.onnx"), cl_device)  # every plan is timed
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1 and found.magnitude > 0


def test_a_batched_plan_the_runtime_lacks_is_one_line(cl_device) -> None:
    plans = ", ".join(BATCHED_PLANS)
    with pytest.raises(OctuneError, match=f"batched is one of {plans} or None"):
        Runtime(load_model("bert_base_layer", dims={"sequence": 8}), cl_device, batched="fast")


# --- a built-in network with tuned configs: database, bundle, server ----------------------------

# Two layers of squeezenet1.1: its first squeeze (1x1) and a 3x3 expand of its fifth fire.
SQUEEZE = ["conv2d_1x1", "--c", "64", "--h", "55", "--w", "55", "--k", "16", "--r", "1", "--s", "1"]
EXPAND = ["conv2d_direct", "--c", "48", "--h", "13", "--w", "13", "--k", "192", "--r", "3",
          "--s", "3", "--pad", "1"]  # fmt: skip


def _run(*args: str) -> dict[str, dict[str, object]]:
    """`octune run squeezenet1.1` with --json: its layers by name."""
    out = Path(args[args.index("--json") + 1])
    result = octune("run", "squeezenet1.1", "--repeat", "1", "--fuse", *args)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "Output agrees with onnxruntime" in result.stdout
    payload = json.loads(out.read_text())
    assert all(o["max_error"] <= o["tolerance"] * o["magnitude"] for o in payload["outputs"])
    # 26 convs and the epilogues their kernels do not run in their stores, 4 pools; the 8
    # concats cost none: each fire's two branches write into the halves of its output
    # (sub-buffers at offsets a CPU device aligns to)
    convs = [layer for layer in payload["layers"] if "Conv" in layer["op"]]
    fused = sum(load_kernel(layer["kernel"]).fuses_epilogue for layer in convs)
    assert len(convs) == 26
    assert payload["launches"] == 2 * 26 - fused + 4
    return {layer["layer"]: layer for layer in payload["layers"]}


def _choices(layers: dict[str, dict[str, object]]) -> dict[str, tuple[object, ...]]:
    return {
        name: (layer["kernel"], layer["match"], layer["config"]) for name, layer in layers.items()
    }


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> tuple[str, dict[str, dict[str, object]]]:
    """A database where real short tuning runs tuned two squeezenet layers, and `octune run`
    of squeezenet with its configs.
    """
    folder = tmp_path_factory.mktemp("tuned")
    url = f"sqlite:///{folder / 'octune.db'}"
    for layer in (SQUEEZE, EXPAND):
        result = octune("tune", *layer, "--n", "1", "--budget", "3", "--confirm", "1",
                        "--seed", "1", "--db", url)  # fmt: skip
        assert result.returncode == 0, result.stderr + result.stdout
    return url, _run("--db", url, "--json", str(folder / "run.json"))


def test_a_network_runs_with_the_configs_tuning_runs_stored(tuned) -> None:
    _, layers = tuned
    squeeze, expand = layers["features.3.squeeze"], layers["features.9.expand3x3"]
    assert (squeeze["kernel"], squeeze["match"]) == ("conv2d_1x1", "exact")
    assert (expand["kernel"], expand["match"]) == ("conv2d_direct", "exact")
    convs = [layer for layer in layers.values() if layer["op"] == "Conv+Relu"]
    assert len(convs) == 26
    assert all(layer["match"] in ("exact", "nearest") for layer in convs)
    assert all(layer["kernel_s"] > 0 for layer in layers.values())


def test_one_config_per_device_is_the_largest_tuned_layers(tuned, tmp_path: Path) -> None:
    """The 3x3 layer has more flops than the squeeze, and conv2d_direct takes every layer."""
    url, layers = tuned
    device = _run("--db", url, "--configs", "one-per-device", "--json", str(tmp_path / "o.json"))
    config = layers["features.9.expand3x3"]["config"]
    for name, layer in device.items():
        if layers[name]["op"] == "Conv+Relu":
            assert (layer["kernel"], layer["match"], layer["config"]) == (
                "conv2d_direct", "device", config,
            )  # fmt: skip


def test_a_bundle_and_a_server_answer_a_network_as_the_database(
    tuned, device_info: DeviceInfo, tmp_path: Path
) -> None:
    url, layers = tuned
    bundle = tmp_path / "bundle"
    exported = octune("export", "--device", device_info.fingerprint, "--out", str(bundle),
                      "--no-model", "--db", url)  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    from_bundle = _run("--bundle", str(bundle), "--json", str(tmp_path / "b.json"))
    assert _choices(from_bundle) == _choices(layers)
    server = LiveServer(url, tmp_path / "server.log", "--no-predict")
    try:
        from_server = _run("--server", server.url, "--json", str(tmp_path / "s.json"))
        # What a first-use confirmation runs beside an answer: the same from all three.
        kernel = load_kernel("conv2d_direct")
        with Store(url) as store:
            sources = (StoreConfigs(store, device_info), ServerConfigs(server.url, device_info),
                       BundleConfigs(bundle, device_info))  # fmt: skip
            for c, h in ((48, 27), (200, 13)):
                shape = {"n": 2, "c": c, "h": h, "w": h, "k": 32, "r": 3, "s": 3, "stride": 1,
                         "pad": 1, "dilation": 1, "groups": 1, "nhwc": 0}  # fmt: skip
                found = [source.neighbours(kernel, shape, "float32", 4) for source in sources]
                assert found[0] and found[0] == found[1] == found[2], found
    finally:
        server.stop()
    assert _choices(from_server) == _choices(layers)
    log = (tmp_path / "server.log").read_text()
    assert log.count("POST /v1/lookup/batch") == 1  # squeezenet's one family, one request
    assert "GET /v1/lookup?" not in log


# --- divergence and mistakes -------------------------------------------------------------------


def _broken_kernel_model(tmp_path: Path, wrong_store: str) -> tuple[Path, Path]:
    """A user's conv2d kernel that stores ``wrong_store`` instead of its sums, taking only
    8-channel layers and written for CPUs, as the test device is (its folder), and a model of
    two convs whose second has 8 channels.
    """
    folder = tmp_path / "kernels"
    folder.mkdir()
    direct = load_kernel("conv2d_direct")
    store = "EPILOGUE(out[kk], at);"
    assert store in direct.source
    (folder / "conv2d_broken.cl").write_text(direct.source.replace(store, wrong_store))
    space = yaml.safe_load(direct.space.source_text)
    space["kernel"] = "conv2d_broken"
    space["requires"] = [*space.get("requires", []), "K == 8"]
    space["devices"] = ["cpu"]
    (folder / "conv2d_broken.yaml").write_text(yaml.safe_dump(space, sort_keys=False))
    g = GraphBuilder("two_convs", seed=3)
    x = g.input("input", [1, 4, 8, 8])
    y = g.relu(g.conv(x, "conv1", 4, 16, 3), "relu1")
    y = g.relu(g.conv(y, "conv2", 16, 8, 3), "relu2")
    y = g.node("Flatten", [g.node("GlobalAveragePool", [y], "pool")], "flat")
    onnx.save(g.model(y, [1, 8]), tmp_path / "two_convs.onnx")
    return folder, tmp_path / "two_convs.onnx"


def test_a_wrong_kernel_is_named_as_the_first_layer_that_diverged(tmp_path: Path) -> None:
    """The default policy picks the broken kernel (first by name among the defaults of the
    kernels written for CPUs) for the second conv only.
    """
    folder, model = _broken_kernel_model(tmp_path, "EPILOGUE(1.5f * out[kk], at);")
    result = octune("--kernel-dir", str(folder), "run", str(model), "--configs", "default")
    assert_one_line_error(result, "disagrees with onnxruntime", "layer 'conv2'",
                          "kernel conv2d_broken", "diverged first", code=1)  # fmt: skip


def test_a_confirmed_run_drops_a_wrong_kernel_and_keeps_what_it_measured(tmp_path: Path) -> None:
    """With nothing tuned, every answer is a default: the confirmed policy runs and verifies
    each kernel that takes a layer (and the CPU starts of conv2d_panel), so the broken kernel
    is dropped, though it would be the fastest (storing zeros, it computes nothing). What it
    measured, the rejections too, stays in the database, where the next load finds the layers
    tuned at their shapes.
    """
    folder, model = _broken_kernel_model(tmp_path, "EPILOGUE(0.0f, at);")
    out = tmp_path / "run.json"
    db = f"sqlite:///{tmp_path / 'empty.db'}"

    def confirmed(*flags: str) -> list[dict[str, str]]:
        args = ["run", str(model), "--configs", "confirmed", "--db", db, "--repeat", "1"]
        result = octune("--kernel-dir", str(folder), *args, "--json", str(out), *flags)
        assert result.returncode == 0, result.stderr + result.stdout
        assert "Output agrees with onnxruntime" in result.stdout
        return [layer for layer in json.loads(out.read_text())["layers"] if "Conv" in layer["op"]]

    timed = {"default, timed", "start, timed"}  # an answer or a CPU start of conv2d_panel
    layers = confirmed("--no-record")
    assert len(layers) == 2 and {layer["match"] for layer in layers} <= timed
    assert "conv2d_broken" not in {layer["kernel"] for layer in layers}
    with Store(db) as store:
        assert not store.stored_devices()  # --no-record: the database as it was
    first = confirmed()
    assert len(first) == 2 and {layer["match"] for layer in first} <= timed
    broken = kernel_from_texts("conv2d_broken", (folder / "conv2d_broken.cl").read_text(),
                               (folder / "conv2d_broken.yaml").read_text())  # fmt: skip
    with Store(db) as store:  # kept, the broken kernel's rejected results too
        rejected = store.history(broken.name, broken.sha256)
        assert rejected and all(record.time_s is None for record in rejected)
        assert store.history("conv2d_direct", load_kernel("conv2d_direct").sha256)
    again = confirmed()  # tuned at their shapes now: nothing to confirm
    assert [layer["match"] for layer in again] == ["exact", "exact"]
    assert [layer["kernel"] for layer in again] == [layer["kernel"] for layer in first]


def _unsupported(tmp_path: Path) -> Path:
    g = GraphBuilder("hardmax", seed=1)
    y = g.node("Hardmax", [g.input("input", [1, 4])], "gate")
    onnx.save(g.model(y, [1, 4]), tmp_path / "hardmax.onnx")
    return tmp_path / "hardmax.onnx"


def _strides(tmp_path: Path) -> Path:
    g = GraphBuilder("strides", seed=1)
    x = g.input("input", [1, 4, 8, 8])
    w = g.parameter("w", (4, 4, 3, 3), 0.1)
    y = g.node("Conv", [x, w], "conv", kernel_shape=[3, 3], strides=[2, 1], pads=[1, 1, 1, 1])
    onnx.save(g.model(y, [1, 4, 4, 8]), tmp_path / "strides.onnx")
    return tmp_path / "strides.onnx"


def _huge(tmp_path: Path) -> Path:
    """Legal, its tensors within 32-bit indexing, but 98 GiB of them, more than any device
    here holds: refused before anything is allocated.
    """
    g = GraphBuilder("huge", seed=1)
    y = g.input("input", [1, 3, 12000, 12000])
    for index in range(30):
        y = g.conv(y, f"conv{index}", 3 if index == 0 else 6, 6, 1)
    onnx.save(g.model(y, [1, 6, 12000, 12000]), tmp_path / "huge.onnx")
    return tmp_path / "huge.onnx"


def _matmul_of_nothing(tmp_path: Path) -> Path:
    g = GraphBuilder("empty", seed=1)
    x = g.input("input", [0, 4])
    y = g.node("MatMul", [x, g.parameter("w", (4, 3), 0.1)], "fc")
    onnx.save(g.model(y, [0, 3]), tmp_path / "empty.onnx")
    return tmp_path / "empty.onnx"


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (lambda t: ["nosuchnet"], ["'nosuchnet'", "squeezenet1.1"]),
        (lambda t: [str(_unsupported(t))], ["Hardmax node 'gate'", "not an operator"]),
        (lambda t: [str(_strides(t))], ["Conv node 'conv'", "takes one for both axes"]),
        (lambda t: [str(_matmul_of_nothing(t))], ["MatMul node 'fc'", "m=0"]),
        (lambda t: [str(_huge(t))], ["needs 98.17 GiB of tensors and weights", "smaller inputs"]),
        (lambda t: ["squeezenet1.1", "--configs", "best"], ["unknown --configs 'best'"]),
        (
            lambda t: ["squeezenet1.1", "--db", "sqlite://", "--bundle", str(t)],
            ["one config source", "--bundle and --db"],
        ),
        (lambda t: ["squeezenet1.1", "--bundle", str(t / "none")], ["is not a bundle directory"]),
        (
            lambda t: ["squeezenet1.1", "--server", f"http://127.0.0.1:{free_port()}"],
            ["cannot reach the octune server"],
        ),
    ],
    ids=[
        "unknown",
        "operator",
        "strides",
        "empty",
        "huge",
        "policy",
        "two-sources",
        "no-bundle",
        "no-server",
    ],
)
def test_mistakes_are_one_line(args, fragments, tmp_path: Path, request) -> None:
    code = 5 if request.node.callspec.id == "no-server" else 2  # the server, else usage
    assert_one_line_error(octune("run", *args(tmp_path)), *fragments, code=code)


def test_inputs_of_the_wrong_shape_are_refused(cl_device, tmp_path: Path) -> None:
    g = GraphBuilder("relu", seed=1)
    onnx.save(g.model(g.relu(g.input("input", [2, 3]), "relu"), [2, 3]), tmp_path / "m.onnx")
    runtime = Runtime(load_model(tmp_path / "m.onnx"), cl_device)
    assert np.allclose(runtime.run({"input": -np.ones((2, 3), np.float32)})["relu"], 0)
    with pytest.raises(Exception, match=r"input 'input' must be a float32 array of shape \(2, 3\)"):
        runtime.run({"input": np.ones((3, 2), np.float32)})


def test_an_answer_naming_a_retired_version_is_refused(device_info: DeviceInfo) -> None:
    """An older server may still answer a version that this octune retires: never run it."""
    source, workload = default_configs(device_info), gemm_workload(64, 64, 4096)
    kernel = load_kernel("gemm_splitk_serial")
    (answer,) = source.answers(kernel.name, [workload.shape])
    assert choose(source, [workload], [answer], "tuned", device_info.limits)
    old = replace(answer, kernel_sha256=sorted(kernel.space.retired)[0])
    with pytest.raises(OctuneError, match=r"which is retired \(one-launch split-K raced"):
        choose(source, [workload], [old], "tuned", device_info.limits)


def test_epilogue_divisors_divide_every_index_exactly() -> None:
    """The magic numbers kernels/epilogue.clh divides element numbers with, in the kernels'
    64-bit arithmetic, against Python's integer division at the edges and at random.
    """
    rng = np.random.default_rng(5)
    divisors = [*range(1, 300), 3136, 12544, 2**30, 2**31 - 1, *rng.integers(1, 2**31, 300)]
    for d in map(int, divisors):
        _, magic, shift = divisor(d)
        edges = [0, 1, d - 1, d, 2**31 - 1, (2**31 - 1) // d * d - 1]
        i = np.array([e for e in edges if e >= 0] + list(rng.integers(0, 2**31, 50)), np.uint64)
        assert ((i * magic) >> np.uint64(shift) == i // np.uint64(d)).all(), d
