"""Models as exporters write them, through the runtime: small synthetic graphs that reproduce
each exporter pattern (Identity over initializers, Constant-fed Clip, Shape chains under a
dynamic batch, SE blocks, SiLU, channel shuffle) and every operator family the runtime runs,
each checked layer by layer against onnxruntime on the real device.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from octune.networks.graph import GraphBuilder
from octune.networks.layers import load_model
from octune.runtime.executor import Runtime
from octune.runtime.verify import check, random_inputs

Build = Callable[[GraphBuilder], tuple[str, list[int | str]]]


def _ints(g: GraphBuilder, name: str, values: list[int]) -> str:
    return g.constant(name, np.array(values, dtype=np.int64))


def _scalar(g: GraphBuilder, name: str, value: float) -> str:
    """A Constant node, as PyTorch's exporter writes scalars (not an initializer)."""
    tensor = helper.make_tensor(name, TensorProto.FLOAT, [], [value])
    g.nodes.append(helper.make_node("Constant", [], [name], name=f"{name}.node", value=tensor))
    return name


def identity_weights(g: GraphBuilder) -> tuple[str, list[int | str]]:
    """TorchScript writes Identity over an initializer where two parameters are equal."""
    x = g.input("input", [1, 4, 8, 8])
    weight = g.parameter("shared.weight", (4, 4, 3, 3), 0.3)
    copy = g.node("Identity", [weight], "onnx::Conv_197")
    y = g.node("Conv", [x, weight], "conv1", kernel_shape=[3, 3], pads=[1] * 4)
    y = g.relu(y, "relu1")
    return g.node("Conv", [y, copy], "conv2", kernel_shape=[3, 3], pads=[1] * 4), [1, 4, 8, 8]


def constant_clip(g: GraphBuilder) -> tuple[str, list[int | str]]:
    """MobileNet v2's ReLU6: Clip bounds from Constant nodes next to the conv."""
    x = g.input("input", [1, 3, 9, 9])
    y = g.batch_norm(g.conv(x, "conv", 3, 8, 3, stride=2), "bn", 8)
    low, high = _scalar(g, "Constant_output_0", 0.0), _scalar(g, "Constant_1_output_0", 6.0)
    return g.node("Clip", [y, low, high], "relu6"), [1, 8, 5, 5]


def dynamic_flatten(g: GraphBuilder) -> tuple[str, list[int | str]]:
    """``x.view(x.size(0), -1)`` under a dynamic batch: Shape -> Gather -> Unsqueeze ->
    Concat -> Reshape, then a Linear.
    """
    x = g.input("input", ["batch", 4, 3, 3])
    y = g.relu(g.conv(x, "conv", 4, 6, 3, bias=True), "relu")
    shape = g.node("Shape", [y], "shape")
    first = g.node("Gather", [shape, _ints(g, "zero", [0])], "batch_size", axis=0)
    size = g.node("Concat", [first, _ints(g, "minus_one", [-1])], "size", axis=0)
    flat = g.node("Reshape", [y, size], "flatten")
    return g.linear(flat, "fc", 54, 5), ["batch", 5]


def squeeze_excite_silu(g: GraphBuilder) -> tuple[str, list[int | str]]:
    """EfficientNet's MBConv: SiLU as x * sigmoid(x), an SE gate multiplying per channel."""
    x = g.input("input", [1, 8, 10, 10])
    y = g.batch_norm(g.conv(x, "expand", 8, 16, 1), "expand.bn", 16)
    y = g.node("Mul", [y, g.node("Sigmoid", [y], "expand.sigmoid")], "expand.silu")
    pooled = g.node("GlobalAveragePool", [y], "se.pool")
    s = g.conv(pooled, "se.reduce", 16, 4, 1, bias=True)
    s = g.node("Mul", [s, g.node("Sigmoid", [s], "se.reduce.sigmoid")], "se.reduce.silu")
    s = g.node("Sigmoid", [g.conv(s, "se.expand", 4, 16, 1, bias=True)], "se.gate")
    y = g.node("Mul", [y, s], "se.scale")
    return g.batch_norm(g.conv(y, "project", 16, 8, 1), "project.bn", 8), [1, 8, 10, 10]


