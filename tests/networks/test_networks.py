"""Networks: the built-in graphs against their published architectures, ONNX import of Conv,
Gemm and MatMul into workloads, weighted budgets, and the commands around them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml
from helpers.cli_testing import assert_one_line_error, octune
from onnx import TensorProto, helper, numpy_helper

from octune.core.errors import OctuneError
from octune.db.store import Store
from octune.networks.builtin import BUILTIN
from octune.networks.layers import Layer, extract_layers, load_model, node_layers
from octune.networks.workloads import network_layers, network_tasks, time_shares
from octune.tuner.campaign import load_tasks, share
from octune.tuner.session import Budget

# Published sizes: torchvision's parameter counts and multiply-adds at 224x224 (MobileNet v1:
# the paper's 569M mult-adds and Keras's 4,231,976 trainable parameters; BERT-base: one of its
# 12 encoder layers, 7,087,872 of its 110M parameters, at sequence 128).
PUBLISHED = {
    "squeezenet1.1": (1_235_496, 349.2e6),
    "mobilenet_v1": (4_231_976, 568.7e6),
    "mobilenet_v2": (3_504_872, 300.8e6),
    "resnet18": (11_689_512, 1814.1e6),
    "resnet50": (25_557_032, 4089.2e6),
    "bert_base_layer": (7_087_872, 931.1e6),
}


def conv_layers(layers: Sequence[Layer]) -> list[Layer]:
    return [layer for layer in layers if layer.family == "conv2d"]


def gemm_layers(layers: Sequence[Layer]) -> list[Layer]:
    return [layer for layer in layers if layer.family == "gemm"]


def launches(layers: Sequence[Layer]) -> int:
    return sum(layer.count for layer in layers)


def conv(c: int, hw: int, k: int, rs: int, stride: int = 1, groups: int = 1) -> dict[str, int]:
    """A square conv2d shape at batch 1 padded to keep its size, with the family's defaults."""
    shape = {"n": 1, "c": c, "h": hw, "w": hw, "k": k, "r": rs, "s": rs, "stride": stride,
             "pad": rs // 2, "dilation": 1, "groups": groups}  # fmt: skip
    return Layer("conv2d", shape, (), 1).workload().shape


def gemm(m: int, n: int, k: int, transb: int = 0) -> dict[str, int]:
    return {"m": m, "n": n, "k": k, "transa": 0, "transb": transb}


def test_resnet50_has_53_convs_23_distinct_and_a_2048_to_1000_fc() -> None:
    layers, untuned = network_layers("resnet50", None, {})
    convs = conv_layers(layers)
    assert (len(convs), launches(convs), untuned) == (23, 53, [])
    by_node = {layer.nodes[0]: layer for layer in convs}
    assert by_node["conv1"].shape == conv(3, 224, 64, 7, stride=2)
    # v1.5: the stride is on the 3x3; layer1's conv3 and downsample are one shape.
    assert by_node["layer2.0.conv2"].shape == conv(128, 56, 128, 3, stride=2)
    assert by_node["layer1.0.conv3"].nodes == (
        "layer1.0.conv3", "layer1.0.downsample.0", "layer1.1.conv3", "layer1.2.conv3"
    )  # fmt: skip
    assert by_node["layer3.1.conv2"].count == 5
    assert gemm_layers(layers) == [Layer("gemm", gemm(1, 1000, 2048, transb=1), ("fc",), 1)]


def test_mobilenet_v1_has_27_convs_19_distinct_13_depthwise_and_a_1024_to_1000_gemm() -> None:
    layers, _ = network_layers("mobilenet_v1", None, {})
    convs = conv_layers(layers)
    assert (len(convs), launches(convs)) == (19, 27)
    depthwise = [layer for layer in convs if layer.shape["groups"] == layer.shape["c"] > 1]
    assert launches(depthwise) == 13
    assert convs[-1].shape == conv(1024, 7, 1024, 1)
    assert [layer.shape for layer in gemm_layers(layers)] == [gemm(1, 1000, 1024, transb=1)]


def test_mobilenet_v2_resnet18_and_squeezenet_conv_counts() -> None:
    v2, _ = network_layers("mobilenet_v2", None, {})
    assert launches(conv_layers(v2)) == 52
    assert launches([layer for layer in v2 if layer.shape.get("groups", 1) > 1]) == 17
    assert [layer.shape for layer in gemm_layers(v2)] == [gemm(1, 1000, 1280, transb=1)]
    r18, _ = network_layers("resnet18", None, {})
    assert launches(conv_layers(r18)) == 20
    assert len([layer for layer in conv_layers(r18) if "downsample" in layer.nodes[0]]) == 3
    assert [layer.shape for layer in gemm_layers(r18)] == [gemm(1, 1000, 512, transb=1)]
    squeeze, _ = network_layers("squeezenet1.1", None, {})
    assert (launches(squeeze), gemm_layers(squeeze)) == (26, [])
    assert squeeze[0].shape == {**conv(3, 224, 64, 3, stride=2), "pad": 0}
    assert squeeze[-1].shape == conv(512, 13, 1000, 1)


def test_bert_layer_attention_is_12_gemms_per_head_batch() -> None:
    layers, untuned = network_layers("bert_base_layer", None, {})
    assert untuned == []
    found = {(layer.count, *layer.shape.values()) for layer in layers}
    assert found == {
        (4, 128, 768, 768, 0, 0),  # query, key, value, output projections
        (12, 128, 128, 64, 0, 0),  # Q K^T per head: [12,128,64] x [12,64,128]
        (12, 128, 64, 128, 0, 0),  # softmax(QK^T) V per head
        (1, 128, 3072, 768, 0, 0),
        (1, 128, 768, 3072, 0, 0),
    }
    batched, _ = network_layers("bert_base_layer", 2, {"sequence": 64})
    per_node = {layer.nodes[0]: layer for layer in batched}
    assert per_node["attention.self.query.matmul"].shape == gemm(128, 768, 768)  # 2 x 64 rows
    assert per_node["attention.self.scores"].shape == gemm(64, 64, 64)
    assert per_node["attention.self.scores"].count == 48  # with the context GEMMs of that shape


def test_batch_changes_n_not_the_distinct_shapes() -> None:
    layers, _ = network_layers("resnet50", 4, {})
    assert (len(conv_layers(layers)), launches(conv_layers(layers))) == (23, 53)
    assert {layer.shape["n"] for layer in conv_layers(layers)} == {4}
    assert gemm_layers(layers)[0].shape["m"] == 4


def test_node_layers_cover_every_tunable_node_once() -> None:
    model = load_model("resnet50", weights=False)
    per_node, _ = node_layers(model)
    tunable = [node.name for node in model.graph.node if node.op_type in ("Conv", "Gemm")]
    assert list(per_node) == tunable and len(tunable) == 54
    merged, _ = extract_layers(model)
    for layer in merged:
        assert all(per_node[name].shape == layer.shape for name in layer.nodes)
        assert sum(per_node[name].count for name in layer.nodes) == layer.count
    bert, _ = node_layers(load_model("bert_base_layer", weights=False))
    assert bert["attention.self.scores"] == Layer(
        "gemm", gemm(128, 128, 64), ("attention.self.scores",), 12
    )


@pytest.mark.parametrize("name", list(BUILTIN))
def test_builtin_matches_published_sizes_and_runs_in_onnxruntime(name: str) -> None:
    model = load_model(name)
    onnx.checker.check_model(model)
    params = sum(
        int(np.prod(tensor.dims))
        for tensor in model.graph.initializer
        if tensor.name.endswith((".weight", ".bias"))
    )
    layers, _ = extract_layers(model)
    macs = sum(layer.workload().flops * layer.count for layer in layers) / 2
    assert params == PUBLISHED[name][0]
    assert macs == pytest.approx(PUBLISHED[name][1], rel=1e-3)
    # Tuning builds it without weights: the same layers.
    assert network_layers(name, None, {}) == (layers, [])

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (given,) = session.get_inputs()
    x = np.random.default_rng(0).standard_normal(given.shape).astype(np.float32)
    (out,) = session.run(None, {given.name: x})
    expected = [1, 128, 768] if name.startswith("bert") else [1, 1000]
    assert list(out.shape) == expected
    assert np.isfinite(out).all() and 0.1 < np.sqrt(np.mean(out**2)) < 10  # activations O(1)


def test_builtin_weights_are_deterministic() -> None:
    first, second = load_model("squeezenet1.1"), load_model("squeezenet1.1")
    assert first.SerializeToString() == second.SerializeToString()


# --- import of ONNX files ------------------------------------------------------------------------


def tiny_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: dict[str, Sequence[int | str]],
    weights: dict[str, Sequence[int]] | None = None,
    opsets: Sequence[tuple[str, int]] = (("", 17),),
) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    initializers = [
        numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
        for name, shape in (weights or {}).items()
    ]
    graph = helper.make_graph(
        list(nodes), "tiny",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs.items()],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
        initializers,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(*o) for o in opsets])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)  # the output typed, as exporters write it


def inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path


def conv_node(name: str, weight: str, **attributes: object) -> onnx.NodeProto:
    return helper.make_node("Conv", ["x", weight], [name], name=name, **attributes)


def test_conv_attributes_become_conv2d_keys_and_the_inexpressible_are_listed() -> None:
    nodes = [
        conv_node("same", "w3", auto_pad="SAME_UPPER"),
        conv_node("valid", "w3", auto_pad="VALID", strides=[2, 2]),
        conv_node("dilated", "w3", pads=[2, 2, 2, 2], dilations=[2, 2]),
        conv_node("grouped", "w_grouped", group=2),
        conv_node("odd_same", "w3", auto_pad="SAME_UPPER", strides=[2, 2]),
        conv_node("asymmetric", "w3", pads=[0, 0, 1, 1]),
        conv_node("strides", "w3", strides=[2, 1], pads=[1, 1, 1, 1]),
        helper.make_node("ConvTranspose", ["x", "w_transposed"], ["up"], name="up"),
        helper.make_node("Relu", ["x"], ["relu"], name="relu"),
    ]
    weights = {"w3": [8, 4, 3, 3], "w_grouped": [6, 2, 1, 1], "w_transposed": [4, 8, 3, 3]}
    model = inferred(tiny_model(nodes, {"x": [2, 4, 16, 16]}, weights))
    per_node, _ = node_layers(model)
    base = {"n": 2, "c": 4, "h": 16, "w": 16, "k": 8, "r": 3, "s": 3, "stride": 1, "pad": 1,
            "dilation": 1, "groups": 1}  # fmt: skip
    expected = {
        "same": base,
        "valid": {**base, "stride": 2, "pad": 0},
        "dilated": {**base, "pad": 2, "dilation": 2},
        "grouped": {**base, "k": 6, "r": 1, "s": 1, "pad": 0, "groups": 2},
        # Uneven pads: the conv of an input padded beforehand (the runtime pads it).
        "odd_same": {**base, "h": 17, "w": 17, "stride": 2, "pad": 0},
        "asymmetric": {**base, "h": 17, "w": 17, "pad": 0},
    }
    assert {name: layer.shape for name, layer in per_node.items()} == {
        name: Layer("conv2d", shape, (), 1).workload().shape for name, shape in expected.items()
    }
    _, untuned = extract_layers(model)
    assert untuned == [
        "Conv (strides [2, 1], dilations [1, 1]: conv2d takes one for both axes) x1",
        "ConvTranspose x1",
    ]


