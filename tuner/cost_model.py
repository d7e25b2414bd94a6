"""A learned cost model: which configs are worth measuring, for any workload and device.

Features are computed for many configs at once from the search space itself (its parameters,
derived values, launch geometry and the constraints that name device limits), plus the
workload's shape and the device's size, so one model serves every shape and device a kernel
version was tuned on. The target is log(seconds per flop): scale-free across shapes, so what a
config is good at carries over. Estimators follow scikit-learn's fit/predict, plus ``rank``.
"""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Self

import numpy as np
from numpy.typing import NDArray
from sklearn.ensemble import RandomForestRegressor
from xgboost import Booster, DMatrix, train

from octune.catalogue.expr import Value
from octune.catalogue.limits import LIMIT_NAMES, device_limits
from octune.catalogue.space import SearchSpace

#: Device description fields (DeviceInfo.to_dict() and the store's device rows share them).
DEVICE_FIELDS = ("compute_units", "max_work_group_size", "local_mem_size", "global_mem_size")
#: Failed configs train as this many times slower than the slowest working one (``targets``);
#: the search's estimators put them level with the flattened slow half (``relative``), and the
#: search learns where configs fail from ``FailureModel``.
FAILURE_PENALTY = math.e
#: Regression targets slower than this quantile of their context are clipped to it.
CLIP_QUANTILE = 0.5
#: Threads for scoring: trees score rows independently, so any count gives the same numbers
#: (training stays on one: on a few hundred rows threads cost more than they save).
SCORING_THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


class Record(Protocol):
    """One stored measurement in its context: what transfer learning trains on."""

    @property
    def device(self) -> Mapping[str, Any]: ...

    @property
    def workload(self) -> Mapping[str, Any]: ...

    @property
    def config(self) -> Mapping[str, int]: ...

    @property
    def time_s(self) -> float | None: ...

    @property
    def flops(self) -> int: ...


@dataclass(frozen=True)
class Context:
    """Where configs run: the device (DeviceInfo.to_dict() fields) and the workload's shape.

    An empty context is allowed: its features are NaN, which the tree models treat as missing.
    """

    device: Mapping[str, Any] = field(default_factory=dict)
    shape: Mapping[str, int] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        """Groups measurements that are directly comparable: same device, same shape."""
        shape = ",".join(f"{name}={value}" for name, value in sorted(self.shape.items()))
        return str(self.device.get("fingerprint", "")), shape

    def limits(self) -> dict[str, int]:
        """Device limits for the space's expressions; work-item sizes default to the work-group
        limit where only the store's device row is known (it does not keep them).
        """
        device = self.device
        group = int(device.get("max_work_group_size", 0) or 0)
        sizes = list(device.get("max_work_item_sizes") or ())
        return device_limits(
            max_work_group_size=group,
            max_work_item_sizes=(sizes + [group] * 3)[:3],
            local_mem_size=int(device.get("local_mem_size", 0) or 0),
            compute_units=int(device.get("compute_units", 0) or 0),
            global_mem_size=int(device.get("global_mem_size", 0) or 0),
            platform_name=str(device.get("platform_name", "")),
            extensions=str(device.get("extensions", "")),
        )


