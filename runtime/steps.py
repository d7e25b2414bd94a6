"""The runtime's steps: one per launch group of a model, in an order that runs, and the
graph that holds them with its tensors' shapes and constants (``onnx_loader`` builds it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from octune.networks.layers import Layer
from octune.runtime import layout


def widened(value: np.ndarray) -> np.ndarray:
    """A float16 constant as float32 (exactly), any other as it is."""
    return value.astype(np.float32) if value.dtype == np.float16 else value


@dataclass(frozen=True)
class Epilogue:
    """y = act(x * scale[c] + bias[c] (+ or *) other[j]), c = (i // inner) % channels and
    j = (i // other_inner) % other_size: names of constants (scale, bias) and of a tensor
    (other) that broadcasts along one block of the output's axes.
    """

    scale: str | None = None
    bias: str | None = None
    other: str | None = None
    multiply: bool = False  # other multiplies instead of adding
    activation: str = "none"  # a value of UNARY (cast as bool or trunc), gelu_tanh or silu
    low: float = 0.0  # the activation's parameters: clip's bounds, alpha and beta, exponent
    high: float = 0.0
    inner: int = 1
    channels: int = 1
    other_inner: int = 1
    other_size: int = 1

    @property
    def empty(self) -> bool:
        return (self.scale, self.bias, self.other, self.activation) == (None, None, None, "none")

    @property
    def tensors(self) -> list[str]:
        """The constants and tensor it reads: scale, bias, other, those it has."""
        return [name for name in (self.scale, self.bias, self.other) if name]


@dataclass(frozen=True, kw_only=True)
class Step:
    """Nodes that run as one group; ``inputs`` are tensor or constant names, in kernel order."""

    name: str  # the first node's: the layer as tables and messages name it
    nodes: tuple[str, ...]
    ops: tuple[str, ...]
    inputs: tuple[str, ...]
    output: str
    epilogue: Epilogue = field(default_factory=Epilogue)

    @property
    def op(self) -> str:
        return "+".join(self.ops)

    @property
    def reads(self) -> list[str]:
        """The tensors and constants the step reads: its inputs, then its epilogue's."""
        return [*self.inputs, *self.epilogue.tensors]


def readers(steps: Sequence[Step]) -> dict[str, list[Step]]:
    """The steps that read each tensor or constant, in order."""
    found: dict[str, list[Step]] = {}
    for step in steps:
        for name in step.reads:
            found.setdefault(name, []).append(step)
    return found


@dataclass(frozen=True)
class View:
    """A batched product's operand (or output) where a Transpose, Slice or Gather left it
    (``runtime/views.py``): ``shape`` as the product sees it, element (i0, i1, ...) at
    ``offset + sum(i_k * strides[k])`` of the tensor the step names.
    """

    shape: tuple[int, ...]
    offset: int
    strides: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class Tuned(Step):
    """A Conv (x, weight) or Gemm / MatMul (A, B) through octune's tuned kernels; an int8
    layer (``layer.dtype``, ``octune.networks.quantized``) reads (x, weight, scale, bias) and
    the zero points of its uint8 input and output. A batched MatMul may read and write
    through ``views`` (A, B, y; None: the tensor as it lies).
    """

    layer: Layer
    alpha: float = 1.0
    zeros: tuple[int, int] = (0, 0)
    views: tuple[View | None, View | None, View | None] = (None, None, None)


@dataclass(frozen=True, kw_only=True)
class Elementwise(Step):
    """The epilogue alone, on one input."""


@dataclass(frozen=True, kw_only=True)
class Pool(Step):
    max: bool
    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right
    include_pad: bool = False

    def global_over(self, shape: Sequence[int]) -> bool:
        """Whether one window covers each whole plane of an input of ``shape`` (N, C, H, W)."""
        return self.kernel == tuple(shape[2:]) and not any(self.pads)


@dataclass(frozen=True, kw_only=True)
class Concat(Step):
    axis: int


@dataclass(frozen=True, kw_only=True)
class Softmax(Step):
    """Over ``length`` elements ``inner`` apart (ONNX before opset 13: the flattened rest)."""

    length: int
    inner: int


@dataclass(frozen=True, kw_only=True)
class Attention(Step):
    """softmax(alpha * q k + mask) v as one launch (``runtime/attention.py``): inputs (q, k,
    v[, mask]) as the scores' A and B and the context's B read them, ``views`` those of q, k,
    v and the output; the epilogue is the context's. ``parts``: the steps it stands for, which
    a plan may run instead: the scores' product, a mask's Add, the softmax, the context's
    product. ``mask``: the mask's strides along the scores' batch axes (RANK, the first
    padded with zeros), rows and keys.
    """

    alpha: float
    views: tuple[View | None, View | None, View | None, View | None]
    parts: tuple[Step, ...]
    mask: tuple[int, ...] = ()

    @property
    def reads(self) -> list[str]:
        """Its inputs and epilogue's, and what the scores' epilogue reads (a position bias)."""
        return [*super().reads, *self.parts[0].epilogue.tensors]


@dataclass(frozen=True, kw_only=True)
class LayerNorm(Step):
    """Over the last axis; inputs (x, gamma, beta)."""

    epsilon: float


@dataclass(frozen=True, kw_only=True)
class Broadcast(Step):
    """A function of one to three tensors or constants (``FUNCTIONS``), broadcast as numpy
    does; ``strides``: each input's along the output's RANK axes ``dims``.
    """

    function: str
    dims: tuple[int, ...]
    strides: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, kw_only=True)
class IndexMap(Step):
    """Every output element read from one input element (``layout``): transpose, slice,
    split, gather with constant indices, expand, tile, pad.
    """

    axes: tuple[layout.Axis, ...]
    mode: str = "plain"  # plain, tile, constant, edge, reflect
    value: float = 0.0  # what a constant pad reads
    table: tuple[int, ...] = ()  # gathered coordinates along table_axis
    table_axis: int = -1


@dataclass(frozen=True, kw_only=True)
class Reduce(Step):
    """A reduction (``REDUCTIONS``) over ``reduced`` sizes, RANK axes each: the output's
    dims (1 on reduced axes) and the input's strides.
    """

    function: str
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    reduced: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class Resize(Step):
    """Nearest or bilinear resize of the last two axes; ``scales`` output over input."""

    linear: bool
    coordinates: str  # ONNX's coordinate_transformation_mode
    nearest: str  # ONNX's nearest_mode
    scales: tuple[float, float]


@dataclass(frozen=True, kw_only=True)
class ConvTranspose(Step):
    """A 2-D transposed convolution; inputs (x, weight[, bias])."""

    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int]  # top, left
    dilations: tuple[int, int]
    groups: int


@dataclass(frozen=True, kw_only=True)
class Alias(Step):
    """The output is the input's buffer, reshaped."""


@dataclass
class Graph:
    name: str
    dtype: str  # what the model stores its weights as (``model_dtype``): float32 or float16
    steps: list[Step]
    shapes: dict[str, tuple[int, ...]]
    constants: dict[str, np.ndarray]
    inputs: list[str]  # the tensors a caller feeds
    outputs: list[str]
    #: Element types other than the run's storage, by tensor or constant: a quantized model's
    #: uint8 tensors and its int8 layers' operands (int8 weights, int32 biases, float32 scales).
    typed: dict[str, str] = field(default_factory=dict)