@pytest.mark.parametrize(
    ("a", "b", "shape", "count"),
    [
        ([64, 32], [32, 16], gemm(64, 16, 32), 1),
        ([2, 128, 768], [768, 3072], gemm(256, 3072, 768), 1),  # shared weight: one GEMM
        ([12, 128, 64], [12, 64, 128], gemm(128, 128, 64), 12),  # BERT attention
        ([4, 1, 8, 16], [3, 16, 5], gemm(8, 5, 16), 12),  # broadcast batch 4 x 3
        ([32], [32, 10], gemm(1, 10, 32), 1),
        ([6, 7, 32], [32], gemm(42, 1, 32), 1),
    ],
)
def test_matmul_is_repeated_gemms(
    a: list[int], b: list[int], shape: dict[str, int], count: int
) -> None:
    node = helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")
    (layer,) = node_layers(inferred(tiny_model([node], {"a": a, "b": b})))[0].values()
    assert (layer.shape, layer.count) == (shape, count)


def test_gemm_transposes_map_to_gemm_flags() -> None:
    node = helper.make_node("Gemm", ["a", "b"], ["y"], name="fc", transA=1, transB=1)
    (layer,) = node_layers(inferred(tiny_model([node], {"a": [20, 8], "b": [30, 20]})))[0].values()
    assert layer.shape == {"m": 8, "n": 30, "k": 20, "transa": 1, "transb": 1}