def hardswish_se(g: GraphBuilder) -> tuple[str, list[int | str]]:
    """MobileNet v3: HardSwish, an SE gate through HardSigmoid, gated the other way round."""
    x = g.input("input", [1, 8, 7, 7])
    y = g.node("HardSwish", [g.conv(x, "conv", 8, 8, 3, bias=True)], "hswish")
    s = g.relu(g.conv(g.node("GlobalAveragePool", [y], "pool"), "fc1", 8, 4, 1, bias=True), "r")
    s = g.node("HardSigmoid", [g.conv(s, "fc2", 4, 8, 1, bias=True)], "hsig",
               alpha=1 / 6, beta=0.5)  # fmt: skip
    return g.node("Mul", [s, y], "gate"), [1, 8, 7, 7]


def hardswish_written_out(g: GraphBuilder) -> tuple[str, list[int | str]]:
    """HardSwish as older exporters write it: x * HardSigmoid(x) at 1/6, 1/2 (float32)."""
    x = g.input("input", [1, 4, 6, 6])
    y = g.conv(x, "conv", 4, 8, 3, bias=True)
    gate = g.node("HardSigmoid", [y], "gate", alpha=1 / 6, beta=0.5)
    return g.node("Mul", [y, gate], "hswish"), [1, 8, 6, 6]


def channel_shuffle(g: GraphBuilder) -> tuple[str, list[int | str]]:
    """ShuffleNet v2: a channel split (Split and Slice), Concat, then Reshape, Transpose,
    Reshape.
    """
    x = g.input("input", [1, 8, 6, 6])
    a, b = "half_a", "half_b"
    g.nodes.append(helper.make_node("Split", [x, _ints(g, "halves", [4, 4])], [a, b],
                                    name="split", axis=1))  # fmt: skip
    b = g.relu(g.conv(b, "branch", 4, 4, 1, bias=True), "branch.relu")
    c = g.node("Slice", [x, _ints(g, "s0", [2]), _ints(g, "s1", [6]), _ints(g, "s2", [1])], "sl")
    y = g.node("Concat", [a, b, c], "cat", axis=1)
    y = g.node("Reshape", [y, _ints(g, "grouped", [1, 2, 6, 6, 6])], "group")
    y = g.node("Transpose", [y], "shuffle", perm=[0, 2, 1, 3, 4])
    return g.node("Reshape", [y, _ints(g, "merged", [1, 12, 6, 6])], "ungroup"), [1, 12, 6, 6]


def reductions(g: GraphBuilder) -> tuple[str, list[int | str]]:
    """MNASNet's ReduceMean head; a LayerNorm written out (opset 11 style); Max, Sum, L2."""
    x = g.input("input", [2, 6, 5, 4])
    mean = g.node("ReduceMean", [x], "mean", axes=[2, 3], keepdims=0)
    centred = g.node("Sub", [x, g.node("ReduceMean", [x], "mu", axes=[-1])], "xc")
    var = g.node("ReduceMean", [g.node("Pow", [centred, g.constant("two", np.float32(2))],
                                       "sq")], "var", axes=[-1])  # fmt: skip
    eps = g.constant("eps", np.float32(1e-5))
    norm = g.node("Div", [centred, g.node("Sqrt", [g.node("Add", [var, eps], "ve")], "sd")], "n")
    top = g.node("ReduceMax", [norm], "top", axes=[1, 3], keepdims=0)
    l2 = g.node("ReduceL2", [norm], "l2", axes=[1], keepdims=0)
    l2 = g.node("Reshape", [l2, _ints(g, "l2.rows", [2, -1])], "l2.flat")
    both = g.node("Concat", [g.node("ReduceSum", [top, _ints(g, "h", [1])], "sum", keepdims=1),
                             l2], "both", axis=1)  # fmt: skip
    return g.node("Concat", [mean, both], "out", axis=1), [2, 27]


