"""GEMM: C = alpha * op(A) * op(B) + beta * C, row-major, op(X) = X or X^T, in float32 or
float16 (storage; float or half arithmetic); and its quantised form in int8 (``gemm_int8.cl``):
C = requantize((A - a_zero) . B + bias) with A uint8, B int8, C uint8, a scale per column.

Templates: ``gemm.cl``, ``gemv.cl``, ``gemm_panel.cl``, ``gemm_int8.cl`` (their spaces in
``search_spaces/``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
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
from octune.lookup.data import Query

if TYPE_CHECKING:
    import pyopencl as cl

ALPHA = 1.25  # not 1, so a kernel that ignores alpha is caught


def gemm_arguments(m: int, n: int, k: int, lda: int, ldb: int, alpha: float = ALPHA) -> Arguments:
    """gemm.cl's arguments for A (lda), B (ldb) and C (row stride n), beta = 0."""

    def arguments(inputs: Sequence[cl.Buffer], output: cl.Buffer) -> tuple[object, ...]:
        a, b = inputs
        return (
            np.int32(m), np.int32(n), np.int32(k),
            np.float32(alpha), np.float32(0.0),
            a, np.int32(lda), b, np.int32(ldb), output, np.int32(n),
        )  # fmt: skip

    return arguments


def gemm_int8_arguments(
    m: int, n: int, k: int, lda: int, ldb: int, a_zero: int, c_zero: int
) -> Arguments:
    """gemm_int8.cl's arguments for A (uint8, lda), B (int8, ldb), the per-column scale
    (float32) and bias (int32) buffers, and C (uint8, row stride n).
    """

    def arguments(inputs: Sequence[cl.Buffer], output: cl.Buffer) -> tuple[object, ...]:
        a, b, scale, bias = inputs
        return (
            np.int32(m), np.int32(n), np.int32(k), a, np.int32(lda), b, np.int32(ldb),
            scale, bias, np.int32(a_zero), np.int32(c_zero), output, np.int32(n),
        )  # fmt: skip

    return arguments


