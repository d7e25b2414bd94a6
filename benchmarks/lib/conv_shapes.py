"""Conv layers as the per-layer benchmarks name them (square inputs and filters, 'same'
padding), as workloads, and the kinds their ratios are summarised by.
"""

from __future__ import annotations

from dataclasses import dataclass

from octune.catalogue.family import Workload
from octune.kernels.conv2d import FAMILY as CONV2D


@dataclass(frozen=True)
class Layer:
    """A conv layer as the per-layer benchmarks list it, and as their runs' rows record it."""

    name: str
    c: int
    hw: int  # input height = width
    k: int
    rs: int  # filter height = width
    stride: int = 1
    groups: int = 1
    count: int = 1  # how many times the network runs this layer
    nhwc: int = 0  # 1: NHWC tensors (KRSC filters), the nhwc kernels; cuDNN in channels_last
    dilation: int = 1
    n: int = 1  # batch

    @property
    def pad(self) -> int:
        """'Same' padding: the output keeps the size (divided by the stride)."""
        return self.dilation * (self.rs - 1) // 2

    def workload(self) -> Workload:
        return CONV2D.workload(
            {"n": self.n, "c": self.c, "h": self.hw, "w": self.hw, "k": self.k, "r": self.rs,
             "s": self.rs, "stride": self.stride, "pad": self.pad, "dilation": self.dilation,
             "groups": self.groups, "nhwc": self.nhwc}
        )  # fmt: skip

    @property
    def kind(self) -> str:
        """What sets the layer's kernels apart: depthwise, grouped, strided, 1x1 or dense."""
        if self.groups > 1:
            return "depthwise" if self.groups == self.c == self.k else "grouped"
        if self.stride > 1:
            return "strided"
        return "1x1" if self.rs == 1 else "dense"