def row_kernels(g: GraphBuilder) -> tuple[str, list[int | str]]:
    """Softmax across channels (rows strided), a layer norm and a global max pool, each row
    longer than a work-group, so every lane takes several elements; and a softmax over rows
    longer than its lanes keep in registers (945 elements).
    """
    x = g.input("input", [1, 70, 9, 9])
    pooled = g.node("GlobalMaxPool", [g.node("Softmax", [x], "probs", axis=1)], "peak")
    rows = g.node("Reshape", [x, _ints(g, "rows.shape", [70, 81])], "rows")
    gamma, beta = g.parameter("gamma", (81,), 1.0), g.parameter("beta", (81,), 0.5)
    norm = g.node("LayerNormalization", [rows, gamma, beta], "norm", axis=-1)
    long = g.node("Reshape", [x, _ints(g, "long.shape", [6, 945])], "long")
    spread = g.node("Softmax", [long], "spread", axis=-1)
    flat = [g.node("Reshape", [t, _ints(g, f"{t}.flat", [1, -1])], f"{t}.row")
            for t in (pooled, norm, spread)]  # fmt: skip
    return g.node("Concat", flat, "out", axis=1), [1, 70 + 2 * 70 * 81]


def decoder(g: GraphBuilder) -> tuple[str, list[int | str]]:
    """Segmentation heads: bilinear and nearest Resize, ConvTranspose, Pad, Tile, Expand."""
    x = g.input("input", [1, 4, 5, 6])
    up = g.node("Resize", [x, "", g.constant("scales", np.array([1, 1, 2, 2], np.float32))],
                "up", mode="linear", coordinate_transformation_mode="half_pixel")  # fmt: skip
    near = g.node("Resize", [x, "", "", _ints(g, "sizes", [1, 4, 10, 12])], "near",
                  mode="nearest", coordinate_transformation_mode="asymmetric",
                  nearest_mode="floor")  # fmt: skip
    corners = g.node("Resize", [x, "", "", _ints(g, "sizes2", [1, 4, 10, 12])], "corners",
                     mode="linear", coordinate_transformation_mode="align_corners")  # fmt: skip
    weight = g.parameter("deconv.weight", (4, 2, 4, 4), 0.3)
    deconv = g.node("ConvTranspose", [x, weight, g.parameter("deconv.bias", (2,), 0.1)],
                    "deconv", strides=[2, 2], pads=[1, 1, 1, 1])  # fmt: skip
    padded = g.node("Pad", [deconv, _ints(g, "pads", [0, 0, 1, 0, 0, 0, 0, 1])], "pad",
                    mode="reflect")  # fmt: skip
    padded = g.node("Pad", [padded, _ints(g, "crops", [0, 0, -1, 0, 0, 0, 0, -1])], "crop")
    tiled = g.node("Tile", [padded, _ints(g, "reps", [1, 2, 1, 1])], "tile")
    bias = g.node("Expand", [g.parameter("row", (1, 1, 1, 12), 1.0),
                             _ints(g, "to", [1, 4, 10, 12])], "expand")  # fmt: skip
    y = g.node("Add", [g.node("Add", [up, near], "sum1"), g.node("Mul", [tiled, corners],
                                                                  "prod")], "sum2")  # fmt: skip
    return g.node("Add", [y, bias], "biased"), [1, 4, 10, 12]