def test_dynamic_dims_need_batch_or_dim(tmp_path: Path) -> None:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    path = save(tiny_model(nodes, {"x": ["N", "tokens", 32]}, {"w": [32, 16]}), tmp_path / "d.onnx")
    with pytest.raises(OctuneError, match=r"dynamic dimensions \[N, tokens, 32\].*--batch"):
        load_model(path)
    (layer,) = node_layers(load_model(path, batch=3, dims={"tokens": 5}))[0].values()
    assert layer.shape == gemm(15, 16, 32)
    with pytest.raises(OctuneError, match="no dynamic dimension 'seq' for --dim; it has N, tokens"):
        load_model(path, batch=3, dims={"seq": 5})
    fixed = save(tiny_model(nodes, {"x": [2, 4, 32]}, {"w": [32, 16]}), tmp_path / "f.onnx")
    with pytest.raises(OctuneError, match="fixed batch size of 2: leave out --batch"):
        load_model(fixed, batch=3)
    # Asking for the batch a model has is no mistake (a batch-1 export and --batch 1).
    (layer,) = node_layers(load_model(fixed, batch=2))[0].values()
    assert layer.shape == gemm(8, 16, 32)


def test_a_conv_after_an_operator_without_shapes_is_one_line() -> None:
    nodes = [
        helper.make_node("Mystery", ["x"], ["hidden"], name="mystery", domain="com.example"),
        helper.make_node("Conv", ["hidden", "w"], ["y"], name="conv"),
    ]
    model = tiny_model(nodes, {"x": [1, 3, 8, 8]}, {"w": [4, 3, 3, 3]},
                       opsets=[("", 17), ("com.example", 1)])  # fmt: skip
    with pytest.raises(OctuneError, match="node 'conv' has no static shape for its input 'hidden'"):
        extract_layers(inferred(model))


def test_unnamed_nodes_get_names_and_other_domains_are_listed(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Mystery", ["x"], ["y"], domain="com.example"),
        helper.make_node("MatMul", ["x", "w"], ["h"]),
    ]
    model = tiny_model(nodes, {"x": [4, 8]}, {"w": [8, 8]}, opsets=[("", 17), ("com.example", 1)])
    loaded = load_model(save(model, tmp_path / "m.onnx"))
    assert [node.name for node in loaded.graph.node] == ["Mystery_0", "MatMul_1"]
    layers, untuned = extract_layers(loaded)
    assert (layers[0].nodes, untuned) == (("MatMul_1",), ["com.example.Mystery x1"])


# --- weights and the budget ----------------------------------------------------------------------


def test_weights_follow_estimated_time() -> None:
    layers, _ = network_layers("mobilenet_v1", None, {})
    shares = dict(zip((layer.nodes[0] for layer in layers), time_shares(layers), strict=True))
    assert sum(shares.values()) == pytest.approx(100, abs=0.1)
    assert shares["layers.7.pw"] == max(shares.values())  # 5 launches of the largest 1x1
    # A depthwise conv moves as much memory as it computes: weighted above its flops' share.
    assert shares["layers.1.dw"] > 2  # its flops are 0.6 % of the network's


def test_network_tasks_name_their_layers_by_node() -> None:
    """A tuning run names a layer with no verified config as a user knows it."""
    layers, _ = network_layers("resnet50", None, {})
    labels = {task.label for task in network_tasks(layers)}
    assert "GEMM NT 1x1000x2048 (fc)" in labels
    assert any(label.endswith("(layer1.0.conv3 and 3 more)") for label in labels)


def test_share_splits_by_weight_and_passes_leftovers_on() -> None:
    # A quarter of what is left evenly, the rest by weight: 10 x (1/8 + 3/4 x 3/4) = 6.9.
    assert share(Budget(candidates=10), [3.0, 1.0], 0, 0.0) == Budget(candidates=6)
    assert share(Budget(candidates=10), [1.0], 5, 0.0) == Budget(candidates=5)
    assert share(Budget(candidates=2), [0.01, 100.0], 0, 0.0) == Budget(candidates=1)
    assert share(Budget(candidates=10), [1.0], 10, 0.0) is None
    timed = share(Budget(seconds=100.0), [1.0, 3.0], 0, 20.0)
    assert timed is not None and timed.seconds == pytest.approx(80 * (1 / 8 + 3 / 4 / 4))
    assert share(Budget(seconds=100.0), [1.0], 0, 100.0) is None
    both = share(Budget(candidates=40, seconds=100.0, patience=3), [1.0, 1.0], 10, 50.0)
    assert both == Budget(candidates=15, seconds=25.0, patience=3)


