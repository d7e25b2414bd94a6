"""The outcome of measuring one candidate: what the store records and strategies learn from."""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, get_args

Config = Mapping[str, int]
# What "best" means: the shortest run, the fewest joules per run, or the smallest
# energy-delay product (joules x seconds), which weighs both.
Objective = Literal["time", "energy", "edp"]
OBJECTIVES: tuple[str, ...] = get_args(Objective)
#: The strategy a session records when it re-measures a search's top configs (``session.py``).
CONFIRM_STRATEGY = "confirm"


def config_key(config: Config) -> str:
    """The canonical text of a config, so a config is always stored and found the same way."""
    return json.dumps({name: int(config[name]) for name in sorted(config)}, separators=(",", ":"))


# pyopencl's wrapper around a compiler's log: the API call that failed (repeated), the device
# with its address, the options. None of it says why; the log's error line does.
_WRAPPER_LINE = re.compile(r"^(cl\w+ failed:|Build on <|\(options:|Device .* failed to build)")
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
# Where in the source: a file or program name (Intel numbers each build, PoCL 3.0 names a new
# temporary file after "error: ") with line and column.
_LOCATION = re.compile(r"(?:^|(?<=^error: ))\S*?:\d+(?::\d+)*:\s+(?=\w)")


def one_line_reason(message: str) -> str:
    """The line of a build or launch failure that says why: the compiler's first error line
    without its source location, else the first line that is not pyopencl's wrapper. Failures
    of the same cause give the same line, whatever config, build or process met them.
    """
    lines = [_LOCATION.sub("", _ADDRESS.sub("", line).strip()) for line in message.splitlines()]
    lines = [line for line in lines if line]
    errors = [line for line in lines if "error" in line.lower() and not _WRAPPER_LINE.match(line)]
    others = [line for line in lines if not _WRAPPER_LINE.match(line)]
    return (errors or others or lines or ["(no message)"])[0]


# How far a wrong result was off: it differs from config to config, the cause does not.
_MAGNITUDE = re.compile(r" by \S+ x tolerance")


def failure_signature(status: str, message: str | None) -> str:
    """What tells failures of one cause from another's: "build_error: error: ...", or
    "wrong_result: output off the float64 reference" whatever the size of the error.
    """
    return f"{status}: {_MAGNITUDE.sub('', one_line_reason(message or ''))}"


class Status(StrEnum):
    OK = "ok"
    BUILD_ERROR = "build_error"
    LAUNCH_ERROR = "launch_error"
    WRONG_RESULT = "wrong_result"
    TIMEOUT = "timeout"
    CRASH = "crash"


@dataclass(frozen=True)
class Measurement:
    """One candidate's result. Failed candidates are kept too: they are data, not noise."""

    config: dict[str, int]
    status: Status
    times_s: tuple[float, ...] = ()
    flops: int = 0
    max_error: float | None = None  # largest |error| / tolerance seen in verification (< 1 passes)
    message: str = ""
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.times_s) if self.times_s else None

    @property
    def spread_s(self) -> float | None:
        """Interquartile range of the repeats: robust to the odd slow run."""
        if len(self.times_s) < 2:
            return 0.0 if self.times_s else None
        q1, _, q3 = statistics.quantiles(self.times_s, n=4, method="inclusive")
        return q3 - q1

    def score(self, objective: Objective) -> float | None:
        return score(self.median_s, self.extra, objective) if self.ok else None

    @property
    def gflops(self) -> float | None:
        median = self.median_s
        if not self.ok or not median:
            return None
        return self.flops / median / 1e9


def top_distinct(
    ranked: Sequence[tuple[float, Mapping[str, int]]], count: int, within: float
) -> list[dict[str, int]]:
    """The first ``count`` distinct configs of (score, config) pairs ranked best first, of those
    scoring at most ``within`` times the best: what a store's ``top_configs`` returns.
    """
    configs: dict[str, dict[str, int]] = {}
    for value, config in ranked:
        if value > within * ranked[0][0]:
            break
        configs.setdefault(config_key(config), dict(config))
        if len(configs) == count:
            break
    return list(configs.values())


def score(median_s: float | None, extra: Mapping[str, float], objective: Objective) -> float | None:
    """What the objective minimises; None where there is nothing to rank (a failure, or no
    energy reading for an energy objective).
    """
    if median_s is None:
        return None
    if objective == "time":
        return median_s
    energy = extra.get("energy_j")
    if energy is None:
        return None
    return energy if objective == "energy" else energy * median_s


@dataclass(frozen=True)
class BestResult:
    """The fastest passing config, with enough provenance to judge how much to trust it."""

    config: dict[str, int]
    median_s: float
    spread_s: float
    gflops: float | None
    measurement_id: int
    session_id: int
    kernel_name: str
    kernel_sha256: str
    device_fingerprint: str
    workload_key: str
    measured_at: datetime
    measured: int  # measurement rows for this device, kernel version and workload
    failed: int  # of those, the ones whose status is not "ok"


@dataclass(frozen=True)
class Failures:
    """A workload whose every measurement failed: how many, and for which reasons."""

    measured: int
    reasons: Counter[str]  # "status: reason" -> how many measurements met it

    def __str__(self) -> str:
        (reason, count), *others = self.reasons.most_common()
        more = f" ({count} of them; {len(others)} other reason(s))" if others else ""
        return f"all {self.measured} measured configs failed: {reason}{more}"


@dataclass(frozen=True)
class HistoryRecord:
    """One stored measurement in its context (satisfies ``octune.tuner.cost_model.Record``)."""

    device: dict[str, Any]
    workload: dict[str, int]
    config: dict[str, int]
    time_s: float | None  # None: the config failed
    flops: int