class Features:
    """Turns configs of one space, in a context, into a float matrix with named columns."""

    def __init__(self, space: SearchSpace) -> None:
        from octune.catalogue.registry import families  # the registry imports this module's users

        self.space = space
        family = families().get(space.problem)
        self._shape_rules = None if family is None else family.shape_rules
        derived = set(space.derived_names)
        tunable = derived | set(space.parameter_names)
        # "X <= limit" style constraints: X / limit says how close a config runs to the device.
        self.ratios: tuple[tuple[str, str], ...] = tuple(
            sorted(
                {
                    (name, limit)
                    for expression in space.constraints
                    for limit in expression.names & set(LIMIT_NAMES)
                    for name in expression.names & tunable
                }
            )
        )
        shaped = set(space.shape_names)  # derived values computed from the problem's sizes
        for name, expression in space.derived:
            if expression.names & shaped:
                shaped.add(name)
        dims = range(len(space.launch_local))
        self.names: tuple[str, ...] = (
            *space.parameter_names,
            *space.derived_names,
            *(f"{name}/{limit}" for name, limit in self.ratios),
            *(f"local_{i}" for i in dims),
            *(f"groups_{i}" for i in dims),
            "work_group_size",
            "groups",
            "groups_per_unit",
            "last_wave_fill",
            *(f"shape_{name}" for name in sorted(s.lower() for s in space.shape_names)),
            *(f"device_{name}" for name in DEVICE_FIELDS),
            "device_gpu",
        )
        by_workload = {
            *shaped,
            *(f"{name}/{limit}" for name, limit in self.ratios if name in shaped),
            *(f"groups_{i}" for i in dims),
            *("groups", "groups_per_unit", "last_wave_fill"),
            *(f"shape_{name}" for name in sorted(s.lower() for s in space.shape_names)),
        }
        #: Columns that describe the config on the device whatever the workload: what decides
        #: whether a config builds and launches (``FailureModel``).
        self.config_columns = np.array([name not in by_workload for name in self.names])

    def matrix(self, configs: NDArray[np.int64], context: Context) -> NDArray[np.float64]:
        """One row per config (columns in ``space.parameter_names`` order)."""
        space = self.space
        count = len(configs)
        limits = context.limits()
        shape = self._shape_variables(context.shape)
        env: dict[str, Value] = {**limits, **shape}
        env.update((name, configs[:, i]) for i, name in enumerate(space.parameter_names))
        columns: list[NDArray[Any]] = [configs[:, i] for i in range(configs.shape[1])]
        for name, expression in space.derived:
            env[name], _ = expression.evaluate_masked(env)
            columns.append(env[name])  # type: ignore[arg-type]
        with np.errstate(divide="ignore", invalid="ignore"):
            columns.extend(
                np.asarray(env[name], dtype=float) / (limits[limit] or np.nan)
                for name, limit in self.ratios
            )
            columns.extend(self._launch(env, shape, limits["compute_units"]))
        shape_columns = [shape.get(name.upper(), math.nan) for name in sorted(space.shape_names)]
        device = context.device
        device_columns = [float(device.get(name) or math.nan) for name in DEVICE_FIELDS]
        gpu = device.get("device_type")
        constants = [*shape_columns, *device_columns, math.nan if gpu is None else gpu == "gpu"]
        matrix = np.empty((count, len(self.names)), dtype=np.float64)
        for i, column in enumerate([*columns, *constants]):
            matrix[:, i] = column
        return matrix

    def _shape_variables(self, shape: Mapping[str, int]) -> dict[str, int]:
        """The shape's keys, upper case, plus its family's derived variables (conv2d's OH and
        OW), which launch sizes name: without them the launch columns would be unknown.
        """
        variables = {name.upper(): int(value) for name, value in shape.items()}
        rules = self._shape_rules
        if rules is None or not set(rules.problem.keys) <= shape.keys():
            return variables
        keyed = tuple(int(shape[key]) for key in rules.problem.keys)
        if rules.why_impossible(keyed) is not None:
            return variables
        return dict(zip(rules.problem.variables, rules.values(keyed), strict=True))

    def _launch(
        self, env: dict[str, Value], shape: Mapping[str, int], units: int
    ) -> list[NDArray[Any] | float]:
        """Work-group size, group counts and how evenly the groups fill the compute units."""
        local = [
            np.asarray(e.evaluate_masked(env)[0], dtype=float) for e in self.space.launch_local
        ]
        size = np.prod(np.broadcast_arrays(*local), axis=0)  # a literal size is a scalar
        if not shape.keys() >= self.space.shape_names:
            unknown = [math.nan] * len(local)
            return [*local, *unknown, size, math.nan, math.nan, math.nan]
        groups_each = [
            np.asarray(g.evaluate_masked(env)[0], dtype=float) / lo
            for g, lo in zip(self.space.launch_global, local, strict=True)
        ]
        groups = np.prod(np.broadcast_arrays(*groups_each), axis=0)
        units = units or math.nan
        waves = np.ceil(groups / units)
        return [*local, *groups_each, size, groups, groups / units, groups / (waves * units)]