@pytest.mark.parametrize("total", [Budget(candidates=100), Budget(seconds=100.0)])
def test_share_gives_a_tiny_weight_at_least_a_quarter_of_an_even_part(total: Budget) -> None:
    """By weight alone, a layer estimated at 0.03 % of the time got one candidate of 100."""
    weights = [0.01, 10.0, 10.0, 10.0]
    part = share(total, weights, 0, 0.0)
    assert part is not None
    floor = 100 / 4 / len(weights)
    if total.candidates is not None:
        assert part.candidates == int(floor)
    else:
        assert part.seconds is not None and part.seconds >= floor


# --- the commands --------------------------------------------------------------------------------


def test_from_onnx_writes_what_tune_workloads_reads(tmp_path: Path) -> None:
    out = tmp_path / "layers.yaml"
    result = octune("workloads", "from-onnx", "resnet18", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "resnet18: 20 conv2d (11 distinct), 1 gemm (1 distinct)" in result.stdout
    layers, _ = network_layers("resnet18", None, {})
    expected = [
        (t.kernel.name, t.workload.key, t.weight, t.launches) for t in network_tasks(layers)
    ]
    loaded = [(t.kernel.name, t.workload.key, t.weight, t.launches) for t in load_tasks(out)]
    assert loaded == expected
    assert {launches for *_, launches in loaded} == {1, 3, 4}  # 3x3 64->64: four launches a pass

    printed = octune("workloads", "from-onnx", "bert_base_layer", "--batch", "2")
    assert printed.returncode == 0, printed.stderr
    entries = yaml.safe_load(printed.stdout)["workloads"]
    assert entries[0] == {
        **gemm(256, 768, 768),
        "kernel": "gemm",
        "weight": pytest.approx(33, abs=1),
        "launches": 4,  # the query, key, value and output projections
    }
    # Attention's products, 2 x 12 matrices each, say so: their weight stays their estimate.
    attention = [e for e in entries if e.get("batched")]
    assert [e["launches"] for e in attention] == [24, 24]
    assert all("batched" not in e for e in entries if e not in attention)
    out.write_text(printed.stdout)
    tasks = load_tasks(out)  # a task for each of an entry's kernels
    assert {t.batched for t in tasks} == {True, False}
    assert all(t.batched == (t.launches == 24) for t in tasks)


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["resnet5"], ["did you mean 'resnet50'?", "squeezenet1.1", "bert_base_layer"]),
        (["bert_base_layer", "--dim", "sequence"], ["--dim takes NAME=SIZE"]),
        (["bert_base_layer", "--dim", "seq=4"], ["no dynamic dimension 'seq'"]),
        (["resnet18", "--batch", "0"], ["1 or more"]),
    ],
)
def test_from_onnx_mistakes_are_one_line(args: list[str], fragments: list[str]) -> None:
    assert_one_line_error(octune("workloads", "from-onnx", *args), *fragments)


def test_dynamic_and_layerless_files_are_one_line(tmp_path: Path) -> None:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    dynamic = save(tiny_model(nodes, {"x": ["N", 32]}, {"w": [32, 16]}), tmp_path / "d.onnx")
    assert_one_line_error(octune("workloads", "from-onnx", str(dynamic)), "[N, 32]", "--batch N")
    relu = save(
        tiny_model([helper.make_node("Relu", ["x"], ["y"])], {"x": [4]}), tmp_path / "r.onnx"
    )
    assert_one_line_error(
        octune("workloads", "from-onnx", str(relu)), "has no Conv, Gemm or MatMul to tune"
    )
    assert_one_line_error(octune("tune", "--model", "resnet18", "--workloads", str(dynamic)),
                          "give one of --model")  # fmt: skip
    assert_one_line_error(octune("tune", "gemm", "--m", "4", "--batch", "2"), "--model")


