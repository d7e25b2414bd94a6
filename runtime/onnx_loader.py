"""An ONNX model as the runtime's steps (``steps``): one per launch group, in an order that runs.

Loading folds what an inference runtime folds, so a forward pass makes few launches:

* BatchNormalization after a Conv goes into the Conv's weights and a bias;
* the bias, batch-norm, constant scale, residual Add (or product), squeeze-and-excitation gate
  and activation (SiLU and HardSwish written as ``x * sigmoid(x)`` too) that follow a Conv, Gemm
  or MatMul, or that follow each other, become one element-wise epilogue (``Epilogue``, kernel
  ``epilogue`` of ``ops.cl``), applied in place after a conv or GEMM;
* Reshape, Flatten, Squeeze, Unsqueeze, Dropout, Identity and Cast to float alias their input:
  no launch.

What does not fuse runs through shape-generic kernels: broadcasting element-wise functions,
index maps (transpose, slice, split, gather, expand, tile, pad), reductions, resize and
transposed convolution. Models reach this module normalised (``octune.networks.normalize``):
constants folded, so shape arithmetic is gone and every operand this module needs constant is.

A fused step runs where its last node stands in the graph, so every input of every node it
holds (a residual computed on another branch) is ready by then. Conv, Gemm and MatMul nodes get
their family and shape from ``octune.networks.layers``, the same the tuner tunes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from octune.core.errors import OctuneError
from octune.kernels.conv2d import conv_pads
from octune.networks.layers import model_dtype, node_layers, onnx_node
from octune.networks.quantized import int8_layers
from octune.runtime import layout
from octune.runtime.epilogues import EpilogueChain
from octune.runtime.onnx_patterns import ActivationPatterns
from octune.runtime.operators import (
    ALIASES,
    ARITHMETIC,
    FLOAT_INPUTS,
    FUNCTIONS,
    INDEXING,
    POOLS,
    QDQ,
    QUANTIZED_RANGES,
    REDUCTIONS,
    RESIZE_COORDINATES,
    RESIZE_NEAREST,
    SUPPORTED,
    node_attribute,
    node_float,
    node_int,
    node_ints,
)
from octune.runtime.steps import (
    Alias,
    Broadcast,
    Concat,
    ConvTranspose,
    Elementwise,
    Graph,
    IndexMap,
    LayerNorm,
    Pool,
    Reduce,
    Resize,
    Softmax,
    Step,
    Tuned,
    widened,
)


class OnnxLoader(ActivationPatterns):
    """One model read into steps (``load``): its tensors' shapes and constants, who reads
    each tensor, and one method per kind of operator.
    """

    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        self.label = graph.name or "the model"
        self.dtype = model_dtype(model)
        # Folding (batch-norm into weights, epilogue vectors) computes in float32 whatever the
        # file stores; the runtime rounds to its storage type when it uploads.
        self.constants = {t.name: widened(numpy_helper.to_array(t)) for t in graph.initializer}
        self.shapes = {name: tuple(v.shape) for name, v in self.constants.items()}
        for value in (*graph.input, *graph.value_info, *graph.output):
            tensor = value.type.tensor_type
            dims = tensor.shape.dim
            if all(d.HasField("dim_value") for d in dims) and tensor.HasField("shape"):
                self.shapes[value.name] = tuple(d.dim_value for d in dims)
        self.nodes = list(graph.node)
        self.position = {node.name: i for i, node in enumerate(self.nodes)}
        self.users: dict[str, list[onnx.NodeProto]] = {}
        for node in self.nodes:
            for tensor in node.input:
                self.users.setdefault(tensor, []).append(node)
        self.outputs = [value.name for value in graph.output]
        self.inputs = [v.name for v in graph.input if v.name not in self.constants]
        for value in graph.input:
            kind = value.type.tensor_type.elem_type
            if value.name in self.inputs and kind not in FLOAT_INPUTS:
                raise OctuneError(
                    f"{self.label}: input '{value.name}' is {onnx.TensorProto.DataType.Name(kind)}"
                    "; octune run feeds float32 or float16 inputs"
                )
        self.layers, self.untunable = node_layers(model)
        self.int8 = {
            name: found
            for name, found in int8_layers(model).items()
            if name in self.layers and self.layers[name].dtype == "int8"
        }
        self.typed = {tensor: "uint8" for f in self.int8.values() for tensor in f.tensors}
        self.by_name = {node.name: node for node in self.nodes}
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.done: set[str] = set()

    def fail(self, node: onnx.NodeProto, why: str) -> OctuneError:
        return OctuneError(f"{self.label}: {node.op_type} node '{node.name}' {why}")

    def shape(self, node: onnx.NodeProto, tensor: str) -> tuple[int, ...]:
        found = self.shapes.get(tensor)
        if found is None:
            raise self.fail(node, f"has no static shape for '{tensor}' after shape inference")
        return found

    def constant(self, node: onnx.NodeProto, tensor: str) -> np.ndarray:
        found = self.constants.get(tensor)
        if found is None:
            raise self.fail(node, f"needs '{tensor}' to be a constant (an initializer)")
        return found

    def add_constant(self, name: str, value: np.ndarray, typed: bool = False) -> str:
        """A new constant, float32 (the run stores it as its tensors), or ``typed``: in its own
        element type whatever the run stores.
        """
        while name in self.constants or name in self.shapes:
            name += "'"
        self.constants[name] = np.ascontiguousarray(value, None if typed else np.float32)
        self.shapes[name] = self.constants[name].shape
        if typed:
            self.typed[name] = value.dtype.name
        return name

    def load(self) -> list[Step]:
        for node in self.nodes:
            if node.domain not in ("", "ai.onnx") or node.op_type not in SUPPORTED:
                raise self.fail(
                    node, f"is not an operator octune run supports ({', '.join(SUPPORTED)})"
                )
            value = self.folded(node)
            if value is not None:
                self.constants[node.output[0]] = value
                self.shapes[node.output[0]] = value.shape
                self.done.add(node.name)
        for tensor in list(self.typed):  # a DequantizeLinear only int8 layers read: in them
            for dq in self.users.get(tensor, []):
                readers = self.users.get(dq.output[0], [])
                if dq.op_type in QDQ and readers and all(u.name in self.int8 for u in readers):
                    self.done.add(dq.name)
        # Constants first: a chain looks ahead at the nodes after a conv (a batch-norm whose
        # quantized weights are dequantized further down the file).
        steps: list[tuple[int, Step]] = []
        for node in self.nodes:
            if node.name not in self.done:
                for step in self.steps(node):
                    steps.append((max(self.position[name] for name in step.nodes), step))
        return [step for _, step in sorted(steps, key=lambda pair: pair[0])]

    def folded(self, node: onnx.NodeProto) -> np.ndarray | None:
        """The value of a node computed from constants alone, which becomes a constant: a
        Constant, a DequantizeLinear of weights, a Cast of weights (what onnxruntime's CPU
        provider leaves in a float16 model: its InsertedPrecisionFreeCast nodes); else None.
        """
        op = node.op_type
        if op == "Constant":
            tensor = node_attribute(node, "value", None)
            if not isinstance(tensor, onnx.TensorProto):
                raise self.fail(node, "is not a tensor constant: use value=")
            return widened(numpy_helper.to_array(tensor))
        if op == "DequantizeLinear" and all(name in self.constants for name in node.input if name):
            return self.dequantized(node)
        if op == "Cast" and node.input[0] in self.constants:
            kind = onnx.helper.tensor_dtype_to_np_dtype(
                node_int(node, "to", onnx.TensorProto.FLOAT)
            )
            return widened(self.constants[node.input[0]].astype(kind))
        return None

    def steps(self, node: onnx.NodeProto) -> list[Step]:
        """The node's steps: one, but for a Split (one per output)."""
        self.done.add(node.name)
        op, out = node.op_type, node.output[0]
        common = {"name": node.name, "nodes": (node.name,), "ops": (op,), "output": out}
        if op == "Split":
            return self.split(node, common)
        if node.name in self.int8:
            return [self.quantized(node, common)]
        if op == "Conv":
            return self.conv(node, common)
        if op in ("Gemm", "MatMul"):
            return [self.tuned(node, common)]
        if op in ALIASES or (op == "Cast" and self.cast(node) == "none"):
            return [Alias(inputs=(node.input[0],), **common)]
        if op in POOLS:
            return [self.pool(node, common)]
        if op == "Concat":
            axis = node_int(node, "axis", 0) % len(self.shape(node, out))
            return [Concat(inputs=tuple(node.input), axis=axis, **common)]
        if op == "Softmax":
            return [self.softmax(node, common)]
        if op == "LayerNormalization":
            return [self.layer_norm(node, common)]
        if op in INDEXING:
            return [self.index_map(node, common)]
        if op in REDUCTIONS:
            return [self.reduce(node, common)]
        if op in ("Resize", "Upsample"):
            return [self.resize(node, common)]
        if op == "ConvTranspose":
            return [self.conv_transpose(node, common)]
        return [self.elementwise(node, common)]

    def quantization(self, node: onnx.NodeProto) -> tuple[np.ndarray, np.ndarray, int]:
        """A QDQ node's scale, zero point (0 where absent) and axis: per tensor, or per slice
        along the axis (weights quantized per output channel).
        """
        if node_int(node, "block_size", 0):
            raise self.fail(node, "quantizes by blocks; octune run takes per tensor or per axis")
        scale = self.constant(node, node.input[1]).astype(np.float64)
        zero = node.input[2] if len(node.input) > 2 and node.input[2] else None
        point = self.constant(node, zero).astype(np.float64) if zero else np.zeros(scale.shape)
        return scale, point, node_int(node, "axis", 1)

    def dequantized(self, node: onnx.NodeProto) -> np.ndarray:
        """A DequantizeLinear of a constant (weights, bias) as float32: (q - zero) * scale."""
        scale, point, axis = self.quantization(node)
        q = self.constants[node.input[0]].astype(np.float64)
        if scale.size > 1:
            axis %= q.ndim
            shape = [1] * q.ndim
            shape[axis] = scale.size
            scale, point = scale.reshape(shape), point.reshape(shape)
        return ((q - point) * scale).astype(np.float32)

    def quantized_range(self, node: onnx.NodeProto) -> tuple[float, float]:
        """What a QuantizeLinear saturates to: its zero point's type (uint8 when absent)."""
        zero = node.input[2] if len(node.input) > 2 and node.input[2] else None
        kind = onnx.TensorProto.UINT8
        if zero is not None:
            kind = onnx.helper.np_dtype_to_tensor_dtype(self.constant(node, zero).dtype)
        found = QUANTIZED_RANGES.get(kind)
        if found is None:
            raise self.fail(node, "quantizes to a type other than uint8 and int8")
        return found

    def conv(self, node: onnx.NodeProto, common: dict[str, Any]) -> list[Step]:
        """A Conv, after a pad step of its own where it pads unevenly (its layer's shape is
        the conv of the padded input: ``octune.networks.layers``).
        """
        x, w = node.input[0], node.input[1]
        shape = self.shape(node, x)
        pads = conv_pads(onnx_node(node, [shape, self.shape(node, w)]))
        if len(shape) != 4 or len(set(pads)) == 1:
            return [self.tuned(node, common)]
        padded = f"{x}:padded:{node.name}"
        self.shapes[padded] = (*shape[:2], shape[2] + pads[0] + pads[2],
                               shape[3] + pads[1] + pads[3])  # fmt: skip
        axes = layout.identity_axes(shape)
        for axis, (begin, end) in ((2, (pads[0], pads[2])), (3, (pads[1], pads[3]))):
            *_, dim, stride = axes[axis]
            axes[axis] = (dim + begin + end, -begin, 1, dim, stride)
        pad = IndexMap(inputs=(x,), axes=layout.index_axes(axes), mode="constant",
                       **{**common, "ops": ("Pad",), "output": padded})  # fmt: skip
        return [pad, self.tuned(node, common, x=padded)]

    def tuned(self, node: onnx.NodeProto, common: dict[str, Any], x: str = "") -> Step:
        layer = self.layers.get(node.name)
        if layer is None:
            why = self.untunable.get(node.name, "no static shape")
            raise self.fail(node, f"has no shape octune's kernels take: {why}")
        x, w = x or node.input[0], node.input[1]
        if node.op_type == "Conv":
            self.constant(node, w)
        chain = EpilogueChain(self, node, self.shape(node, node.output[0]))
        if len(node.input) > 2 and node.input[2]:  # Conv's bias, Gemm's C
            bias = self.constant(node, node.input[2]) * node_float(node, "beta", 1.0)
            if not chain.add_vector(node, bias, axis_end=1 if node.op_type == "Conv" else -1):
                raise self.fail(node, f"broadcasts its bias {bias.shape} along several axes")
        chain.extend(node.output[0])
        if node.op_type == "Conv" and chain.scale is not None and chain.channel_axis() == 1:
            folded = self.constant(node, w) * chain.scale.reshape(-1, 1, 1, 1)
            w, chain.scale = self.add_constant(f"{w}:folded", folded), None
        alpha = node_float(node, "alpha", 1.0)
        return Tuned(layer=layer, alpha=alpha, inputs=(x, w), **chain.finish(common))

    def quantized(self, node: onnx.NodeProto, common: dict[str, Any]) -> Step:
        """A layer an int8 kernel computes whole, from its uint8 input to its uint8 output."""
        found = self.int8[node.name]
        self.done.update(found.nodes)
        operands = (("int8", found.weight), ("scale", found.scale), ("bias", found.bias))
        names = [self.add_constant(f"{node.name}:{part}", v, typed=True) for part, v in operands]
        return Tuned(
            layer=self.layers[node.name],
            zeros=(found.x_zero, found.y_zero),
            inputs=(found.x, *names),
            **{**common, "nodes": found.nodes, "output": found.y,
               "ops": tuple(self.by_name[name].op_type for name in found.nodes)},
        )  # fmt: skip

    def pool(self, node: onnx.NodeProto, common: dict[str, Any]) -> Step:
        x = node.input[0]
        shape = self.shape(node, x)
        if node.op_type.startswith("Global") and len(shape) != 4:  # tf2onnx's 1-D means
            if len(shape) > layout.RANK:
                raise self.fail(node, f"has more than {layout.RANK} axes: not supported")
            reduced = [size if axis >= 2 else 1 for axis, size in enumerate(shape)]
            return Reduce(
                inputs=(x,),
                function="max" if "Max" in node.op_type else "mean",
                dims=layout.padded([*shape[:2], *[1] * (len(shape) - 2)], 1),
                strides=layout.padded(layout.strides(shape), 0),
                reduced=layout.padded(reduced, 1),
                **common,
            )
        if len(shape) != 4:
            raise self.fail(node, f"pools a {len(shape) - 2}-D input; octune run pools 2-D")
        if node.op_type.startswith("Global"):
            kernel, strides, pads = list(shape[2:]), [1, 1], [0, 0, 0, 0]
        else:
            kernel = node_ints(node, "kernel_shape", ())
            strides = node_ints(node, "strides", [1, 1])
            pads = node_ints(node, "pads", [0, 0, 0, 0])
            if node_attribute(node, "auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID"):
                raise self.fail(node, "pads with auto_pad SAME: give explicit pads")
            if node_ints(node, "dilations", [1, 1]) != [1, 1]:
                raise self.fail(node, "has dilations: octune run pools dense windows")
        return Pool(
            inputs=(x,),
            max="Max" in node.op_type,
            kernel=(kernel[0], kernel[1]),
            strides=(strides[0], strides[1]),
            pads=(pads[0], pads[1], pads[2], pads[3]),
            include_pad=bool(node_int(node, "count_include_pad", 0)),
            **common,
        )

    def softmax(self, node: onnx.NodeProto, common: dict[str, Any]) -> Step:
        shape = self.shape(node, node.output[0])
        axis = node_int(node, "axis", -1 if self.opset >= 13 else 1) % len(shape)
        if self.opset < 13:
            length, inner = math.prod(shape[axis:]), 1
        else:
            length, inner = shape[axis], math.prod(shape[axis + 1 :])
        return Softmax(inputs=(node.input[0],), length=length, inner=inner, **common)

    def layer_norm(self, node: onnx.NodeProto, common: dict[str, Any]) -> Step:
        rank = len(self.shape(node, node.input[0]))
        if node_int(node, "axis", -1) % rank != rank - 1:
            raise self.fail(node, "normalises more than the last axis; octune run takes axis -1")
        if len(node.input) < 3 or len(node.output) > 1:
            raise self.fail(node, "needs a bias and gives mean and variance: not supported")
        for weight in node.input[1:3]:
            self.constant(node, weight)
        epsilon = node_float(node, "epsilon", 1e-5)
        return LayerNorm(inputs=tuple(node.input[:3]), epsilon=epsilon, **common)

    def elementwise(self, node: onnx.NodeProto, common: dict[str, Any]) -> Step:
        """An epilogue of its own where one tensor input has the output's shape and the node
        fits an epilogue, else a broadcasting function.
        """
        out = self.shape(node, node.output[0])
        tensors = [name for name in node.input if name and name not in self.constants]
        if not tensors:
            raise self.fail(node, "computes on constants only, which normalising should fold")
        fits = [name for name in tensors if self.shapes.get(name) == out]
        x = fits[0] if fits else None
        if node.op_type in ("Sub", "Div") and x != node.input[0]:
            x = None
        if node.op_type not in ARITHMETIC | QDQ and self.activation(node) is None:
            x = None
        chain = EpilogueChain(self, node, out)
        chain.writes_bytes = True  # the epilogue kernel stores a QuantizeLinear's uint8
        written = [(t, self.gate(t)) for t in tensors]  # an activation written out, from node
        gated = [(t, g) for t, g in written if g and node.name in {n.name for n in g[0]}]
        if gated:
            x, (chain.nodes, chain.activation) = gated[0]
            self.done.update(n.name for n in chain.nodes)
        elif x is None or not chain.absorb(node, x):
            return self.broadcast(node, common)
        chain.extend(chain.nodes[-1].output[0])
        return Elementwise(inputs=(x,), **chain.finish(common))

    def broadcast(self, node: onnx.NodeProto, common: dict[str, Any]) -> Step:
        op, out = node.op_type, self.shape(node, node.output[0])
        if op not in FUNCTIONS:
            raise self.fail(node, "has parameters octune run does not take")
        inputs = [name for name in node.input if name]
        if op == "Expand":
            inputs = inputs[:1]
        if op in ("Min", "Max") and len(inputs) != 2:
            raise self.fail(node, f"takes {len(inputs)} inputs; octune run takes two")
        function = FUNCTIONS[op]
        if op == "Mod" and node_int(node, "fmod", 0):
            function = "fmod"
        if len(out) > layout.RANK:
            raise self.fail(node, f"has {len(out)} axes; octune run takes up to {layout.RANK}")
        for name in inputs:
            self.shape(node, name)
        chain = EpilogueChain(self, node, out)
        chain.extend(node.output[0])
        return Broadcast(
            inputs=tuple(inputs),
            function=function,
            dims=layout.padded(out, 1),
            strides=tuple(layout.broadcast_strides(self.shapes[name], out) for name in inputs),
            **chain.finish(common),
        )

    def constant_ints(self, node: onnx.NodeProto, index: int, attribute: str) -> list[int] | None:
        """An operand given as a constant input (newer opsets) or an attribute (older)."""
        if len(node.input) > index and node.input[index]:
            return [int(v) for v in self.constant(node, node.input[index]).reshape(-1)]
        found = node_attribute(node, attribute, None)
        return None if found is None else [int(v) for v in found]

    def index_map(self, node: onnx.NodeProto, common: dict[str, Any]) -> Step:
        op, x = node.op_type, node.input[0]
        shape, out = self.shape(node, x), self.shape(node, node.output[0])
        if len(shape) > layout.RANK or len(out) > layout.RANK:
            raise self.fail(node, f"has more than {layout.RANK} axes: not supported")
        rank = len(shape)
        axes = layout.identity_axes(shape)
        extra: dict[str, Any] = {}
        if op == "Transpose":
            axes = layout.transpose(shape, node_ints(node, "perm", range(rank - 1, -1, -1)))
        elif op == "Slice":
            starts = self.constant_ints(node, 1, "starts") or []
            ends = self.constant_ints(node, 2, "ends") or []
            which = self.constant_ints(node, 3, "axes") or list(range(len(starts)))
            steps = self.constant_ints(node, 4, "steps") or [1] * len(starts)
            for axis, start, end, step in zip(which, starts, ends, steps, strict=True):
                axis %= rank
                first, length = layout.slice_axis(shape[axis], start, end, step)
                *_, dim, stride = axes[axis]
                axes[axis] = (length, first, step, dim, stride)
        elif op == "Gather":
            axis = node_int(node, "axis", 0) % rank
            indices = self.constant(node, node.input[1]).astype(np.int64).reshape(-1)
            if ((indices < -shape[axis]) | (indices >= shape[axis])).any():
                raise self.fail(node, f"gathers indices outside 0..{shape[axis] - 1}")
            table = tuple(int(i) % shape[axis] for i in indices)
            _, _, _, dim, stride = axes[axis]
            axes[axis] = (len(table), 0, 1, dim, stride)
            extra = {"table": table, "table_axis": layout.RANK - rank + axis}
        elif op == "Tile":
            axes = [(size, 0, 1, dim, stride) for size, (_, _, _, dim, stride)
                    in zip(out, axes, strict=True)]  # fmt: skip
            extra = {"mode": "tile"}
        elif op == "Pad":
            extra = self.pad(node, axes, shape)
        chain = EpilogueChain(self, node, out)  # what follows joins its stores (ViT's scaled heads)
        chain.extend(node.output[0])
        return IndexMap(inputs=(x,), axes=layout.index_axes(axes), **extra, **chain.finish(common))

    def pad(
        self, node: onnx.NodeProto, axes: list[layout.Axis], shape: tuple[int, ...]
    ) -> dict[str, Any]:
        """Pad's parameters, its axes' starts moved back by the padding before them."""
        rank = len(shape)
        pads = self.constant_ints(node, 1, "pads") or [0] * 2 * rank
        which = self.constant_ints(node, 3, "axes") or list(range(rank))
        mode = node_attribute(node, "mode", b"constant").decode()
        if mode not in ("constant", "edge", "reflect"):
            raise self.fail(node, f"pads in mode {mode!r}; octune run pads constant, edge, reflect")
        value = node_float(node, "value", 0.0)
        if len(node.input) > 2 and node.input[2]:
            value = float(self.constant(node, node.input[2]).reshape(()))
        count = len(which)
        for position, axis in enumerate(which):
            axis %= rank
            begin, end = pads[position], pads[position + count]
            _, _, step, dim, stride = axes[axis]
            axes[axis] = (dim + begin + end, -begin, step, dim, stride)
        return {"mode": mode, "value": value}

    def split(self, node: onnx.NodeProto, common: dict[str, Any]) -> list[Step]:
        x = node.input[0]
        shape = self.shape(node, x)
        if len(shape) > layout.RANK:
            raise self.fail(node, f"has more than {layout.RANK} axes: not supported")
        axis = node_int(node, "axis", 0) % len(shape)
        steps: list[Step] = []
        start = 0
        for output in node.output:
            length = self.shape(node, output)[axis]
            axes = layout.identity_axes(shape)
            _, _, step, dim, stride = axes[axis]
            axes[axis] = (length, start, step, dim, stride)
            start += length
            if output:
                steps.append(IndexMap(inputs=(x,), axes=layout.index_axes(axes),
                                      **{**common, "output": output}))  # fmt: skip
        return steps

    def reduce(self, node: onnx.NodeProto, common: dict[str, Any]) -> Step:
        x = node.input[0]
        shape = self.shape(node, x)
        rank = len(shape)
        if rank > layout.RANK:
            raise self.fail(node, f"has more than {layout.RANK} axes: not supported")
        which = self.constant_ints(node, 1, "axes")
        if not which:
            if node_int(node, "noop_with_empty_axes", 0):
                return Alias(inputs=(x,), **common)
            which = list(range(rank))
        over = {axis % rank for axis in which}
        reduced = [size if axis in over else 1 for axis, size in enumerate(shape)]
        dims = [1 if axis in over else size for axis, size in enumerate(shape)]
        return Reduce(
            inputs=(x,),
            function=REDUCTIONS[node.op_type],
            dims=layout.padded(dims, 1),
            strides=layout.padded(layout.strides(shape), 0),
            reduced=layout.padded(reduced, 1),
            **common,
        )

    def resize(self, node: onnx.NodeProto, common: dict[str, Any]) -> Step:
        x = node.input[0]
        shape, out = self.shape(node, x), self.shape(node, node.output[0])
        if len(shape) != 4 or tuple(shape[:2]) != tuple(out[:2]):
            raise self.fail(node, "resizes more than the last two axes of a 4-D tensor")
        mode = node_attribute(node, "mode", b"nearest").decode()
        if mode not in ("nearest", "linear"):
            raise self.fail(node, f"resizes in mode {mode!r}; octune run takes nearest, linear")
        if node_int(node, "antialias", 0):
            raise self.fail(node, "antialiases: not supported")
        if node.op_type == "Upsample":
            coordinates, nearest = "asymmetric", "floor"
            scales = self.constant(node, node.input[1]).reshape(-1).tolist() if len(
                node.input) > 1 else node_attribute(node, "scales", [])  # fmt: skip
        else:
            coordinates = node_attribute(
                node, "coordinate_transformation_mode", b"half_pixel"
            ).decode()
            nearest = node_attribute(node, "nearest_mode", b"round_prefer_floor").decode()
            scales = []
            if len(node.input) > 2 and node.input[2]:
                scales = self.constant(node, node.input[2]).reshape(-1).tolist()
        if coordinates not in RESIZE_COORDINATES or nearest not in RESIZE_NEAREST:
            raise self.fail(node, f"maps coordinates by {coordinates}, {nearest}: not supported")
        if len(scales) != 4:  # sizes given: the scale is the ratio of sizes
            scales = [1.0, 1.0, out[2] / shape[2], out[3] / shape[3]]
        return Resize(inputs=(x,), linear=mode == "linear", coordinates=coordinates,
                      nearest=nearest, scales=(float(scales[2]), float(scales[3])),
                      **common)  # fmt: skip

    def conv_transpose(self, node: onnx.NodeProto, common: dict[str, Any]) -> Step:
        x, w = node.input[0], node.input[1]
        if len(self.shape(node, x)) != 4:
            raise self.fail(node, "is not 2-D; octune run transposes 2-D convolutions")
        weight = self.constant(node, w)
        if node_attribute(node, "auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID"):
            raise self.fail(node, "pads with auto_pad SAME: give explicit pads")
        pads = node_ints(node, "pads", [0, 0, 0, 0])
        strides, dilations = (
            node_ints(node, "strides", [1, 1]),
            node_ints(node, "dilations", [1, 1]),
        )
        inputs = (x, w, node.input[2]) if len(node.input) > 2 and node.input[2] else (x, w)
        chain = EpilogueChain(self, node, self.shape(node, node.output[0]))
        chain.extend(node.output[0])
        return ConvTranspose(
            inputs=inputs,
            kernel=(weight.shape[2], weight.shape[3]),
            strides=(strides[0], strides[1]),
            pads=(pads[0], pads[1]),
            dilations=(dilations[0], dilations[1]),
            groups=node_int(node, "group", 1),
            **chain.finish(common),
        )


def load_graph(model: onnx.ModelProto) -> Graph:
    """The steps of a model as ``octune.networks.layers.load_model`` gives it (shapes
    inferred, nodes named); a one-line OctuneError for what the runtime cannot run.
    """
    loader = OnnxLoader(model)
    steps = loader.load()
    for tensor in (*loader.inputs, *(s.output for s in steps)):
        if tensor not in loader.shapes:
            raise OctuneError(f"{loader.label}: tensor '{tensor}' has no static shape")
    return Graph(
        name=loader.label,
        dtype=loader.dtype,
        steps=steps,
        shapes=loader.shapes,
        constants=loader.constants,
        inputs=loader.inputs,
        outputs=loader.outputs,
        typed=loader.typed,
    )