def log_times(times_s: Sequence[float | None], flops: Sequence[int]) -> NDArray[np.float64]:
    """log(seconds per flop); NaN for failures (None/NaN), which the estimators flatten with
    the slow half (``relative``) or rank last."""
    times = np.array([math.nan if t is None else t for t in times_s], dtype=float)
    work = np.maximum(np.asarray(flops, dtype=float), 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.log(times / work)
    y[~np.isfinite(y)] = math.nan
    return y


def targets(times_s: Sequence[float | None], flops: Sequence[int]) -> NDArray[np.float64]:
    """log(seconds per flop), failures set FAILURE_PENALTY above the slowest."""
    return _penalised(log_times(times_s, flops))


def _penalised(y: NDArray[np.float64]) -> NDArray[np.float64]:
    """A copy of log times with failures (NaN) FAILURE_PENALTY above the slowest (all 0 when
    every one failed).
    """
    failed = np.isnan(y)
    if failed.all():
        return np.zeros(len(y))
    filled = y.copy()
    filled[failed] = np.nanmax(y) + math.log(FAILURE_PENALTY)
    return filled


def relative(y: NDArray[np.float64], groups: NDArray[np.int64]) -> NDArray[np.float64]:
    """Targets relative to their context's median, the slow half and failures (NaN) flattened
    to 0: how fast a device or shape is overall, or how slow a bad config is, does not matter;
    the regression spends its trees on ordering the fast configs of each context. (Failures
    above the slow half: synthetic a needed 68 instead of 62 measurements to 95 %.)
    """
    scaled = np.empty_like(y)
    for group in np.unique(groups):
        rows = groups == group
        filled = _penalised(y[rows])  # failures count as the slowest for the median
        scaled[rows] = np.minimum(filled - np.quantile(filled, CLIP_QUANTILE), 0.0)
    return scaled


# --- estimators ---------------------------------------------------------------------------


class CostModel(ABC):
    """fit on (features, log time), predict a score where lower is faster, rank best first."""

    name: ClassVar[str]

    def __init__(self, seed: int | None = None) -> None:
        self.seed = 0 if seed is None else seed % (2**31)

    def fit(
        self,
        x: NDArray[np.float64],
        y: NDArray[np.float64],
        *,
        groups: NDArray[np.int64] | None = None,
        weight: NDArray[np.float64] | None = None,
    ) -> Self:
        """``y``: log(seconds per flop), NaN for a failed config; ``groups`` labels rows of the
        same context: only their order within it matters.
        """
        groups = np.zeros(len(y), dtype=np.int64) if groups is None else groups
        weight = np.ones(len(y)) if weight is None else weight
        self._fit(x, y, groups, weight)
        return self

    @abstractmethod
    def _fit(
        self,
        x: NDArray[np.float64],
        y: NDArray[np.float64],
        groups: NDArray[np.int64],
        weight: NDArray[np.float64],
    ) -> None: ...

    @abstractmethod
    def predict(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        """A score per row; lower means faster (not necessarily log seconds)."""

    def rank(self, x: NDArray[np.float64]) -> NDArray[np.int64]:
        """Row indices, predicted fastest first (stable, so ties keep their order)."""
        return np.argsort(self.predict(x), kind="stable")

    def _boost(self, data: DMatrix, objective: str) -> Booster:
        """The trees both XGBoost models grow: small, fast, seeded. ``xgboost.train`` on a plain
        DMatrix grows exactly the trees the scikit-learn wrappers did, without the wrappers'
        QuantileDMatrix set-up, which took most of a refit on small data.
        """
        parameters = {
            "objective": objective,
            "max_depth": 5,
            "learning_rate": 0.15,
            "subsample": 0.8,
            "colsample_bytree": 0.8,
            "tree_method": "hist",
            "nthread": 1,
            "seed": self.seed,
        }
        booster = train(parameters, data, num_boost_round=100)
        booster.set_param({"nthread": SCORING_THREADS})
        return booster


class XGBoostRegression(CostModel):
    """Gradient-boosted trees regressing log(seconds per flop), slow tail clipped."""

    name = "xgb-regression"

    def _fit(
        self,
        x: NDArray[np.float64],
        y: NDArray[np.float64],
        groups: NDArray[np.int64],
        weight: NDArray[np.float64],
    ) -> None:
        data = DMatrix(x, relative(y, groups), weight=weight, nthread=1)
        self.booster = self._boost(data, "reg:squarederror")

    def predict(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        return self.booster.inplace_predict(x).astype(float)


class XGBoostRanking(CostModel):
    """Gradient-boosted trees with a pairwise ranking objective within each context: only the
    order of configs is learned, so shapes and devices of very different speed mix freely.
    """

    name = "xgb-rank"
    LEVELS = 16  # relevance grades: quantiles of speed within a context

    def _fit(
        self,
        x: NDArray[np.float64],
        y: NDArray[np.float64],
        groups: NDArray[np.int64],
        weight: NDArray[np.float64],
    ) -> None:
        order = np.argsort(groups, kind="stable")  # XGBoost wants each query's rows together
        x, y, groups, weight = x[order], y[order], groups[order], weight[order]
        labels = np.zeros(len(y))
        slowness = np.nan_to_num(y, nan=np.inf)  # failures rank below the slowest
        for group in np.unique(groups):
            rows = groups == group
            ranks = np.argsort(np.argsort(-slowness[rows], kind="stable"), kind="stable")
            labels[rows] = np.floor(ranks * self.LEVELS / rows.sum())
        # XGBoost weights whole queries in ranking: each context gets its rows' mean weight.
        query_weight = np.array([weight[groups == g].mean() for g in np.unique(groups)])
        data = DMatrix(x, labels, weight=query_weight, qid=groups, nthread=1)
        self.booster = self._boost(data, "rank:pairwise")

    def predict(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        return -self.booster.inplace_predict(x).astype(float)


class RandomForest(CostModel):
    """scikit-learn's random forest on the same clipped targets: the baseline to beat."""

    name = "forest"

    def _fit(
        self,
        x: NDArray[np.float64],
        y: NDArray[np.float64],
        groups: NDArray[np.int64],
        weight: NDArray[np.float64],
    ) -> None:
        self.model = RandomForestRegressor(
            n_estimators=60, max_features=0.5, n_jobs=1, random_state=self.seed
        )
        self.model.fit(np.nan_to_num(x, nan=-1.0), relative(y, groups), sample_weight=weight)

    def predict(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        return self.model.predict(np.nan_to_num(x, nan=-1.0)).astype(float)


class FailureModel:
    """Whether a config fails to build or launch, from the config's columns alone.

    A config whose work-group needs more registers than the device has fails at every shape,
    so this classifier learns from the failures of every shape and device in the history, and
    sees no shape column: the time model, which does, can blame a run of failures at a new
    shape on the shape, and keep proposing the same failing family (live at 4096³ on the H100,
    29 launch failures in a row from a history of smaller shapes; benchmarks/RESULTS.md).
    """

    def __init__(self, columns: NDArray[np.bool_], seed: int | None = None) -> None:
        self.columns = columns
        self.seed = 0 if seed is None else seed % (2**31)
        self.booster: Booster | None = None

    def fit(
        self, x: NDArray[np.float64], failed: NDArray[np.bool_], weight: NDArray[np.float64]
    ) -> Self:
        """Learns only when there are both failures and successes to tell apart."""
        self.booster = None
        if failed.any() and not failed.all():
            data = DMatrix(x[:, self.columns], failed.astype(float), weight=weight, nthread=1)
            parameters = {
                "objective": "binary:logistic",
                "max_depth": 4,
                "learning_rate": 0.3,
                "tree_method": "hist",
                "nthread": 1,
                "seed": self.seed,
            }
            self.booster = train(parameters, data, num_boost_round=30)
            self.booster.set_param({"nthread": SCORING_THREADS})
        return self

    def likely_to_fail(self, x: NDArray[np.float64]) -> NDArray[np.bool_]:
        if self.booster is None:
            return np.zeros(len(x), dtype=bool)
        return self.booster.inplace_predict(x[:, self.columns]) > 0.5


MODELS: dict[str, type[CostModel]] = {
    model.name: model for model in (XGBoostRegression, XGBoostRanking, RandomForest)
}
