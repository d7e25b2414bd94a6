"""Problem instances: a kernel family's shape, its buffers on a device, and its float64 reference.

A workload type knows everything problem-specific (operands, kernel arguments, reference,
tolerance), so that measurement, strategies and storage stay generic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np
import pyopencl as cl

from octune.tuner.errors import WorkloadError

# Largest dimension the kernels index with 32-bit ints; larger problems need another kernel.
MAX_DIM = 1 << 20
MAX_ELEMENTS = (1 << 31) - 1
#: The shape keys whose product is each operand's element count: op(A), op(B) and C.
GEMM_OPERANDS = (("m", "k"), ("k", "n"), ("m", "n"))


def gemm_shape_problem(m: int, n: int, k: int) -> str | None:
    """Why the GEMM kernel cannot take this shape, in one line; None if it can. The tuner and
    the service's lookups and uploads ask the same question (bundles: ``Problem.operands``).
    """
    for name, value in (("M", m), ("N", n), ("K", k)):
        if not 1 <= value <= MAX_DIM:
            return f"GEMM {name}={value} is out of range: use 1..{MAX_DIM}"
    sizes = {"m": m, "n": n, "k": k}
    for rows, cols in ((sizes[a], sizes[b]) for a, b in GEMM_OPERANDS):
        if rows * cols > MAX_ELEMENTS:
            return (
                f"GEMM {m}x{n}x{k} has a matrix over {MAX_ELEMENTS} elements, beyond 32-bit "
                "indexing: split it into smaller GEMMs"
            )
    return None


# Verification tolerance per element: |out - ref| <= TOLERANCE_FACTOR * sqrt(K) * eps * (|A||B|).
# Rounding errors of a float32 dot product grow like sqrt(K) for random data; the factor
# leaves room for any summation order while one missing or wrong term is still caught.
TOLERANCE_FACTOR = 16.0
FLOAT32_EPS = float(np.finfo(np.float32).eps)


class BoundWorkload(Protocol):
    """A workload's data on one device: what measurement needs to run, time and check it."""

    def args(self, input_set: int) -> tuple[object, ...]: ...

    @property
    def input_sets(self) -> int: ...

    def poison_output(self) -> None: ...

    def error_ratio(self) -> float:
        """Largest |error| / tolerance over the output of the last run (< 1 passes; NaN: inf)."""
        ...


class Workload(Protocol):
    problem: ClassVar[str]
    shape_names: ClassVar[tuple[str, ...]]
    # Shape keys whose product is an operand's element count, each at most MAX_ELEMENTS.
    operands: ClassVar[tuple[tuple[str, ...], ...]]

    @property
    def key(self) -> str: ...

    @property
    def shape(self) -> dict[str, int]: ...

    @property
    def dtype(self) -> str: ...

    @property
    def flops(self) -> int: ...

    def shape_vars(self) -> dict[str, int]: ...

    def defines(self) -> dict[str, int]: ...

    def bind(
        self, context: cl.Context, queue: cl.CommandQueue, rng: np.random.Generator
    ) -> BoundWorkload: ...