def as_exported(
    nodes: Sequence[onnx.NodeProto],
    x: Sequence[int | None] | None,
    opsets: Sequence[tuple[str, int]] = (("", 17),),
) -> onnx.ModelProto:
    """Nodes from graph input ``x`` of the shape given (None: none at all) and a 4x3x3x3 weight
    ``w`` to a typed output ``y``, without shape inference.
    """
    graph = helper.make_graph(
        list(nodes), "exported",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
        [numpy_helper.from_array(np.zeros((4, 3, 3, 3), np.float32), "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(*o) for o in opsets])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def bad_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of files that are no usable ONNX model, each one way: BAD_MODELS's names."""
    folder = tmp_path_factory.mktemp("bad")
    (folder / "corrupt.onnx").write_bytes(np.random.default_rng(0).bytes(4096))
    whole = load_model("squeezenet1.1").SerializeToString()  # written by onnx, then cut
    (folder / "truncated.onnx").write_bytes(whole[: len(whole) // 2])
    (folder / "empty.onnx").write_bytes(b"")
    (folder / "folder.onnx").mkdir()
    conv = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv")]
    save(as_exported(conv, None), folder / "unshaped.onnx")
    save(as_exported(conv, [1, None, 8, 8]), folder / "unnamed.onnx")
    mystery = [
        helper.make_node("Mystery", ["x"], ["hidden"], name="mystery", domain="com.example"),
        helper.make_node("Conv", ["hidden", "w"], ["y"], name="conv"),
    ]
    save(as_exported(mystery, [1, 3, 8, 8], [("", 17), ("com.example", 1)]),
         folder / "uninferable.onnx")  # fmt: skip
    _external_data_models(folder, conv)
    return folder


def _external_data_models(folder: Path, conv: list[onnx.NodeProto]) -> None:
    """The weight stored beside the model (as exporters write models past 2 GiB), then its
    file removed, cut short, or named outside the model's folder.
    """
    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    for name in ("missing_data", "short_data", "outside_data", "absolute_data"):
        model = as_exported(conv, [1, 3, 8, 8])
        model.graph.initializer[0].CopyFrom(weight)
        onnx.save_model(model, folder / f"{name}.onnx", save_as_external_data=True,
                        location=f"{name}.bin", size_threshold=0)  # fmt: skip
    (folder / "missing_data.bin").unlink()
    data = (folder / "short_data.bin").read_bytes()
    (folder / "short_data.bin").write_bytes(data[: len(data) // 2])
    outside = onnx.load(folder / "outside_data.onnx", load_external_data=False)
    for entry in outside.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = "../secret.bin"
    (folder.parent / "secret.bin").write_bytes(data)
    onnx.save_model(outside, folder / "outside_data.onnx")
    # Inside the model's folder, but named by an absolute path (onnx refuses it itself).
    absolute = onnx.load(folder / "absolute_data.onnx", load_external_data=False)
    for entry in absolute.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = str((folder / "absolute_data.bin").resolve())
    onnx.save_model(absolute, folder / "absolute_data.onnx")


BAD_MODELS = {
    "corrupt.onnx": ["corrupt.onnx is not an ONNX model (truncated or corrupt)"],
    "truncated.onnx": ["truncated.onnx is not an ONNX model (truncated or corrupt)"],
    "empty.onnx": ["empty.onnx is empty (0 bytes)"],
    "missing.onnx": ["no model file or built-in network", "give an .onnx file that exists"],
    "folder.onnx": ["folder.onnx is a directory: pass the .onnx file in it"],
    "unshaped.onnx": ["unshaped.onnx: graph input 'x' has no shape", "export the model with"],
    "unnamed.onnx": ["unnamed.onnx input 'x' has dimensions [1, ?, 8, 8]", "neither --batch"],
    # A Conv after an operator ONNX cannot infer: the graph's name and the tensor.
    "uninferable.onnx": ["exported: Conv node 'conv' has no static shape for its input 'hidden'"],
}
# External data: every command reads a file through load_model, so each case is one line there
# (in process) and in one command.
BAD_DATA = {
    "missing_data.onnx": ["tensor 'w' keeps its data in 'missing_data.bin', which is missing"],
    "short_data.onnx": ["tensor 'w' needs bytes up to 432 of 'short_data.bin'", "truncated"],
    "outside_data.onnx": ["'../secret.bin', outside the model's folder"],
    "absolute_data.onnx": ["keeps its data at the absolute path", "relative to it"],
}
COMMANDS = {
    "workloads from-onnx": ["workloads", "from-onnx"],
    "tune --model": ["tune", "--model"],
    "run": ["run"],
    "report --model": ["report", "--model"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("name", list(BAD_MODELS))
def test_a_bad_model_file_is_one_line_in_every_command(
    command: str, name: str, bad_models: Path, tmp_path: Path
) -> None:
    result = octune(*COMMANDS[command], str(bad_models / name), db=tmp_path / "octune.db")
    assert "Traceback" not in result.stdout
    assert_one_line_error(result, *BAD_MODELS[name])


@pytest.mark.parametrize("name", list(BAD_DATA))
def test_external_data_is_read_only_beside_the_model_and_whole(
    name: str, bad_models: Path, tmp_path: Path
) -> None:
    with pytest.raises(OctuneError) as raised:
        load_model(bad_models / name)
    assert all(fragment in str(raised.value) for fragment in BAD_DATA[name])
    assert_one_line_error(octune("run", str(bad_models / name)), *BAD_DATA[name])


def test_tune_model_shares_the_budget_by_estimated_time(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="big"),  # 48x32x40
        helper.make_node("Gemm", ["h", "w2"], ["y"], name="small", transB=1),  # 48x4x32
    ]
    path = save(tiny_model(nodes, {"x": ["batch", 40]}, {"w1": [40, 32], "w2": [4, 32]}),
                tmp_path / "two.onnx")  # fmt: skip
    summary = tmp_path / "summary.json"
    result = octune("tune", "--model", str(path), "--batch", "48", "--budget", "10",
                    "--strategy", "exhaustive", "--jobs", "0", "--confirm", "1",
                    "--summary", str(summary), db=tmp_path / "t.db")  # fmt: skip
    assert result.returncode == 0, result.stderr + result.stdout
    assert "2 gemm (2 distinct)" in result.stdout
    rows = json.loads(summary.read_text())
    # Estimated shares 71.8 and 28.2 (the small GEMM moves more than it computes): the big
    # layer first, one candidate each (a quarter of an even part, at least one), then the 8
    # left by the layers' measured times (tests/tuner/test_campaign.py checks that split).
    assert rows[0]["workload"] == "GEMM NN 48x32x40"
    assert [row["tried_now"] >= 1 for row in rows] == [True, True]
    assert sum(row["tried_now"] for row in rows) == 10
    # The network is kept with its layers, for the dashboard and reports without the file.
    with Store(f"sqlite:///{tmp_path / 't.db'}") as store:
        (network,) = store.stored_networks()
    assert network.name == "two.onnx (batch 48)"
    assert sorted(layer["nodes"][0] for layer in network.layers) == ["big", "small"]
    assert {tuple(layer["shape"][k] for k in "mnk") for layer in network.layers} == {
        (48, 32, 40), (48, 4, 32)}  # fmt: skip


def test_tune_model_measures_the_largest_layers_first_and_names_the_starved(
    tmp_path: Path,
) -> None:
    """A budget too small for every layer: the layers left without a turn are the smallest
    by estimated time, wherever they stand in the network, and the run names them.
    """
    nodes = [
        helper.make_node("MatMul", ["x", "w0"], ["a"], name="tiny"),  # 48x8x40
        helper.make_node("MatMul", ["a", "w1"], ["b"], name="mid"),  # 48x64x8
        helper.make_node("MatMul", ["b", "w2"], ["y"], name="big"),  # 48x64x64
    ]
    path = save(tiny_model(nodes, {"x": [48, 40]}, {"w0": [40, 8], "w1": [8, 64],
                                                      "w2": [64, 64]}),
                tmp_path / "three.onnx")  # fmt: skip
    summary = tmp_path / "summary.json"
    result = octune("tune", "--model", str(path), "--budget", "2", "--strategy", "exhaustive",
                    "--jobs", "0", "--confirm", "1", "--summary", str(summary),
                    db=tmp_path / "t.db")  # fmt: skip
    assert result.returncode == 0, result.stderr + result.stdout
    tuned = [row["key"] for row in json.loads(summary.read_text())]
    assert [key.split(",")[1:3] for key in tuned] == [["n=64", "k=8"], ["n=64", "k=64"]]
    assert "Budget spent before 1 workload(s) got a turn" in result.stdout
    assert "48x8x40 (tiny)" in result.stdout


def test_a_model_with_too_many_nodes_is_refused_before_it_is_read(
    bad_models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 61: a model of 10^6 nodes took 110 s and 4 GB; the bound (MAX_NODES, lowered
    here so that a small file crosses it) refuses one in a line.
    """
    from octune.networks import layers

    monkeypatch.setattr(layers, "MAX_NODES", 1)
    result = octune("workloads", "from-onnx", str(bad_models / "uninferable.onnx"),
                    db=tmp_path / "octune.db")  # fmt: skip
    assert_one_line_error(result, "uninferable.onnx has 2 nodes, more than the 1 octune reads")
