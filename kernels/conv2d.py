"""conv2d: float32 2-D convolution (cross-correlation, as PyTorch's conv2d, no bias), in
either layout: the ``nhwc`` key (0 by default) picks it, and each kernel's ``requires:`` says
which it takes.

NCHW (nhwc = 0): x is N x C x H x W, the filter K x C/groups x R x S, y is N x K x OH x OW.
NHWC (nhwc = 1): x is N x H x W x C, the filter K x R x S x C/groups, y is N x OH x OW x K.
The NHWC filter is KRSC, as cuDNN's NHWC filters, PyTorch's channels_last weights and TFLite's
conv filters lie: an NHWC kernel's reduction over (r, s, c) then reads both operands in memory
order, channels contiguous. A depthwise filter (C/groups = 1) lies the same in both layouts.
Workloads stored before the key existed are NCHW (its default).

Kernels (each a search space naming this family): ``conv2d_direct`` (any shape),
``conv2d_winograd`` (3x3, stride 1), ``conv2d_igemm`` (any shape) and ``conv2d_depthwise``
(groups = C = K) in NCHW; ``conv2d_igemm_nhwc`` and ``conv2d_depthwise_nhwc`` (their templates
with the layout define) in NHWC; pointwise layers as one GEMM on the tensors as they lie
(gemm.cl, no copy): ``conv2d_1x1`` W[K x C] . x[n][C x H*W] for each image n in NCHW, and
``conv2d_1x1_nhwc`` x[N*H*W x C] . W[K x C]^T. In int8 (uint8 x with a zero
point, int8 filters, uint8 y requantised per output channel: ``conv2d_int8`` for CPUs). A
lookup of ``conv2d`` answers with the fastest of those that take the layer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from octune.catalogue.family import (
    Arguments,
    Bound,
    Family,
    OnnxNode,
    OnnxReading,
    Recall,
    ShapeParam,
    Workload,
)
from octune.catalogue.precision import (
    EXACT,
    FLOAT_TYPES,
    random_int8,
    random_normal,
    random_quantization,
    random_uint8,
    requantize,
    tolerance,
)
from octune.kernels.gemm import gemm_arguments

if TYPE_CHECKING:
    import pyopencl as cl

_SMALL = 1 << 10  # filter sizes, strides, padding and dilation beyond this are no layer's


class Conv2d(Family):
    name = "conv2d"
    recalls_operands = True  # int8 binds draw quantization outside it: they ignore it
    params = (
        ShapeParam("n", "batch size"),
        ShapeParam("c", "input channels"),
        ShapeParam("h", "input height"),
        ShapeParam("w", "input width"),
        ShapeParam("k", "output channels"),
        ShapeParam("r", "filter height", high=_SMALL, linear=True, define=True),
        ShapeParam("s", "filter width", high=_SMALL, linear=True, define=True),
        ShapeParam("stride", "stride", high=_SMALL, default=1, linear=True, define=True),
        ShapeParam("pad", "zero padding on each side", low=0, high=_SMALL, default=0,
                   linear=True, define=True),
        ShapeParam("dilation", "filter dilation", high=_SMALL, default=1, linear=True,
                   define=True),
        ShapeParam("groups", "groups (= c for depthwise)", default=1, define=True),
        ShapeParam("nhwc", "layout: 1 = NHWC (x, y channels last; filter K x R x S x C/groups), "
                   "0 = NCHW", low=0, high=1, default=0, linear=True, define=True),
    )  # fmt: skip
    example: ClassVar[Mapping[str, int]] = {
        "n": 1,
        "c": 64,
        "h": 56,
        "w": 56,
        "k": 64,
        "r": 3,
        "s": 3,
    }
    coverage_axes = (("c", "k"), ("h", "w"))
    derived = (
        ("OH", "(H + 2 * PAD - DILATION * (R - 1) - 1) // STRIDE + 1"),
        ("OW", "(W + 2 * PAD - DILATION * (S - 1) - 1) // STRIDE + 1"),
    )
    rules = (
        ("C % GROUPS == 0", "conv2d c must be divisible by groups"),
        ("K % GROUPS == 0", "conv2d k must be divisible by groups"),
        ("OH >= 1", "conv2d filter height dilation*(r-1)+1 exceeds the padded input h+2*pad"),
        ("OW >= 1", "conv2d filter width dilation*(s-1)+1 exceeds the padded input w+2*pad"),
    )
    flops = "2 * N * K * OH * OW * (C // GROUPS) * R * S"
    extents = ("N * C * H * W", "K * (C // GROUPS) * R * S", "N * K * OH * OW")
    dtypes = ("float32", "float16", "int8")

    def bind(
        self,
        workload: Workload,
        kernel: str,
        context: cl.Context,
        queue: cl.CommandQueue,
        rng: np.random.Generator,
        recall: Recall | None = None,
    ) -> Bound:
        from octune.catalogue.registry import load_kernel

        s = workload.shape
        nhwc = bool(s["nhwc"])
        x_shape = (s["n"], s["c"], s["h"], s["w"])
        w_shape = (s["k"], s["c"] // s["groups"], s["r"], s["s"])
        if nhwc:
            x_shape, w_shape = _channels_last(x_shape), _channels_last(w_shape)

        dtype = workload.dtype
        if dtype == "int8":
            return self._bind_int8(workload, x_shape, w_shape, context, queue, rng)

        def inputs() -> tuple[np.ndarray, ...]:
            return random_normal(rng, x_shape, dtype), random_normal(rng, w_shape, dtype)

        def reference(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            geometry = (s["stride"], s["pad"], s["dilation"], s["groups"], nhwc)
            expected = conv2d_reference(x, w, *geometry)
            # A bound, not a result: float32 sums of positive terms, at twice BLAS's speed.
            magnitude = conv2d_reference(np.abs(x), np.abs(w), *geometry, dtype=np.float32)
            terms = s["c"] // s["groups"] * s["r"] * s["s"]
            return expected, tolerance(terms, magnitude, dtype)

        arguments = conv2d_arguments(workload, load_kernel(kernel).space.entry)
        return Bound(context, queue, inputs, reference, arguments, FLOAT_TYPES[dtype], recall)

    def _bind_int8(
        self,
        workload: Workload,
        x_shape: tuple[int, ...],
        w_shape: tuple[int, ...],
        context: cl.Context,
        queue: cl.CommandQueue,
        rng: np.random.Generator,
    ) -> Bound:
        """uint8 x with a zero point, int8 filters, a bias and a scale per output channel
        (``random_quantization``), exact reference.
        """
        s = workload.shape
        terms = s["c"] // s["groups"] * s["r"] * s["s"]
        x_zero, y_zero, scale, bias = random_quantization(rng, terms, s["k"])

        def inputs() -> tuple[np.ndarray, ...]:
            return random_uint8(rng, x_shape), random_int8(rng, w_shape), scale, bias

        def reference(x: np.ndarray, w: np.ndarray, *_: np.ndarray) -> tuple[np.ndarray, float]:
            geometry = (s["stride"], s["pad"], s["dilation"], s["groups"], bool(s["nhwc"]))
            # Exact in float64: every sum is an integer far below 2^53.
            sums = conv2d_reference(x.astype(np.int64) - x_zero, w, *geometry) + bias[:, None, None]
            return requantize(sums, scale[:, None, None], y_zero).astype(np.float64), EXACT

        arguments = conv2d_int8_arguments(workload, x_zero, y_zero)
        return Bound(context, queue, inputs, reference, arguments, np.uint8)

    def describe(self, shape: Mapping[str, int]) -> str:
        """``conv2d 64→128 3x3 56x56``, then only what differs from a plain conv: stride,
        padding, dilation, groups (``dw``: depthwise), batch, layout.
        """
        s = shape
        groups = s["groups"]
        extras = [
            f"s{s['stride']}" if s["stride"] != 1 else "",
            f"p{s['pad']}" if s["pad"] else "",
            f"d{s['dilation']}" if s["dilation"] != 1 else "",
            ("dw" if groups == s["c"] == s["k"] else f"g{groups}") if groups != 1 else "",
            f"n{s['n']}" if s["n"] != 1 else "",
            "nhwc" if s["nhwc"] else "",
        ]
        main = f"conv2d {s['c']}→{s['k']} {s['r']}x{s['s']} {s['h']}x{s['w']}"
        return " ".join([main, *(extra for extra in extras if extra)])

    onnx_ops = ("Conv",)

    def read_onnx(self, node: OnnxNode) -> OnnxReading:
        """A 2-D Conv; padded unevenly (Inception's 1x7, TensorFlow's SAME at stride 2), the
        conv of an input padded beforehand, which the runtime does in its own launch.
        """
        x, w = node.inputs
        if len(x) != 4:
            return f"{len(x) - 2}-D: conv2d is 2-D"
        n, c, h, width = x
        k, _, r, s = w
        strides, dilations = node.ints("strides", [1, 1]), node.ints("dilations", [1, 1])
        if len(set(strides)) != 1 or len(set(dilations)) != 1:
            return f"strides {strides}, dilations {dilations}: conv2d takes one for both axes"
        pads = conv_pads(node)
        if len(set(pads)) != 1:
            h, width, pads = h + pads[0] + pads[2], width + pads[1] + pads[3], [0] * 4
        shape = {"n": n, "c": c, "h": h, "w": width, "k": k, "r": r, "s": s,
                 "stride": strides[0], "pad": pads[0], "dilation": dilations[0],
                 "groups": node.integer("group", 1)}  # fmt: skip
        return shape, 1

    def argument_layout(self, entry: str, dtype: str) -> str | None:
        """(x, w, y, N, C, H, W, K, OH, OW); int8: those, then (scale, bias, x_zero,
        y_zero); a pointwise conv's ``gemm`` entry: a GEMM's, over the image's pixels.
        """
        if dtype == "int8":
            return "conv2d_int8"
        return "conv2d_as_gemm" if entry == "gemm" else "conv2d"

    def launch_arguments(
        self, workload: Workload, entry: str, alpha: float = 1.0, zeros: tuple[int, int] = (0, 0)
    ) -> Arguments:
        """``conv2d_arguments`` (``conv2d_int8_arguments`` in int8): a model's conv runs as
        its tuning measured it. No conv kernel scales its output, so ``alpha`` must be 1 (as
        an ONNX Conv's is).
        """
        if alpha != 1.0:
            raise ValueError(f"conv2d kernels take no alpha, and {alpha} was asked")
        if workload.dtype == "int8":
            return conv2d_int8_arguments(workload, *zeros)
        return conv2d_arguments(workload, entry)


def conv_pads(node: OnnxNode) -> list[int]:
    """A 2-D ONNX Conv's pads (top, left, bottom, right), its auto_pad resolved."""
    x, w = node.inputs
    stride, dilation = node.ints("strides", [1, 1]), node.ints("dilations", [1, 1])
    auto_pad = node.attributes.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        totals = [
            max((math.ceil(size / s) - 1) * s + d * (f - 1) + 1 - size, 0)
            for size, f, s, d in zip(x[2:], w[2:], stride, dilation, strict=True)
        ]
        small = [total // 2 for total in totals]
        large = [total - total // 2 for total in totals]
        first, last = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
        return [*first, *last]
    if auto_pad == "VALID":
        return [0, 0, 0, 0]
    return node.ints("pads", [0, 0, 0, 0])


def conv2d_arguments(workload: Workload, entry: str) -> Arguments:
    """A conv2d kernel's arguments for (x, w) and y, by its entry function: shared by tuning
    and by runtimes (``octune.runtime``), so both launch a kernel the same way.
    """
    s, v = workload.shape, workload.shape_vars()
    if entry == "gemm":  # pointwise
        if s["nhwc"]:  # y[N*H*W x K] = x[N*H*W x C] . W[K x C]^T (TRANSB)
            pixels = s["n"] * s["h"] * s["w"]
            gemm = gemm_arguments(pixels, s["k"], s["c"], s["c"], s["c"], alpha=1.0)
        else:  # per image (BATCHED): y[n][K x H*W] = W[K x C] . x[n][C x H*W]
            pixels = s["h"] * s["w"]
            gemm = gemm_arguments(s["k"], pixels, s["c"], s["c"], pixels, alpha=1.0)

        def pointwise(inputs: Sequence[cl.Buffer], output: cl.Buffer) -> tuple[object, ...]:
            x, w = inputs
            return gemm((x, w) if s["nhwc"] else (w, x), output)

        return pointwise
    sizes = [np.int32(v[name]) for name in ("N", "C", "H", "W", "K", "OH", "OW")]

    def arguments(inputs: Sequence[cl.Buffer], output: cl.Buffer) -> tuple[object, ...]:
        return (*inputs, output, *sizes)

    return arguments


def conv2d_int8_arguments(workload: Workload, x_zero: int, y_zero: int) -> Arguments:
    """conv2d_int8.cl's arguments for x (uint8), w (int8), the per-channel scale (float32) and
    bias (int32) buffers, and y (uint8): the conv's, then the quantisation's.
    """
    v = workload.shape_vars()
    sizes = [np.int32(v[name]) for name in ("N", "C", "H", "W", "K", "OH", "OW")]

    def arguments(inputs: Sequence[cl.Buffer], output: cl.Buffer) -> tuple[object, ...]:
        x, w, scale, bias = inputs
        return (x, w, output, *sizes, scale, bias, np.int32(x_zero), np.int32(y_zero))

    return arguments


def _channels_last(shape: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """NCHW -> NHWC (and KCRS -> KRSC)."""
    return shape[0], shape[2], shape[3], shape[1]


def conv2d_reference(
    x: np.ndarray,
    w: np.ndarray,
    stride: int,
    pad: int,
    dilation: int,
    groups: int,
    nhwc: bool = False,
    dtype: type[np.floating] = np.float64,
) -> np.ndarray:
    """The convolution in ``dtype`` (float64: the reference), one filter tap at a time: per
    tap and group one matrix product over the whole batch, through BLAS. A tuning run pays it
    before a layer's first candidate: an unoptimised einsum took 12 s for one 3x3 conv of 2048
    channels at 28x28, and a product per image and tap, with the magnitudes in float64 too,
    4.27 s against 2.29 for DeepLab's atrous 3x3 at batch 16 on the H200's host
    (benchmarks/reference_cost.py). NHWC (x NHWC, w KRSC, y NHWC) as views transposed around
    the NCHW one, so both layouts compute the same sums.
    """
    if nhwc:
        nchw = conv2d_reference(
            x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2), stride, pad, dilation, groups,
            dtype=dtype,
        )  # fmt: skip
        return nchw.transpose(0, 2, 3, 1)
    n, _, h, width = x.shape
    k, per_group, r, s = w.shape
    oh = (h + 2 * pad - dilation * (r - 1) - 1) // stride + 1
    ow = (width + 2 * pad - dilation * (s - 1) - 1) // stride + 1
    padded = np.pad(x.astype(dtype), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    padded = padded.reshape(n, groups, per_group, h + 2 * pad, width + 2 * pad)
    filters = w.astype(dtype).reshape(groups, k // groups, per_group, r, s)
    out = np.zeros((groups, k // groups, n * oh * ow), dtype)
    for i in range(r):
        for j in range(s):
            rows = slice(i * dilation, i * dilation + stride * (oh - 1) + 1, stride)
            cols = slice(j * dilation, j * dilation + stride * (ow - 1) + 1, stride)
            taps = padded[:, :, :, rows, cols].transpose(1, 2, 0, 3, 4)  # (g, c/g, n, oh, ow)
            taps = taps.reshape(groups, per_group, n * oh * ow)
            out += np.ascontiguousarray(filters[..., i, j]) @ taps  # (g, k/g, c/g) @ that
    return np.ascontiguousarray(out.reshape(k, n, oh, ow).transpose(1, 0, 2, 3))


FAMILY = Conv2d()