@dataclass(frozen=True)
class GemmWorkload:
    """C = alpha * op(A) * op(B) + beta * C in float32, row-major, with op(X) = X or X^T."""

    m: int
    n: int
    k: int
    transa: bool = False
    transb: bool = False

    problem: ClassVar[str] = "gemm"
    shape_names: ClassVar[tuple[str, ...]] = ("M", "N", "K")
    operands: ClassVar[tuple[tuple[str, ...], ...]] = GEMM_OPERANDS

    @classmethod
    def parse(cls, text: str) -> GemmWorkload:
        """An NN workload from ``MxNxK`` text, as the benchmark scripts take shapes."""
        m, n, k = (int(part) for part in text.lower().split("x"))
        return cls(m, n, k)

    def __post_init__(self) -> None:
        if problem := gemm_shape_problem(self.m, self.n, self.k):
            raise WorkloadError(problem)

    @property
    def dtype(self) -> str:
        return "float32"

    @property
    def shape(self) -> dict[str, int]:
        return {
            "m": self.m,
            "n": self.n,
            "k": self.k,
            "transa": int(self.transa),
            "transb": int(self.transb),
        }

    @property
    def key(self) -> str:
        fields = ",".join(f"{name}={value}" for name, value in self.shape.items())
        return f"{self.problem}:{fields},dtype={self.dtype}"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def layout(self) -> str:
        return ("T" if self.transa else "N") + ("T" if self.transb else "N")

    def __str__(self) -> str:
        return f"GEMM {self.layout} {self.m}x{self.n}x{self.k}"

    def shape_vars(self) -> dict[str, int]:
        return {"M": self.m, "N": self.n, "K": self.k}

    def defines(self) -> dict[str, int]:
        return {"TRANSA": int(self.transa), "TRANSB": int(self.transb)}

    def stored_shapes(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """Shapes of A and B as they lie in memory (before op)."""
        a = (self.k, self.m) if self.transa else (self.m, self.k)
        b = (self.n, self.k) if self.transb else (self.k, self.n)
        return a, b

    def random_operands(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Standard-normal A and B: never zero, so unwritten or mis-indexed outputs show."""
        shape_a, shape_b = self.stored_shapes()
        a = rng.standard_normal(shape_a, dtype=np.float32)
        b = rng.standard_normal(shape_b, dtype=np.float32)
        return a, b

    def reference(
        self, a: np.ndarray, b: np.ndarray, alpha: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """The float64 result for beta = 0 and the per-element tolerance that scales with K."""
        op_a = (a.T if self.transa else a).astype(np.float64)
        op_b = (b.T if self.transb else b).astype(np.float64)
        expected = alpha * (op_a @ op_b)
        magnitude = abs(alpha) * (np.abs(op_a) @ np.abs(op_b))
        tolerance = TOLERANCE_FACTOR * math.sqrt(self.k) * FLOAT32_EPS * magnitude
        return expected, np.maximum(tolerance, np.finfo(np.float32).tiny)

    def bind(
        self, context: cl.Context, queue: cl.CommandQueue, rng: np.random.Generator
    ) -> BoundGemm:
        return BoundGemm(self, context, queue, rng)


class BoundGemm:
    """GEMM operands on a device: one checked input set plus extra sets to rotate while timing.

    Timing several input sets in turn keeps small problems from being timed out of a warm
    cache that a real network layer would not find warm.
    """

    ALPHA = 1.25  # not 1, so a kernel that ignores alpha is caught

    def __init__(
        self,
        workload: GemmWorkload,
        context: cl.Context,
        queue: cl.CommandQueue,
        rng: np.random.Generator,
    ) -> None:
        self.workload = workload
        self.queue = queue
        a, b = workload.random_operands(rng)
        self.expected, self.tolerance = workload.reference(a, b, self.ALPHA)
        operand_bytes = a.nbytes + b.nbytes
        cache = max(int(context.devices[0].global_mem_cache_size), 1)
        sets = min(4, max(1, math.ceil(2 * cache / operand_bytes)))
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        host_sets = [(a, b)] + [workload.random_operands(rng) for _ in range(sets - 1)]
        self.operands = [
            (cl.Buffer(context, flags, hostbuf=x), cl.Buffer(context, flags, hostbuf=y))
            for x, y in host_sets
        ]
        self.output = np.empty((workload.m, workload.n), dtype=np.float32)
        self.c_buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE, size=self.output.nbytes)
        self.lda = a.shape[1]
        self.ldb = b.shape[1]

    @property
    def input_sets(self) -> int:
        return len(self.operands)

    def args(self, input_set: int) -> tuple[object, ...]:
        w = self.workload
        a_buffer, b_buffer = self.operands[input_set]
        return (
            np.int32(w.m), np.int32(w.n), np.int32(w.k),
            np.float32(self.ALPHA), np.float32(0.0),
            a_buffer, np.int32(self.lda),
            b_buffer, np.int32(self.ldb),
            self.c_buffer, np.int32(w.n),
        )  # fmt: skip

    def poison_output(self) -> None:
        """Fill C with NaN: with beta = 0 an element the kernel skips, or reads, stays NaN."""
        cl.enqueue_fill_buffer(self.queue, self.c_buffer, np.float32(np.nan), 0, self.output.nbytes)

    def error_ratio(self) -> float:
        cl.enqueue_copy(self.queue, self.output, self.c_buffer)
        ratio = np.abs(self.output - self.expected) / self.tolerance
        return float("inf") if np.isnan(ratio).any() else float(ratio.max())
