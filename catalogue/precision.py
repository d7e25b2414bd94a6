"""Verification by format: what a kernel's inputs, outputs and tolerance are for each dtype
(``octune.core.precision.DTYPES``). Every result is checked against a float64 NumPy reference
computed from the same rounded inputs the device saw, within a bound the format and the
reduction length give (``docs/precision.md``):

- float32 and float16: ``|out - ref| <= TOLERANCE_FACTOR * sqrt(terms) * eps * (|x| . |y|)``,
  eps the format's machine epsilon (2^-23, 2^-10). Rounding errors of a sum of products grow
  like sqrt(terms) for random data, whatever the order of summation; the factor leaves room
  for it while one wrong or missing term is still caught. A float16 kernel that accumulates in
  float is held to the same float16 bound as one that accumulates in half: its output is
  rounded to half either way.
- int8: exact. The integer sum, its requantisation (float32 product, round half to even,
  zero point, saturation) is what the reference computes too, so any difference is an error.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

TOLERANCE_FACTOR = 16.0
#: Machine epsilon of each float dtype.
EPSILON = {"float32": float(np.finfo(np.float32).eps), "float16": float(np.finfo(np.float16).eps)}
#: Per-element tolerance of an exact result: any integer difference (>= 1) is twice past it.
EXACT = 0.5

#: The NumPy type of each dtype's float buffers (int8 kernels' operands are typed by role).
FLOAT_TYPES: dict[str, type[np.floating]] = {"float32": np.float32, "float16": np.float16}


def tolerance(terms: int, magnitude: np.ndarray, dtype: str = "float32") -> np.ndarray:
    """Per-element tolerance of a ``dtype`` sum of ``terms`` products with these |x|.|y| sums."""
    scale = TOLERANCE_FACTOR * math.sqrt(max(terms, 1)) * EPSILON[dtype]
    return np.maximum(scale * magnitude, np.finfo(FLOAT_TYPES[dtype]).tiny)


def random_normal(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: str = "float32"
) -> np.ndarray:
    """Standard-normal inputs as ``dtype`` stores them: never zero, so unwritten or mis-indexed
    outputs show (float16 rounds a tiny draw to 0 at most with probability 2^-24 an element).
    """
    return rng.standard_normal(shape, dtype=np.float32).astype(FLOAT_TYPES[dtype])


def random_uint8(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Quantised activations: uint8 over the whole range."""
    return rng.integers(0, 256, shape, dtype=np.uint8)


def random_int8(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Quantised weights: int8 over the symmetric range a quantiser writes, -127..127."""
    return rng.integers(-127, 128, shape, dtype=np.int8)


class Quantization(NamedTuple):
    """A quantised layer's parameters as a test draws them: the input's and the output's zero
    points, and a scale and an int32 bias per output channel.
    """

    in_zero: int
    out_zero: int
    scale: np.ndarray
    bias: np.ndarray


def random_quantization(rng: np.random.Generator, terms: int, channels: int) -> Quantization:
    """Zero points near the middle, and a scale and bias per channel sized so that sums of
    ``terms`` products of uniform uint8 and int8 values spread over 0..255 around the output's
    zero point (few saturate).
    """
    in_zero, out_zero = int(rng.integers(96, 160)), int(rng.integers(96, 160))
    spread = math.sqrt(terms) * 74.0 * 73.0  # the sums' standard deviation, about
    scale = (40.0 / spread * rng.uniform(0.5, 1.5, channels)).astype(np.float32)
    bias = rng.integers(-int(spread), int(spread) + 1, channels).astype(np.int32)
    return Quantization(in_zero, out_zero, scale, bias)


def requantize(accumulator: np.ndarray, scale: np.ndarray, zero_point: int) -> np.ndarray:
    """uint8 outputs of int32 sums as the kernels compute them (and onnxruntime's QLinear
    operators): the float32 product of the sum and the scale, rounded half to even, plus the
    zero point, saturated to 0..255.
    """
    product = accumulator.astype(np.float32) * scale.astype(np.float32)
    return np.clip(np.rint(product) + zero_point, 0, 255).astype(np.uint8)
