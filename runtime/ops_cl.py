"""What the runtime's own kernels (``ops.cl``) take: the numbering of their ACT, FUNCTION,
REDUCTION and index-map MODE defines, their source with the epilogue they share with the tuned
kernels, and the magic numbers that divide exactly without a division.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import resources

import numpy as np
import pyopencl as cl

from octune.catalogue.registry import expand_includes
from octune.runtime.steps import Epilogue


def _numbered(*names: str) -> dict[str, int]:
    return {name: code for code, name in enumerate(names)}


# The numbering of ops.cl's ACT, FUNCTION, REDUCTION and index_map MODE defines.
ACTIVATIONS = _numbered(
    "none", "relu", "clip", "erf", "sigmoid", "hardsigmoid", "hardswish", "tanh", "leakyrelu",
    "elu", "gelu", "gelu_tanh", "silu", "softplus", "exp", "log", "sqrt", "reciprocal", "neg",
    "abs", "pow", "floor", "ceil", "round", "not", "bool", "trunc", "sign", "sin", "cos",
    "quantize",
)  # fmt: skip
FUNCTIONS = _numbered(
    "add", "sub", "mul", "div", "pow", "min", "max", "mod", "fmod", "equal", "less",
    "less_equal", "greater", "greater_equal", "and", "or", "xor", "prelu", "where", "expand",
)  # fmt: skip
REDUCTIONS = _numbered("sum", "mean", "max", "min", "l2", "sum_square", "prod")
MODES = _numbered("plain", "tile", "constant", "edge", "reflect")


def divisor(d: int) -> tuple[np.int32, np.uint64, np.int32]:
    """kernels/epilogue.clh's EPILOGUE_DIVISOR: ``d``, and the magic number and shift that
    divide any 0 <= i < 2**31 by it exactly (Granlund and Montgomery, 1994, theorem 4.2).
    """
    shift = 31 + (d - 1).bit_length()
    return np.int32(d), np.uint64((1 << shift) // d + 1), np.int32(shift)


@cache
def ops_source() -> str:
    """ops.cl, with the epilogue it shares with the tuned kernels (kernels/epilogue.clh)."""
    ops = resources.files("octune.runtime").joinpath("ops.cl")
    return expand_includes(ops, resources.files("octune.kernels"))


def epilogue_arguments(e: Epilogue, buffers: Mapping[str, cl.Buffer]) -> tuple[object, ...]:
    """kernels/epilogue.clh's EPILOGUE_ARGUMENTS for an epilogue."""
    tensors = (buffers[name] if name else None for name in (e.scale, e.bias, e.other))
    divisors = (e.inner, e.channels, e.other_inner, e.other_size)
    return (*tensors, *(v for d in divisors for v in divisor(d)), np.float32(e.low),
            np.float32(e.high))  # fmt: skip


def epilogue_defines(e: Epilogue, n: int) -> dict[str, int]:
    """kernels/epilogue.clh's defines for an epilogue over an output of ``n`` elements."""
    return dict(EPILOGUE=1, HAS_SCALE=int(bool(e.scale)), HAS_BIAS=int(bool(e.bias)),
                OTHER=0 if not e.other else 2 if e.multiply else 1,
                ACT=ACTIVATIONS[e.activation], ONE_IMAGE=int(e.inner * e.channels >= n),
                SAME_OTHER=int(e.other_inner == 1 and e.other_size >= n))  # fmt: skip
