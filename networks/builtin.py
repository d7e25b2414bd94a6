"""Built-in networks as ONNX graphs octune builds itself: nothing to download.

Each follows its published architecture (torchvision's layout and node names where it has one)
at 224x224 (BERT: sequence 128), with a symbolic ``batch`` dimension that ``load_model`` fixes,
and deterministic random weights (``graph.GraphBuilder``), so onnxruntime or octune's runtime
can run it.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable

import numpy as np
import onnx

from octune.networks.graph import GraphBuilder

SEED = 20240518  # one seed for every built-in network's weights


def squeezenet1_1(weights: bool = True) -> onnx.ModelProto:
    """SqueezeNet 1.1 (torchvision): 26 convs with biases, no BatchNorm."""
    g = GraphBuilder("squeezenet1.1", SEED, weights)
    x = g.input("input", ["batch", 3, 224, 224])
    x = g.relu(g.conv(x, "features.0", 3, 64, 3, stride=2, pad=0, bias=True), "features.1")
    fires = {
        3: (64, 16, 64), 4: (128, 16, 64), 6: (128, 32, 128), 7: (256, 32, 128),
        9: (256, 48, 192), 10: (384, 48, 192), 11: (384, 64, 256), 12: (512, 64, 256),
    }  # fmt: skip
    for index in range(2, 13):
        name = f"features.{index}"
        if index not in fires:
            x = g.node("MaxPool", [x], name, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
            continue
        c_in, squeeze, expand = fires[index]
        s = g.relu(g.conv(x, f"{name}.squeeze", c_in, squeeze, 1, bias=True),
                   f"{name}.squeeze_activation")  # fmt: skip
        e1 = g.relu(g.conv(s, f"{name}.expand1x1", squeeze, expand, 1, bias=True),
                    f"{name}.expand1x1_activation")  # fmt: skip
        e3 = g.relu(g.conv(s, f"{name}.expand3x3", squeeze, expand, 3, bias=True),
                    f"{name}.expand3x3_activation")  # fmt: skip
        x = g.node("Concat", [e1, e3], name, axis=1)
    x = g.relu(g.conv(x, "classifier.1", 512, 1000, 1, bias=True), "classifier.2")
    x = g.node("GlobalAveragePool", [x], "classifier.3")
    return g.model(g.node("Flatten", [x], "output"), ["batch", 1000])


def _conv_bn(
    g: GraphBuilder,
    x: str,
    name: str,
    bn: str,
    c_in: int,
    c_out: int,
    kernel: int,
    stride: int = 1,
    groups: int = 1,
    gain: float = 1.0,
) -> str:
    conv = g.conv(x, name, c_in, c_out, kernel, stride=stride, groups=groups)
    return g.batch_norm(conv, bn, c_out, gain)


def mobilenet_v1(weights: bool = True) -> onnx.ModelProto:
    """MobileNet v1 (width 1.0, 224): a 3x3 stride-2 conv, 13 depthwise + pointwise pairs,
    a 7x7 average pool and a 1024 -> 1000 classifier: 27 convs, 19 distinct.
    """
    g = GraphBuilder("mobilenet_v1", SEED, weights)
    x = g.input("input", ["batch", 3, 224, 224])
    x = g.relu(_conv_bn(g, x, "conv1", "conv1.bn", 3, 32, 3, stride=2), "conv1.relu")
    plan = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *[(512, 1)] * 5,
            (1024, 2), (1024, 1)]  # fmt: skip
    c = 32
    for index, (c_out, stride) in enumerate(plan, start=1):
        dw, pw = f"layers.{index}.dw", f"layers.{index}.pw"
        x = g.relu(_conv_bn(g, x, dw, f"{dw}.bn", c, c, 3, stride=stride, groups=c),
                   f"{dw}.relu")  # fmt: skip
        x = g.relu(_conv_bn(g, x, pw, f"{pw}.bn", c, c_out, 1), f"{pw}.relu")
        c = c_out
    x = g.node("AveragePool", [x], "avgpool", kernel_shape=[7, 7])
    x = g.node("Reshape", [x, g.constant("flat", np.array([0, -1]))], "flatten")
    return g.model(g.linear(x, "fc", 1024, 1000), ["batch", 1000])


def mobilenet_v2(weights: bool = True) -> onnx.ModelProto:
    """MobileNet v2 (torchvision): 17 inverted residual blocks with ReLU6, 52 convs + fc."""
    g = GraphBuilder("mobilenet_v2", SEED, weights)
    x = g.input("input", ["batch", 3, 224, 224])
    x = g.relu6(_conv_bn(g, x, "features.0.0", "features.0.1", 3, 32, 3, stride=2),
                "features.0.2")  # fmt: skip
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1)]  # fmt: skip
    c, index = 32, 1
    for expansion, c_out, repeats, first_stride in settings:
        for repeat in range(repeats):
            stride = first_stride if repeat == 0 else 1
            block, hidden, part = f"features.{index}.conv", c * expansion, 0
            y = x
            if expansion != 1:
                y = g.relu6(_conv_bn(g, y, f"{block}.0.0", f"{block}.0.1", c, hidden, 1),
                            f"{block}.0.2")  # fmt: skip
                part = 1
            y = g.relu6(_conv_bn(g, y, f"{block}.{part}.0", f"{block}.{part}.1", hidden, hidden,
                                 3, stride=stride, groups=hidden), f"{block}.{part}.2")  # fmt: skip
            residual = stride == 1 and c == c_out
            y = _conv_bn(g, y, f"{block}.{part + 1}", f"{block}.{part + 2}", hidden, c_out, 1,
                         gain=0.5 if residual else 1.0)  # fmt: skip
            x = g.node("Add", [x, y], f"features.{index}.add") if residual else y
            c, index = c_out, index + 1
    x = g.relu6(_conv_bn(g, x, f"features.{index}.0", f"features.{index}.1", c, 1280, 1),
                f"features.{index}.2")  # fmt: skip
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x], "avgpool")], "flatten")
    return g.model(g.linear(x, "classifier.1", 1280, 1000), ["batch", 1000])


def _resnet(name: str, blocks: tuple[int, ...], bottleneck: bool, weights: bool) -> onnx.ModelProto:
    """torchvision's ResNet (v1.5: a bottleneck's stride is on its 3x3 conv)."""
    g = GraphBuilder(name, SEED, weights)
    x = g.input("input", ["batch", 3, 224, 224])
    x = g.relu(_conv_bn(g, x, "conv1", "bn1", 3, 64, 7, stride=2), "relu")
    x = g.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    expansion = 4 if bottleneck else 1
    c = 64
    for stage, repeats in enumerate(blocks, start=1):
        width = 64 * 2 ** (stage - 1)
        for index in range(repeats):
            stride = 2 if stage > 1 and index == 0 else 1
            tag = f"layer{stage}.{index}"
            if bottleneck:
                plan = [(c, width, 1, 1), (width, width, 3, stride), (width, 4 * width, 1, 1)]
            else:
                plan = [(c, width, 3, stride), (width, width, 3, 1)]
            y = x
            for conv, (c_in, c_out, kernel, conv_stride) in enumerate(plan, start=1):
                last = conv == len(plan)
                y = _conv_bn(g, y, f"{tag}.conv{conv}", f"{tag}.bn{conv}", c_in, c_out, kernel,
                             stride=conv_stride, gain=0.5 if last else 1.0)  # fmt: skip
                if not last:
                    y = g.relu(y, f"{tag}.relu{conv}")
            shortcut = x
            if stride != 1 or c != width * expansion:
                shortcut = _conv_bn(g, x, f"{tag}.downsample.0", f"{tag}.downsample.1", c,
                                    width * expansion, 1, stride=stride, gain=0.5)  # fmt: skip
            x = g.relu(g.node("Add", [y, shortcut], f"{tag}.add"), f"{tag}.relu")
            c = width * expansion
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x], "avgpool")], "flatten")
    return g.model(g.linear(x, "fc", c, 1000), ["batch", 1000])


def resnet18(weights: bool = True) -> onnx.ModelProto:
    """ResNet-18: 20 convs (3 of them 1x1 downsamples) + fc 512 -> 1000."""
    return _resnet("resnet18", (2, 2, 2, 2), bottleneck=False, weights=weights)


def resnet50(weights: bool = True) -> onnx.ModelProto:
    """ResNet-50: 53 convs, 23 distinct at batch 1, + fc 2048 -> 1000."""
    return _resnet("resnet50", (3, 4, 6, 3), bottleneck=True, weights=weights)


def bert_base_layer(weights: bool = True) -> onnx.ModelProto:
    """One BERT-base encoder layer (hidden 768, 12 heads, FFN 3072, GELU by Erf), on
    ``[batch, sequence, 768]`` hidden states, sequence 128 unless ``--dim sequence=N``.
    """
    hidden, heads, ffn = 768, 12, 3072
    head = hidden // heads
    g = GraphBuilder("bert_base_layer", SEED, weights)
    x = g.input("hidden_states", ["batch", "sequence", hidden])

    def dense(y: str, name: str, c_in: int, c_out: int) -> str:
        weight = g.parameter(f"{name}.weight", (c_in, c_out), math.sqrt(1 / c_in))
        product = g.node("MatMul", [y, weight], f"{name}.matmul")
        return g.node("Add", [product, g.parameter(f"{name}.bias", (c_out,), 0.02)], name)

    def layer_norm(y: str, name: str) -> str:
        scale = g.parameter(f"{name}.weight", (hidden,), 0.1, mean=1.0)
        shift = g.parameter(f"{name}.bias", (hidden,), 0.1)
        return g.node("LayerNormalization", [y, scale, shift], name, axis=-1, epsilon=1e-12)

    split = g.constant("heads_shape", np.array([0, 0, heads, head]))
    projected = {}
    for part, perm in (("query", [0, 2, 1, 3]), ("key", [0, 2, 3, 1]), ("value", [0, 2, 1, 3])):
        y = g.node("Reshape", [dense(x, f"attention.self.{part}", hidden, hidden), split],
                   f"attention.self.{part}.split")  # fmt: skip
        projected[part] = g.node("Transpose", [y], f"attention.self.{part}.heads", perm=perm)
    scores = g.node("MatMul", [projected["query"], projected["key"]], "attention.self.scores")
    root = g.constant("attention.self.root", np.array(math.sqrt(head), dtype=np.float32))
    scaled = g.node("Div", [scores, root], "attention.self.scaled")
    probs = g.node("Softmax", [scaled], "attention.self.probs", axis=-1)
    context = g.node("MatMul", [probs, projected["value"]], "attention.self.context")
    context = g.node("Transpose", [context], "attention.self.merge", perm=[0, 2, 1, 3])
    merged = g.constant("merged_shape", np.array([0, 0, hidden]))
    context = g.node("Reshape", [context, merged], "attention.self.merged")
    attended = dense(context, "attention.output.dense", hidden, hidden)
    x = layer_norm(g.node("Add", [attended, x], "attention.output.add"),
                   "attention.output.LayerNorm")  # fmt: skip
    inner = dense(x, "intermediate.dense", hidden, ffn)
    root2 = g.constant("intermediate.root2", np.array(math.sqrt(2), dtype=np.float32))
    one = g.constant("intermediate.one", np.array(1.0, dtype=np.float32))
    half = g.constant("intermediate.half", np.array(0.5, dtype=np.float32))
    erf = g.node("Erf", [g.node("Div", [inner, root2], "intermediate.gelu.div")],
                 "intermediate.gelu.erf")  # fmt: skip
    gate = g.node("Mul", [inner, g.node("Add", [erf, one], "intermediate.gelu.add")],
                  "intermediate.gelu.mul")  # fmt: skip
    gelu = g.node("Mul", [gate, half], "intermediate.gelu")
    out = dense(gelu, "output.dense", ffn, hidden)
    x = layer_norm(g.node("Add", [out, x], "output.add"), "output.LayerNorm")
    return g.model(x, ["batch", "sequence", hidden])


# name -> (builder, the sizes of its symbolic dimensions unless the user gives others)
BUILTIN: dict[str, tuple[Callable[[bool], onnx.ModelProto], dict[str, int]]] = {
    "squeezenet1.1": (squeezenet1_1, {"batch": 1}),
    "mobilenet_v1": (mobilenet_v1, {"batch": 1}),
    "mobilenet_v2": (mobilenet_v2, {"batch": 1}),
    "resnet18": (resnet18, {"batch": 1}),
    "resnet50": (resnet50, {"batch": 1}),
    "bert_base_layer": (bert_base_layer, {"batch": 1, "sequence": 128}),
}


def did_you_mean(name: str) -> str:
    """ "did you mean 'NAME'? " for the built-in network closest to a mistyped name, else ""."""
    close = difflib.get_close_matches(name, list(BUILTIN), n=1)
    return f"did you mean {close[0]!r}? " if close else ""