def functions(g: GraphBuilder) -> tuple[str, list[int | str]]:
    """Activations and broadcasting functions: what transformers and detection heads use."""
    x = g.input("input", [2, 3, 8])

    def op(kind: str, inputs: list[str], **attributes: object) -> str:
        return g.node(kind, inputs, f"{kind.lower()}{len(g.nodes)}", **attributes)

    def const(value: object) -> str:
        return g.constant(f"c{len(g.initializers)}", np.array(value, dtype=np.float32))

    y = op("Add", [op("Elu", [x], alpha=0.7), op("LeakyRelu", [x], alpha=0.1)])
    y = op("PRelu", [y, g.parameter("slope", (8,), 0.3)])
    y = op("Softplus", [op("Add", [y, op("Tanh", [x])])])
    y = op("Max", [y, op("Neg", [op("Abs", [x])])])
    y = op("Min", [y, g.parameter("cap", (3, 1), 1.0, mean=2.0)])
    mask = op("Greater", [x, const(0.0)])
    y = op("Where", [mask, y, op("Exp", [x])])
    y = op("Mul", [y, op("Reciprocal", [op("Add", [op("Abs", [x]), const(1.0)])])])
    remainder = op("Mod", [op("Mul", [x, const(10.0)]), const(3.0)], fmod=1)
    truncated = op("Cast", [op("Cast", [remainder], to=TensorProto.INT32)], to=TensorProto.FLOAT)
    y = op("Add", [y, truncated])
    positive = op("Equal", [mask, g.constant("true", np.array(True))])
    y = op("Add", [y, op("Cast", [positive], to=TensorProto.FLOAT)])
    y = op("Gather", [y, _ints(g, "idx", [7, 0, -1, 2])], axis=2)
    return op("Transpose", [y], perm=[2, 0, 1]), [4, 2, 3]


def tf_moments(g: GraphBuilder) -> tuple[str, list[int | str]]:
    """tf2onnx's LayerNormalization: moments as GlobalAveragePool over a 3-D tensor."""
    x = g.input("input", [1, 6, 16])
    centred = g.node("Sub", [x, g.node("GlobalAveragePool", [x], "mean")], "centred")
    peak = g.node("GlobalMaxPool", [g.node("Abs", [centred], "magnitude")], "peak")
    return g.node("Div", [centred, peak], "scaled"), [1, 6, 16]


def einsum_attention(g: GraphBuilder) -> tuple[str, list[int | str]]:
    """MaxViT's attention: scores and context as Einsums, which load as MatMuls (and run as
    attention, with the softmax between them).
    """
    x = g.input("input", [1, 2, 6, 4])
    keys = g.node("Mul", [x, g.parameter("key_scale", (4,), 1.0)], "keys")
    scores = g.node("Einsum", [x, keys], "scores", equation="b h i d, b h j d -> b h i j")
    weights = g.node("Softmax", [scores], "weights", axis=-1)
    return g.node("Einsum", [weights, x], "context", equation="bhij,bhjd->bhid"), [1, 2, 6, 4]


def gelu_written_out(g: GraphBuilder) -> tuple[str, list[int | str]]:
    """GELU as PyTorch's exporters write it, the 0.5 last and first, after 3-D Linears (which
    onnxruntime's optimiser turns into a GEMM between two reshapes).
    """
    x = g.input("input", [1, 5, 16])
    h = g.node("MatMul", [x, g.parameter("w1", (16, 24), 0.3)], "fc1")
    h = g.node("Add", [h, g.parameter("b1", (24,), 0.1)], "fc1.bias")
    erf = g.node("Erf", [g.node("Div", [h, _scalar(g, "root2", 2**0.5)], "scaled")], "erf")
    plus = g.node("Add", [erf, _scalar(g, "one", 1.0)], "plus")
    y = g.node("Mul", [g.node("Mul", [h, plus], "times"), _scalar(g, "half", 0.5)], "gelu")
    h = g.node("MatMul", [y, g.parameter("w2", (24, 8), 0.3)], "fc2")
    h = g.node("Add", [h, g.parameter("b2", (8,), 0.1)], "fc2.bias")
    erf = g.node("Erf", [g.node("Mul", [h, _scalar(g, "inverse_root2", 2**-0.5)], "s2")], "erf2")
    plus = g.node("Add", [_scalar(g, "one'", 1.0), erf], "plus2")
    return g.node("Mul", [g.node("Mul", [h, _scalar(g, "half'", 0.5)], "halved"), plus], "gelu2"), [
        1,
        5,
        8,
    ]


