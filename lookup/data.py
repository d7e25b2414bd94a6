"""What the lookup reads and returns: a device's table for one kernel version (the data a
bundle carries), a query, and the answer a runtime launches from. Standard library only, as
the lookup (``semantics``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from octune.core.errors import OctuneError
from octune.core.problem import Problem


class TableError(OctuneError):
    """A lookup table whose content is inconsistent (wrong lengths, bad launch expression)."""


class QueryError(OctuneError):
    """A query the lookup cannot answer: unknown kernel, bad shape, unsupported dtype."""


@dataclass(frozen=True)
class Entry:
    """One tuned workload's best verified config (or one model answer in ``predictions``)."""

    shape: tuple[int, ...]  # values of Problem.keys, in that order
    dtype: str
    config: tuple[int, ...]  # values of LookupTable.parameters, in that order
    time_s: float  # measured median (predicted: the model's time)
    spread_s: float  # interquartile range of the repeats (0 for predictions)
    gflops: float
    workload_key: str  # the database's workload key, for provenance and import


@dataclass(frozen=True)
class LookupTable:
    """Everything one device's lookups of one kernel version need: the data a bundle carries."""

    kernel: str
    sha256: str
    entry: str  # the OpenCL function name
    device_fingerprint: str
    problem: Problem
    parameters: tuple[str, ...]
    launch_global: tuple[str, ...]
    launch_local: tuple[str, ...]
    limits: dict[str, int]  # device limits the launch checks use
    default_config: tuple[int, ...]
    extra_build_options: tuple[str, ...]  # after the -D defines, e.g. ("-w",)
    tuned: tuple[Entry, ...]
    predictions: tuple[Entry, ...] = ()
    # Expressions of the problem's variables a shape must satisfy for this kernel to take it
    # (a depthwise kernel: GROUPS == C); the space's ``requires:``.
    requires: tuple[str, ...] = ()
    # Kernels that need scratch memory or more than one launch (split-K): the workspace's
    # float32 elements as an expression, and the launches after the entry's.
    workspace: str | None = None
    then: tuple[FollowUp, ...] = ()
    # How the kernel suits the device (``SearchSpace.fit``): 2 written for its type, 1 for any,
    # 0 for others. Of equal answers (an untuned device's defaults) the better fit wins.
    fit: int = 1
    # The element type the kernel computes in (its space's ``dtype:``): it answers no other.
    dtype: str = "float32"

    def __post_init__(self) -> None:
        """Canonical entry order (the tie-break of equal distances), then consistency checks."""
        for name in ("tuned", "predictions"):
            entries = tuple(sorted(getattr(self, name), key=lambda e: (e.dtype, e.shape)))
            object.__setattr__(self, name, entries)
        width = len(self.problem.keys)
        for entry in (*self.tuned, *self.predictions):
            if len(entry.shape) != width or len(entry.config) != len(self.parameters):
                raise TableError(
                    f"{self.kernel}: entry {entry.workload_key} has {len(entry.shape)} shape and "
                    f"{len(entry.config)} config values, not {width} and {len(self.parameters)}"
                )
        if len(self.default_config) != len(self.parameters):
            raise TableError(f"{self.kernel}: the default config has the wrong length")
        if len(self.launch_global) != len(self.launch_local) or not self.launch_local:
            raise TableError(f"{self.kernel}: launch needs as many global as local sizes")

    def entry_config(self, values: Sequence[int]) -> dict[str, int]:
        return dict(zip(self.parameters, values, strict=True))


@dataclass(frozen=True)
class FollowUp:
    """A launch after the entry's, with the same arguments (and the workspace, if any): its
    OpenCL function and size expressions, as ``LookupTable.launch_global`` and ``launch_local``.
    """

    entry: str
    launch_global: tuple[str, ...]
    launch_local: tuple[str, ...]


class FollowUpSizes(NamedTuple):
    entry: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...]


class Launch(NamedTuple):
    """A config's launches for one shape: the entry's sizes, then the follow-ups', and the
    float32 elements of workspace they share (0: none; else the last argument of each).
    """

    global_size: tuple[int, ...]
    local_size: tuple[int, ...]
    then: tuple[FollowUpSizes, ...] = ()
    workspace: int = 0


@dataclass(frozen=True)
class Query:
    """A workload to answer: ``shape`` holds the problem's keys, e.g. m, n, k, transa, transb.
    ``kernel`` names a kernel, or a problem: then every kernel of it answers and the fastest
    answer wins (``best_answer``).
    """

    kernel: str
    shape: Mapping[str, int]
    dtype: str = "float32"


@dataclass(frozen=True)
class Prediction:
    """A cost model's answer for one query: config values in ``LookupTable.parameters`` order."""

    config: tuple[int, ...]
    time_s: float
    gflops: float


class Predictor(Protocol):
    """The hook a cost model plugs in; None when it has nothing to say about the query."""

    def __call__(self, table: LookupTable, query: Query) -> Prediction | None: ...


@dataclass(slots=True)
class Answer:
    """A runtime's launch recipe, identical whether the server or a bundle answers (not frozen:
    a frozen dataclass's __init__ costs a third of a lookup).
    """

    match: str
    kernel: str
    entry: str
    kernel_sha256: str
    device_fingerprint: str
    shape: dict[str, int]
    dtype: str
    config: dict[str, int]
    defines: dict[str, int]
    build_options: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...]
    # exact: measured median; nearest: the neighbour's GFLOP/s applied to this shape's flops;
    # predicted: the model's; default: unknown (None).
    time_s: float | None
    gflops: float | None
    source: dict[str, Any] | None = field(default=None)  # the tuned workload the config is from
    # Launches after the entry's, with the same arguments plus the workspace, if any.
    then: tuple[FollowUpSizes, ...] = ()
    workspace_bytes: int = 0  # scratch the launches share, passed last to each; zero-filled once

    @property
    def estimated(self) -> bool:
        """Whether ``time_s`` and ``gflops`` are this shape's expected figures rather than its
        measured ones: a nearest answer's (the source workload's GFLOP/s at this shape's flops)
        and a predicted one's (the cost model's).
        """
        return self.match in ("nearest", "predicted")

    def to_dict(self) -> dict[str, Any]:
        return {
            "match": self.match,
            "kernel": self.kernel,
            "entry": self.entry,
            "kernel_sha256": self.kernel_sha256,
            "device_fingerprint": self.device_fingerprint,
            "shape": dict(self.shape),
            "dtype": self.dtype,
            "config": dict(self.config),
            "defines": dict(self.defines),
            "build_options": self.build_options,
            "global_size": list(self.global_size),
            "local_size": list(self.local_size),
            "time_s": self.time_s,
            "gflops": self.gflops,
            "estimated": self.estimated,
            "source": None if self.source is None else dict(self.source),
            "then": [
                {"entry": entry, "global_size": list(global_), "local_size": list(local)}
                for entry, global_, local in self.then
            ],
            "workspace_bytes": self.workspace_bytes,
        }
