"""Recorded spaces: every config of a (sub)space measured once on one device, kept as a file.

A recording lets strategies be compared offline and over many seeds: the replay runner answers
a config with its recorded result instead of building and running it. The file carries the
search space's YAML text and the device limits, so the same legal configs are enumerated again
even after the packaged space has changed, and the device fingerprint, so recordings of
different devices are never mixed up.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from numpy.typing import NDArray

from octune.catalogue.family import Workload
from octune.catalogue.registry import KernelSpec
from octune.catalogue.space import ConfigTable, SearchSpace
from octune.core.errors import OctuneError
from octune.core.results import HistoryRecord, Measurement, Status
from octune.tuner.cost_model import Context
from octune.tuner.device import DeviceInfo
from octune.tuner.measure import Runner
from octune.tuner.strategies.base import Strategy, proposals_due

FORMAT = "octune-recorded-space/1"
SHAPE_NAMES = ("M", "N", "K")


class RecordingError(OctuneError):
    """A recorded-space file that cannot be read or does not fit its own search space."""


def parse_sub_grid(items: Sequence[str]) -> dict[str, list[int]]:
    """``NAME=v1,v2`` options (as the recording scripts take them) as a values mapping."""
    values = {}
    for item in items:
        name, sep, text = item.partition("=")
        try:
            chosen = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            chosen = []
        if not sep or not chosen:
            raise RecordingError(f"sub-grid option {item!r} is not NAME=v1,v2,...; e.g. MWG=32,64")
        values[name.strip()] = chosen
    return values


def restrict(space: SearchSpace, values: Mapping[str, Sequence[int]]) -> SearchSpace:
    """The same space with fewer values for some parameters: a sub-grid worth recording whole."""
    data = yaml.safe_load(space.source_text)
    for name, chosen in values.items():
        if name not in space.parameter_names:
            raise RecordingError(
                f"cannot restrict unknown parameter {name}; "
                f"known: {', '.join(space.parameter_names)}"
            )
        allowed = next(p.values for p in space.parameters if p.name == name)
        extra = sorted(set(chosen) - set(allowed))
        if extra or not chosen:
            raise RecordingError(
                f"{name} values {list(chosen)} are not a non-empty subset of {list(allowed)}; "
                "pick from the space's own values"
            )
        data["parameters"][name]["values"] = [int(v) for v in chosen]
    text = yaml.safe_dump(data, sort_keys=False)
    return SearchSpace.from_yaml(text, space.origin, space.shape_names)


@dataclass
class RecordedSpace:
    """Measured configs of one kernel version, workload and device, failures included."""

    kernel: dict[str, str]  # name, sha256 (template + space), space_source
    device: dict[str, Any]  # DeviceInfo.to_dict(): fingerprint, limits, name ...
    limits: dict[str, int]
    workload: dict[str, Any]  # problem, shape, dtype, flops
    values: dict[str, list[int]]  # the recorded sub-grid: parameter -> values kept
    parameters: tuple[str, ...]
    configs: NDArray[np.int64]  # one row per recorded config, columns in `parameters` order
    status: list[str]
    time_s: NDArray[np.float64]  # NaN where the config failed
    notes: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.configs)

    @classmethod
    def of(
        cls,
        kernel: KernelSpec,
        device: DeviceInfo,
        workload: Workload,
        space: SearchSpace,
        configs: Sequence[Sequence[int]],
        status: list[str],
        time_s: Sequence[float],
        notes: dict[str, Any],
    ) -> RecordedSpace:
        """A recording of ``space`` (the whole kernel space or a sub-grid of it), with the
        kernel's sources, the device and the workload described the way ``load`` reads them.
        """
        return cls(
            kernel={
                "name": kernel.name,
                "sha256": kernel.sha256,
                "source": kernel.source,
                "space_source": kernel.space.source_text,
            },
            device=device.to_dict(),
            limits=device.limits,
            workload={
                "problem": workload.problem,
                "shape": workload.shape,
                "dtype": workload.dtype,
                "flops": workload.flops,
            },
            values={p.name: list(p.values) for p in space.parameters},
            parameters=space.parameter_names,
            configs=np.asarray(configs, dtype=np.int64).reshape(-1, len(space.parameters)),
            status=status,
            time_s=np.asarray(time_s, dtype=float),
            notes=notes,
        )

    def space(self) -> SearchSpace:
        """The recorded sub-grid as a space, from the YAML text stored in the file."""
        full = SearchSpace.from_yaml(self.kernel["space_source"], "recorded space", SHAPE_NAMES)
        return restrict(full, self.values)

    def table(self) -> ConfigTable:
        """The recorded configs as a ConfigTable of the recorded space, in table order."""
        table = self.space().enumerate(self.limits)
        rows = self.table_rows(table)
        return table.take(np.sort(rows))

    def table_rows(self, table: ConfigTable) -> NDArray[np.int64]:
        """Row of each recorded config in ``table``; every one must be legal there."""
        rows = np.empty(len(self), dtype=np.int64)
        for i, row in enumerate(self.configs.tolist()):
            found = table.index(dict(zip(self.parameters, row, strict=True)))
            if found is None:
                raise RecordingError(
                    f"recorded config {dict(zip(self.parameters, row, strict=True))} is not "
                    "legal in the recorded space; the file is corrupt or hand-edited"
                )
            rows[i] = found
        return rows

    def times_for(self, table: ConfigTable) -> NDArray[np.float64]:
        """Recorded time of each row of ``table`` (NaN: failed or not recorded)."""
        times = np.full(len(table), np.nan)
        times[self.table_rows(table)] = self.time_s
        return times

    @property
    def context(self) -> Context:
        return Context(self.device, self.workload["shape"])

    def records(self) -> list[HistoryRecord]:
        """The recording as stored-measurement records, to warm-start a cost model with."""
        shape = {name: int(value) for name, value in self.workload["shape"].items()}
        flops = int(self.workload.get("flops", 0))
        return [
            HistoryRecord(
                device=self.device,
                workload=shape,
                config=dict(zip(self.parameters, row, strict=True)),
                time_s=None if math.isnan(time_s) else time_s,
                flops=flops,
            )
            for row, time_s in zip(self.configs.tolist(), self.time_s.tolist(), strict=True)
        ]

    @property
    def best_s(self) -> float:
        return float(np.nanmin(self.time_s))

    def save(self, path: str | Path) -> None:
        """Write gzip-compressed JSON atomically, so a killed recorder leaves the last file."""
        path = Path(path)
        payload = {
            "format": FORMAT,
            "kernel": self.kernel,
            "device": self.device,
            "limits": self.limits,
            "workload": self.workload,
            "values": self.values,
            "parameters": list(self.parameters),
            "configs": self.configs.tolist(),
            "status": self.status,
            "time_s": [None if math.isnan(t) else t for t in self.time_s.tolist()],
            "notes": self.notes,
        }
        temporary = path.with_suffix(path.suffix + ".tmp")
        text = json.dumps(payload, separators=(",", ":")).encode()
        with gzip.GzipFile(temporary, "wb", compresslevel=9, mtime=0) as handle:  # reproducible
            handle.write(text)
        os.replace(temporary, path)

    @classmethod
    def load(cls, path: str | Path) -> RecordedSpace:
        path = Path(path)
        try:
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, EOFError, ValueError) as error:
            raise RecordingError(
                f"cannot read recorded space {path}: {error}; pass a .json.gz file written by "
                "benchmarks/record_space.py"
            ) from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise RecordingError(f"{path} is not a recorded space (expected format {FORMAT})")
        parameters = tuple(data["parameters"])
        configs = np.asarray(data["configs"], dtype=np.int64).reshape(-1, len(parameters))
        return cls(
            kernel=data["kernel"],
            device=data["device"],
            limits={name: int(value) for name, value in data["limits"].items()},
            workload=data["workload"],
            values={name: list(v) for name, v in data["values"].items()},
            parameters=parameters,
            configs=configs,
            status=list(data["status"]),
            time_s=np.array([math.nan if t is None else t for t in data["time_s"]], dtype=float),
            notes=data.get("notes", {}),
        )


class ReplayRunner:
    """A Runner that answers from a recording: no device, no build, the recorded result."""

    def __init__(self, recorded: RecordedSpace) -> None:
        self.recorded = recorded
        self._results = {
            tuple(row): (status, time_s)
            for row, status, time_s in zip(
                recorded.configs.tolist(), recorded.status, recorded.time_s.tolist(), strict=True
            )
        }
        self.flops = int(recorded.workload.get("flops", 0))

    def measure(self, config: Mapping[str, int]) -> Measurement:
        key = tuple(int(config[name]) for name in self.recorded.parameters)
        found = self._results.get(key)
        if found is None:
            raise RecordingError(f"config {dict(config)} was not recorded; replay only those")
        status, time_s = found
        config = dict(zip(self.recorded.parameters, key, strict=True))
        if status != Status.OK.value:
            return Measurement(config, Status(status), flops=self.flops, message="replayed")
        return Measurement(config, Status.OK, times_s=(time_s,), flops=self.flops)


def replay(
    strategy: Strategy, runner: Runner, budget: int, window: int = 1, stop_s: float = 0.0
) -> list[float]:
    """Run a strategy against a recording: recorded times in measurement order (NaN: failed).
    Stops early once a time of at most ``stop_s`` (the recorded best) has been measured.

    ``window`` candidates are kept in flight, as a session's pipeline keeps its window of them
    (which starts at 4 and widens up to twice its builders while the device waits for builds):
    proposals come in batches of half a window, made while the other half is still unmeasured.
    1 proposes each candidate after the last result.
    """
    table = strategy.table
    in_flight: deque[int] = deque()
    trace: list[float] = []
    best = math.inf
    while best > stop_s:
        count = min(proposals_due(window, len(in_flight)), budget - len(trace) - len(in_flight))
        if count > 0:
            in_flight.extend(strategy.propose(count))
        if not in_flight:
            break
        row = in_flight.popleft()
        measurement = runner.measure(table.config(row))
        strategy.observe(row, measurement)
        trace.append(measurement.median_s if measurement.ok else math.nan)
        best = min(best, measurement.median_s or math.inf)
    return trace


def to_reach(trace: Sequence[float], best_s: float, fraction: float) -> int | None:
    """Measurements until one ran within ``fraction`` of the best speed (None: never)."""
    times = np.asarray(trace, dtype=float)
    hits = np.flatnonzero(times <= best_s / fraction * (1 + 1e-12))
    return int(hits[0]) + 1 if len(hits) else None