def stored_shapes(shape: Mapping[str, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """A's and B's shapes as they lie in memory, row-major: op(X) transposed where flagged."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    return ((k, m) if shape["transa"] else (m, k)), ((n, k) if shape["transb"] else (k, n))


def operands(a: np.ndarray, b: np.ndarray, shape: Mapping[str, int]) -> tuple[np.ndarray, ...]:
    """op(A) and op(B) of A and B as they lie (views, no copies)."""
    return (a.T if shape["transa"] else a), (b.T if shape["transb"] else b)


class Gemm(Family):
    name = "gemm"
    recalls_operands = True  # int8 binds draw quantization outside it: they ignore it
    params = (
        ShapeParam("m", "rows of op(A) and C"),
        ShapeParam("n", "columns of op(B) and C"),
        ShapeParam("k", "columns of op(A), rows of op(B)"),
        ShapeParam("transa", "op(A) = A^T", low=0, high=1, default=0, linear=True, define=True),
        ShapeParam("transb", "op(B) = B^T", low=0, high=1, default=0, linear=True, define=True),
    )
    flops = "2 * M * N * K"
    extents = ("M * K", "K * N", "M * N")
    example: ClassVar[Mapping[str, int]] = {"m": 512, "n": 512, "k": 512}
    coverage_axes = (("m",), ("n",))
    dtypes = ("float32", "float16", "int8")

    onnx_ops = ("Gemm", "MatMul")

    def read_onnx(self, node: OnnxNode) -> OnnxReading:
        """A Gemm as it says; a MatMul as numpy's matmul: a shared (2-D) B folds A's batch
        into M, one GEMM; batched operands make one GEMM per matrix of the broadcast batch.
        """
        a, b = node.inputs
        if node.op == "Gemm":
            transa, transb = node.integer("transA", 0), node.integer("transB", 0)
            m, k = (a[1], a[0]) if transa else (a[0], a[1])
            n = b[0] if transb else b[1]
            return {"m": m, "n": n, "k": k, "transa": transa, "transb": transb}, 1
        m, k = (1, a[0]) if len(a) == 1 else (a[-2], a[-1])
        n = 1 if len(b) == 1 else b[-1]
        batch_a, batch_b = list(a[:-2]), list(b[:-2])
        if not batch_b:
            m, count = m * math.prod(batch_a), 1
        else:
            rank = max(len(batch_a), len(batch_b))
            padded = [[1] * (rank - len(d)) + d for d in (batch_a, batch_b)]
            count = math.prod(max(x, y) for x, y in zip(*padded, strict=True))
        return {"m": m, "n": n, "k": k, "transa": 0, "transb": 0}, count

    def describe(self, shape: Mapping[str, int]) -> str:
        layout = ("T" if shape["transa"] else "N") + ("T" if shape["transb"] else "N")
        return f"GEMM {layout} {shape['m']}x{shape['n']}x{shape['k']}"

    def bind(
        self,
        workload: Workload,
        kernel: str,
        context: cl.Context,
        queue: cl.CommandQueue,
        rng: np.random.Generator,
        recall: Recall | None = None,
    ) -> Bound:
        if workload.dtype == "int8":
            return self._bind_int8(workload, context, queue, rng)
        s, dtype = workload.shape, workload.dtype
        m, n, k = s["m"], s["n"], s["k"]
        shape_a, shape_b = stored_shapes(s)

        def inputs() -> tuple[np.ndarray, ...]:
            return random_normal(rng, shape_a, dtype), random_normal(rng, shape_b, dtype)

        def reference(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            op_a, op_b = operands(a, b, s)
            # The bound in float32 (sums of positive terms), the reference in float64.
            bound_a, bound_b = (np.abs(v.astype(np.float32, copy=False)) for v in (op_a, op_b))
            magnitude = abs(ALPHA) * (bound_a @ bound_b)
            expected = ALPHA * (op_a.astype(np.float64) @ op_b.astype(np.float64))
            return expected, tolerance(k, magnitude, dtype)

        arguments = gemm_arguments(m, n, k, shape_a[1], shape_b[1])
        return Bound(context, queue, inputs, reference, arguments, FLOAT_TYPES[dtype], recall)

    def _bind_int8(
        self,
        workload: Workload,
        context: cl.Context,
        queue: cl.CommandQueue,
        rng: np.random.Generator,
    ) -> Bound:
        """uint8 A with a zero point, int8 B, a bias and a scale per column
        (``random_quantization``), exact reference.
        """
        s = workload.shape
        m, n, k = s["m"], s["n"], s["k"]
        shape_a, shape_b = stored_shapes(s)
        a_zero, c_zero, scale, bias = random_quantization(rng, k, n)

        def inputs() -> tuple[np.ndarray, ...]:
            return random_uint8(rng, shape_a), random_int8(rng, shape_b), scale, bias

        def reference(a: np.ndarray, b: np.ndarray, *_: np.ndarray) -> tuple[np.ndarray, float]:
            op_a, op_b = (x.astype(np.int64) for x in operands(a, b, s))
            sums = (op_a - a_zero) @ op_b + bias
            return requantize(sums, scale, c_zero).astype(np.float64), EXACT

        arguments = gemm_int8_arguments(m, n, k, shape_a[1], shape_b[1], a_zero, c_zero)
        return Bound(context, queue, inputs, reference, arguments, np.uint8)

    def host_baseline(self, workload: Workload) -> Callable[[], object]:
        """NumPy's float32 product (its BLAS, every core), operands laid out as the workload's."""
        rng = np.random.default_rng(0)
        a, b = (random_normal(rng, shape) for shape in stored_shapes(workload.shape))
        op_a, op_b = operands(a, b, workload.shape)
        return lambda: op_a @ op_b

    def launch_arguments(
        self, workload: Workload, entry: str, alpha: float = 1.0, zeros: tuple[int, int] = (0, 0)
    ) -> Arguments:
        """``gemm_arguments`` (``gemm_int8_arguments`` in int8, whose sums take no alpha)
        for a model's A, B and C as the shape lays them out.
        """
        s = workload.shape
        (_, lda), (_, ldb) = stored_shapes(s)
        if workload.dtype == "int8":
            if alpha != 1.0:
                raise ValueError(f"gemm_int8 takes no alpha, and {alpha} was asked")
            return gemm_int8_arguments(s["m"], s["n"], s["k"], lda, ldb, *zeros)
        return gemm_arguments(s["m"], s["n"], s["k"], lda, ldb, alpha=alpha)

    def argument_layout(self, entry: str, dtype: str) -> str | None:
        """(M, N, K, alpha, beta, A, lda, B, ldb, C, ldc); int8: (M, N, K, A, lda, B, ldb,
        scale, bias, a_zero, c_zero, C, ldc).
        """
        return "gemm_int8" if dtype == "int8" else "gemm"


FAMILY = Gemm()


def gemm_workload(m: int, n: int, k: int, transa: bool = False, transb: bool = False) -> Workload:
    shape = {"m": m, "n": n, "k": k, "transa": int(transa), "transb": int(transb)}
    return FAMILY.workload(shape)


def parse_gemm(text: str) -> Workload:
    """An NN workload from ``MxNxK`` text, as the benchmark scripts take shapes."""
    m, n, k = (int(part) for part in text.lower().split("x"))
    return gemm_workload(m, n, k)


def gemm_query(
    m: int, n: int, k: int, transa: bool = False, transb: bool = False, dtype: str = "float32"
) -> Query:
    shape = {"m": m, "n": n, "k": k, "transa": int(transa), "transb": int(transb)}
    return Query("gemm", shape, dtype)