def scaled_heads(g: GraphBuilder) -> tuple[str, list[int | str]]:
    """Attention heads transposed, then scaled and shifted: the arithmetic in the transpose's
    stores, a residual read at the transposed position.
    """
    x, other = g.input("input", [1, 4, 6, 8]), g.input("other", [1, 6, 4, 8])
    heads = g.node("Transpose", [x], "heads", perm=[0, 2, 1, 3])
    scaled = g.node("Mul", [heads, _scalar(g, "scale", 0.125)], "scaled")
    return g.relu(g.node("Add", [scaled, other], "shifted"), "relu"), [1, 6, 4, 8]


@pytest.mark.parametrize(
    ("build", "fused"),
    [
        (identity_weights, None),
        (constant_clip, "Conv+Clip"),
        (dynamic_flatten, None),
        (squeeze_excite_silu, "Conv+Sigmoid+Mul"),
        (hardswish_se, "Conv+HardSigmoid"),
        (hardswish_written_out, "Conv+HardSigmoid+Mul"),
        (channel_shuffle, None),
        (reductions, None),
        (row_kernels, None),
        (decoder, None),
        (functions, None),
        (tf_moments, None),
        (einsum_attention, "MatMul+Softmax+MatMul"),  # one step: runtime/attention.py
        (gelu_written_out, "Gemm+Reshape+Mul+Erf+Add+Mul+Mul"),
        (scaled_heads, "Transpose+Mul+Add+Relu"),
    ],
    ids=lambda value: getattr(value, "__name__", str(value)),
)
def test_exporter_patterns_agree_layer_by_layer(
    build: Build, fused: str | None, cl_device, tmp_path: Path
) -> None:
    g = GraphBuilder(build.__name__, seed=11)
    output, shape = build(g)
    path = tmp_path / "model.onnx"
    model = g.model(output, shape)
    model.opset_import[0].version = 17
    onnx.save(model, path)
    network = load_model(path, batch=2 if "batch" in shape else None)
    runtime = Runtime(network, cl_device)
    inputs = random_inputs(runtime)
    (found,) = check(runtime, inputs)
    assert found.ratio < 1 and found.magnitude > 0
    if fused is not None:
        assert fused in {planned.step.op for planned in runtime.plan}
    if build is scaled_heads:  # the transpose runs the arithmetic in its stores: one launch
        assert runtime.launches == 1


def test_an_output_that_does_not_depend_on_the_input_is_told(cl_device, tmp_path: Path) -> None:
    """Its agreement with onnxruntime proves nothing: the comparison says so."""
    g = GraphBuilder("constant", seed=3)
    y = g.conv(g.input("input", [1, 3, 6, 6]), "conv", 3, 4, 3)
    y = g.node("Mul", [y, g.constant("zero", np.zeros((1, 4, 1, 1), np.float32))], "erase")
    y = g.node("Add", [y, g.parameter("offset", (1, 4, 1, 1), 1.0)], "offset.add")
    onnx.save(g.model(y, [1, 4, 6, 6]), tmp_path / "constant.onnx")
    runtime = Runtime(load_model(tmp_path / "constant.onnx"), cl_device)
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1 and not found.depends_on_input


def _agreeing_runtime(
    g: GraphBuilder, output: str, shape: list[int], cl_device, tmp_path: Path
) -> Runtime:
    """The graph's runtime on the device, once its output agrees with onnxruntime's."""
    onnx.save(g.model(output, shape), tmp_path / f"{g.name}.onnx")
    runtime = Runtime(load_model(tmp_path / f"{g.name}.onnx"), cl_device)
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1
    return runtime


