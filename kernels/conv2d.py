"""conv2d: float32 2-D convolution (cross-correlation, as PyTorch's conv2d, no bias), NCHW.

x is N x C x H x W, the filter K x C/groups x R x S, y is N x K x OH x OW. Kernels (each a
search space naming this family): ``conv2d_direct`` (any shape), ``conv2d_depthwise``
(groups = C = K), ``conv2d_1x1`` (pointwise at batch 1: the GEMM template on the tensors as
they lie, W[K x C] times x[C x H*W], no copy). A lookup of ``conv2d`` answers with the fastest
of those that take the layer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from octune.kernels.gemm import gemm_arguments
from octune.tuner.family import Bound, Family, ShapeParam, Workload, random_normal, tolerance

if TYPE_CHECKING:
    import pyopencl as cl

_SMALL = 1 << 10  # filter sizes, strides, padding and dilation beyond this are no layer's


class Conv2d(Family):
    name = "conv2d"
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
    )  # fmt: skip
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

    def bind(
        self,
        workload: Workload,
        kernel: str,
        context: cl.Context,
        queue: cl.CommandQueue,
        rng: np.random.Generator,
    ) -> Bound:
        from octune.tuner.kernels import load_kernel

        s = workload.shape
        v = workload.shape_vars()
        x_shape = (s["n"], s["c"], s["h"], s["w"])
        w_shape = (s["k"], s["c"] // s["groups"], s["r"], s["s"])

        def inputs() -> tuple[np.ndarray, ...]:
            return random_normal(rng, x_shape), random_normal(rng, w_shape)

        def reference(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            geometry = (s["stride"], s["pad"], s["dilation"], s["groups"])
            expected = conv2d_reference(x, w, *geometry)
            magnitude = conv2d_reference(np.abs(x), np.abs(w), *geometry)
            return expected, tolerance(w_shape[1] * s["r"] * s["s"], magnitude)

        arguments: Callable[[Sequence[cl.Buffer], cl.Buffer], tuple[object, ...]]
        if load_kernel(kernel).space.entry == "gemm":  # pointwise: W[K x C] . x[C x H*W]
            hw = s["h"] * s["w"]
            gemm = gemm_arguments(s["k"], hw, s["c"], s["c"], hw, alpha=1.0)

            def arguments(inputs: Sequence[cl.Buffer], output: cl.Buffer) -> tuple[object, ...]:
                x, w = inputs
                return gemm((w, x), output)

        else:
            sizes = [np.int32(v[name]) for name in ("N", "C", "H", "W", "K", "OH", "OW")]

            def arguments(inputs: Sequence[cl.Buffer], output: cl.Buffer) -> tuple[object, ...]:
                return (*inputs, output, *sizes)

        return Bound(context, queue, inputs, reference, arguments)


def conv2d_reference(
    x: np.ndarray, w: np.ndarray, stride: int, pad: int, dilation: int, groups: int
) -> np.ndarray:
    """The float64 convolution, one filter tap at a time (R*S tensor contractions)."""
    n, _, h, width = x.shape
    k, per_group, r, s = w.shape
    oh = (h + 2 * pad - dilation * (r - 1) - 1) // stride + 1
    ow = (width + 2 * pad - dilation * (s - 1) - 1) // stride + 1
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    padded = padded.reshape(n, groups, per_group, h + 2 * pad, width + 2 * pad)
    filters = w.astype(np.float64).reshape(groups, k // groups, per_group, r, s)
    out = np.zeros((n, groups, k // groups, oh, ow))
    for i in range(r):
        for j in range(s):
            rows = slice(i * dilation, i * dilation + stride * (oh - 1) + 1, stride)
            cols = slice(j * dilation, j * dilation + stride * (ow - 1) + 1, stride)
            out += np.einsum("ngchw,gkc->ngkhw", padded[:, :, :, rows, cols], filters[..., i, j])
    return out.reshape(n, k, oh, ow)


FAMILY = Conv2d()