def test_branches_write_into_their_concat(cl_device, tmp_path: Path) -> None:
    """An Inception block: each branch is read by the Concat alone, at offsets the device can
    start a sub-buffer at, so the branches write in place and the Concat costs no launch.
    """
    g = GraphBuilder("inception", seed=5)
    x = g.input("input", [1, 8, 8, 8])
    a = g.relu(g.conv(x, "branch1x1", 8, 16, 1, bias=True), "branch1x1.relu")
    b = g.relu(g.conv(x, "branch3x3", 8, 16, 3, bias=True), "branch3x3.relu")
    y = g.node("Concat", [a, b], "mixed", axis=1)
    y = g.relu(g.conv(y, "after", 32, 8, 1, bias=True), "after.relu")
    runtime = _agreeing_runtime(g, y, [1, 8, 8, 8], cl_device, tmp_path)
    mixed = next(planned for planned in runtime.plan if planned.step.name == "mixed")
    assert (mixed.kernel, mixed.launches) == ("concat (in place)", ())


def test_a_channel_shuffle_moves_each_value_once(cl_device, tmp_path: Path) -> None:
    """ShuffleNet v2's unit: a Concat, Reshape, Transpose, Reshape, then a Split into halves.
    Each half reads the Concat's inputs where their producers wrote them (at offsets the device
    can start a sub-buffer at, gaps between): the Concat and the Transpose cost no launch, and
    both halves of a Split are one launch.
    """
    g = GraphBuilder("shuffle", seed=7)
    x = g.input("input", [1, 6, 5, 5])
    halves = [helper.make_node("Split", [x, _ints(g, "in.halves", [3, 3])], ["a", "b"],
                               name="in.split", axis=1)]  # fmt: skip
    g.nodes += halves
    b = g.relu(g.conv("b", "branch", 3, 3, 1, bias=True), "branch.relu")
    y = g.node("Concat", ["a", b], "cat", axis=1)
    y = g.node("Reshape", [y, _ints(g, "grouped", [1, 2, 3, 5, 5])], "group")
    y = g.node("Transpose", [y], "shuffle", perm=[0, 2, 1, 3, 4])
    y = g.node("Reshape", [y, _ints(g, "merged", [1, 6, 5, 5])], "ungroup")
    g.nodes.append(helper.make_node("Split", [y, _ints(g, "out.halves", [3, 3])], ["c", "d"],
                                    name="out.split", axis=1))  # fmt: skip
    d = g.relu(g.conv("d", "next", 3, 3, 1, bias=True), "next.relu")
    y = g.node("Add", ["c", d], "join")
    runtime = _agreeing_runtime(g, y, [1, 3, 5, 5], cl_device, tmp_path)
    launches = {planned.step.output: len(planned.launches) for planned in runtime.plan}
    assert "shuffle" not in launches and launches["cat"] == 0
    planned = {p.step.output: p for p in runtime.plan}
    for first, second in (("a", "b"), ("c", "d")):
        assert (launches[first], launches[second]) == (1, 0)
        assert planned[first].kernel == "index_map_pair"
        assert planned[first].step.name in planned[second].kernel


def test_dense_block_concats_share_one_buffer(cl_device, tmp_path: Path) -> None:
    """A DenseNet block: each layer concatenates every earlier output again, so each Concat is
    a prefix of the block's last; all of them and every layer's output live in one buffer, and
    no Concat costs a launch, although each output is read by several steps.
    """
    g = GraphBuilder("dense", seed=6)
    x = g.input("input", [1, 8, 8, 8])
    stem = g.relu(g.conv(x, "stem", 8, 8, 3, bias=True), "stem.relu")
    first = g.relu(g.conv(stem, "layer1", 8, 8, 3, bias=True), "layer1.relu")
    joined = g.node("Concat", [stem, first], "layer2.cat", axis=1)
    second = g.relu(g.conv(joined, "layer2", 16, 8, 3, bias=True), "layer2.relu")
    block = g.node("Concat", [stem, first, second], "block.cat", axis=1)
    y = g.relu(g.conv(block, "transition", 24, 8, 1, bias=True), "transition.relu")
    runtime = _agreeing_runtime(g, y, [1, 8, 8, 8], cl_device, tmp_path)
    concats = [planned for planned in runtime.plan if planned.step.name.endswith(".cat")]
    assert [(p.kernel, p.launches) for p in concats] == [("concat (in place)", ())] * 2
