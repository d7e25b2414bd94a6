"""Model-guided search: measure what a learned cost model predicts fastest, retrain, repeat.

Each round scores a candidate pool (the whole unmeasured space when it is small enough, else
a large random sample plus a model-guided hill climb from the best configs), proposes the
predicted best with a share of exploration among the runners-up, and retrains as results
arrive. Stored measurements of the same kernel version (other shapes of similar work, other
devices) warm-start the model, so the first proposals of a new shape already come from what was
learned before.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

import numpy as np
from numpy.typing import NDArray
from scipy.stats import spearmanr

from octune.catalogue.space import ConfigTable
from octune.core.errors import OctuneError
from octune.core.results import Measurement
from octune.tuner.cost_model import (
    MODELS,
    Context,
    CostModel,
    FailureModel,
    Features,
    Record,
    log_times,
    targets,
)
from octune.tuner.strategies.base import Strategy

#: Score every unmeasured config when the space has at most this many; else sample this many.
#: Scoring is most of a refit's cost, but a 20,000 sample plus the climb searched worse on the
#: 100,814 H100 GEMM configs (benchmarks/model_overhead.py) for a quarter less time per round.
POOL = 300_000
#: Random configs measured before the model is trusted (when no history warm-starts it).
INITIAL = 12
#: Share of proposals drawn at random from the predicted top instead of taken in order.
EXPLORE = 0.2
#: Exploration picks among the predicted best this share of the pool (at least a few).
EXPLORE_TOP = 0.05
#: Weights of training rows: this shape on this device, other shapes on it, other devices.
WEIGHT_OWN, WEIGHT_SAME_DEVICE, WEIGHT_OTHER_DEVICE = 4.0, 1.0, 0.5
#: ... and this shape's results weigh, in all, at least this share of the whole history's
#: weight: a history of very different shapes must not outvote the shape's own results for
#: long (benchmarks/RESULTS.md: with transfer, 4096³ from two skinny shapes needed 62 instead
#: of 103 measurements to 95 %).
OWN_SHARE = 1.0
#: Stored measurements used per (device, shape) context, sampled when there are more, and in
#: all, taken from the contexts most like the target first (same device, then nearest shape):
#: refits stay cheap on a device tuned for many shapes, and far shapes, whose fast configs
#: mislead the most, are the ones left out.
HISTORY_PER_CONTEXT, HISTORY_ROWS = 1000, 4000
#: Shapes with over 2**MAX_WORK_OCTAVES times more or less work (the product of the problem
#: sizes) are left out of the history: their fast configs suit another occupancy of the device,
#: and no weight made them harmless (on the H100 sub-grid, 4096³ with both skinny shapes as
#: history needed 50 measurements to 95 % instead of 24; without the one 9 octaves away, 24,
#: at a cutoff of 4 or 6). 6, not 4: live at 4096³ with 55 tuned shapes as history, 4 octaves
#: kept only 8 thin shapes, each tuned briefly, and 10 of 12 seeds reached CLBlast's level
#: within 150 measurements (median 96.5); 6 adds 1024³ and 11 more shapes, and 11 of 12 did
#: (median 72; benchmarks/RESULTS.md).
MAX_WORK_OCTAVES = 6.0
#: Once the shape has this many results, the history must rank them at least this well
#: (Spearman's rho of a model of the history alone against the measured speeds) to stay in
#: training; otherwise the model learns from the shape's own results only. Live on the H100 at
#: 4096³, with 55 other tuned shapes as history, the model had not reached CLBlast's level
#: after 150 measurements in two seeds, while from scratch it did after 56 and 85
#: (benchmarks/RESULTS.md).
TRANSFER_CHECK, MIN_TRANSFER_RHO = 12, 0.3
#: Retrain once the results have grown by this share since the last fit (after every result
#: up to 20): refits grow logarithmically with the budget. 0.2 halved the early refits but
#: needed 85 instead of 62 measurements to 95 % on synthetic_a (median of 20 seeds).
REFIT_GROWTH = 0.1
#: Hill-climbing rounds from the best configs when the space is too large to score whole.
CLIMB_ROUNDS, CLIMB_STARTS = 3, 16
#: The fastest configs of this many nearest other shapes tuned on the same device are measured
#: first. They are what a lookup answers this shape with until it is tuned, so the shape's own
#: best is never worse than the borrowed answer: on the H100, ResNet-50 warm-started from
#: SqueezeNet's and MobileNet's layers ran at 1.59 ms on borrowed answers and at 2.35 ms after
#: 3 minutes of tuning its own layers, whose first few candidates each had not found as good.
BORROWED = 3


#: Features, log times (NaN: failed), context groups (0: this very shape) and weights of stored
#: measurements.
HistoryMatrix = tuple[
    NDArray[np.float64], NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]
]


class ModelSearch(Strategy):
    name = "model"
    learns_from_history = True  # the session passes ``history=``, ``target=`` and ``first=``

    def __init__(
        self,
        table: ConfigTable,
        *,
        seed: int | None = None,
        skip: Collection[int] = (),
        history: Sequence[Record] = (),
        target: Context | None = None,
        model: str = "xgb-regression",
        first: Sequence[int] = (),
        default: int | None = None,
        starts: Sequence[int] = (),
        initial: int = INITIAL,
        explore: float = EXPLORE,
        pool: int = POOL,
    ) -> None:
        """``history``: stored measurements of this kernel version to warm-start from;
        ``target``: the device and shape being tuned, needed to relate history to it;
        ``first``: rows to measure before any other (``session.base_tiles``); ``default``: the
        space's default row, measured right after the nearest shape's fastest config (what a
        lookup answers an untuned shape with: the one, else the other); ``starts``: rows of
        configs that run well on devices of this type (``catalogue.starts``), measured after
        the borrowed ones, or, where this device has tuned no other shape, first: the default
        (a space's first legal config, its smallest tiles) is slow on a GPU at any size, and
        a short first turn may measure one candidate (on the H200, 5.5 x the best tile at
        1500x2048x512, which then cost the kernel its share of the second round);
        ``pool``: most configs scored per refit (a larger space is sampled and climbed).
        """
        super().__init__(table, seed=seed, skip=skip)
        if model not in MODELS:
            raise OctuneError(f"unknown cost model '{model}': choose one of {', '.join(MODELS)}")
        if history and target is None:
            raise OctuneError("model search got history but no target context to relate it to")
        self.rng = np.random.default_rng(seed)
        self.features = Features(table.space)
        self.target = target or Context()
        self.model_name = model
        self.initial = initial
        self.explore = explore
        self.pool = pool
        self.proposed = np.zeros(len(table), dtype=bool)
        self.proposed[list(self.skip)] = True
        self.rows: list[int] = []
        self.times: list[float | None] = []
        self.flops: list[int] = []
        by_context = self._by_context(history)
        nearest_first = self._nearest_first(by_context)
        self.history, self.failure_history = self._history_matrix(by_context, nearest_first)
        self.model: CostModel | None = None
        self.failures = FailureModel(self.features.config_columns, seed=seed)
        self._history_model: CostModel | None = None
        self.uses_history = bool((self.history[2] != 0).any())  # other shapes or devices
        self._trained_on = -1
        self._ranking: NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self.fits = 0
        self._table_x: NDArray[np.float64] | None = None
        borrowed = self._borrowed_rows(nearest_first)
        default_row = [] if default is None else [default]
        if borrowed:
            order = [*first, borrowed[0], *default_row, *borrowed[1:], *starts]
        else:  # nothing tuned here yet: the type's starts, better than the default's tiles
            order = [*first, *starts, *default_row]
        self.borrowed = list(dict.fromkeys(order))

    # -- data ------------------------------------------------------------------------------

    def _by_context(self, history: Sequence[Record]) -> dict[tuple[str, str], list[Record]]:
        """The stored measurements of this space, by (device, shape) context."""
        by_context: dict[tuple[str, str], list[Record]] = {}
        for record in history:
            if all(name in record.config for name in self.table.names):  # same space
                by_context.setdefault(Context(record.device, record.workload).key, []).append(
                    record
                )
        return by_context

    def _nearest_first(
        self, by_context: dict[tuple[str, str], list[Record]]
    ) -> list[tuple[tuple[str, str], list[Record]]]:
        """The contexts of shapes of like work, the most like the target's first."""
        alike = [c for c in by_context.items() if self._work_octaves(c[1][0]) <= MAX_WORK_OCTAVES]
        return sorted(alike, key=lambda item: self._distance(item[1][0]))

    def _history_matrix(
        self,
        by_context: dict[tuple[str, str], list[Record]],
        nearest_first: list[tuple[tuple[str, str], list[Record]]],
    ) -> tuple[HistoryMatrix, tuple[NDArray[np.float64], NDArray[np.bool_]]]:
        """Features, log times, context groups and weights of the stored measurements of shapes
        like the target's; and features and failures of every shape's, for the failure model.
        """
        target_key = self.target.key
        parts, room = [], HISTORY_ROWS
        for group, (key, records) in enumerate(nearest_first, start=1):
            if room <= 0:
                break
            if len(records) > min(HISTORY_PER_CONTEXT, room):
                keep = self.rng.choice(len(records), min(HISTORY_PER_CONTEXT, room), replace=False)
                records = [records[i] for i in sorted(keep)]
            room -= len(records)
            x, y = self._records_matrix(records)
            if key == target_key:  # an earlier session on this very shape: own data
                group, weight = 0, WEIGHT_OWN
            elif key[0] == target_key[0]:
                weight = WEIGHT_SAME_DEVICE
            else:
                weight = WEIGHT_OTHER_DEVICE
            parts.append((x, y, np.full(len(y), group), np.full(len(y), weight)))
        # Whether a config fails does not depend on the shape: every shape teaches it (evenly
        # spaced records, up to HISTORY_PER_CONTEXT of each).
        every = [
            self._records_matrix(records[:: math.ceil(len(records) / HISTORY_PER_CONTEXT)])
            for records in by_context.values()
        ]
        empty = np.empty((0, len(self.features.names)))
        failures = (
            np.concatenate([empty, *(x for x, _ in every)]),
            np.concatenate([np.empty(0, dtype=bool), *(np.isnan(y) for _, y in every)]),
        )
        if not parts:
            return (empty, np.empty(0), np.empty(0, dtype=np.int64), np.empty(0)), failures
        x, y, groups, weights = (np.concatenate(p) for p in zip(*parts, strict=True))
        return (x, y, groups.astype(np.int64), weights), failures

    def _borrowed_rows(
        self, nearest_first: list[tuple[tuple[str, str], list[Record]]]
    ) -> list[int]:
        """Rows of the fastest config of each of the ``BORROWED`` nearest other shapes tuned
        on this device (legal here, not to be skipped), nearest first.
        """
        fingerprint = self.target.device.get("fingerprint")
        rows: list[int] = []
        for key, records in nearest_first:
            if key == self.target.key or records[0].device.get("fingerprint") != fingerprint:
                continue
            timed = [r for r in records if r.time_s is not None]
            if not timed:
                continue
            row = self.table.index(min(timed, key=lambda r: r.time_s or 0.0).config)
            if row is not None and row not in rows and not self.proposed[row]:
                rows.append(row)
            if len(rows) == BORROWED:
                break
        return rows

    def _records_matrix(
        self, records: Sequence[Record]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Features and log times (NaN: failed) of stored records of one context."""
        names = self.table.names
        context = Context(records[0].device, records[0].workload)
        configs = np.array([[r.config[n] for n in names] for r in records], dtype=np.int64)
        times = log_times([r.time_s for r in records], [r.flops for r in records])
        return self.features.matrix(configs, context), times

    def _history_rows(self, *, others: bool) -> HistoryMatrix:
        """The history's rows of other shapes and devices, or those of earlier sessions on
        this very shape (group 0), which stay when the others are dropped.
        """
        keep = (self.history[2] != 0) if others else (self.history[2] == 0)
        x, y, groups, weights = self.history
        return x[keep], y[keep], groups[keep], weights[keep]

    def _distance(self, record: Record) -> tuple[bool, float]:
        """How unlike the target a record's context is: another device, then how many octaves
        apart the shapes are (Euclidean over log2 of each size; a flag counts one octave).
        """
        other_device = record.device.get("fingerprint") != self.target.device.get("fingerprint")
        octaves = sum(gap**2 for gap in self._octave_gaps(record).values())
        return other_device, math.sqrt(octaves)

    def _work_octaves(self, record: Record) -> float:
        """How many octaves more or less work (product of the problem sizes) a record's shape
        has than the target's: much of what decides how fully a launch fills the device.
        """
        sizes = {name.lower() for name in self.table.space.shape_names}
        gaps = self._octave_gaps(record)
        return abs(sum(gap for name, gap in gaps.items() if name.lower() in sizes))

    def _octave_gaps(self, record: Record) -> dict[str, float]:
        """log2 of each of the record's shape fields over the target's (+1: flags are 0/1)."""
        return {
            name: math.log2(int(record.workload.get(name, 0)) + 1) - math.log2(int(value) + 1)
            for name, value in self.target.shape.items()
        }

    def _rows_matrix(self, rows: NDArray[np.int64]) -> NDArray[np.float64]:
        """Features of some rows; a table small enough to score whole is featurised once."""
        if len(self.table) > self.pool:
            return self.features.matrix(self.table.values[rows], self.target)
        return self._table_matrix()[rows]

    def _table_matrix(self) -> NDArray[np.float64]:
        if self._table_x is None:
            self._table_x = self.features.matrix(self.table.values, self.target)
        return self._table_x

    def observe(self, row: int, measurement: Measurement) -> None:
        self.rows.append(row)
        self.times.append(measurement.median_s if measurement.ok else None)
        self.flops.append(measurement.flops)

    # -- model -----------------------------------------------------------------------------

    def _due(self) -> bool:
        """Retrain once the data has grown by REFIT_GROWTH (by one result at first)."""
        new = len(self.rows) - self._trained_on
        return new >= max(1, int(len(self.rows) * REFIT_GROWTH))

    def _fit(self) -> None:
        """Retrain, then rank a fresh pool with the new model."""
        self._train()
        self._ranking = self._rank_pool()

    def _history_ranks_own_results(self) -> bool:
        """Whether a model of the history alone orders this shape's results well enough to
        keep learning from it (undecided, and so kept, until TRANSFER_CHECK results).
        """
        if len(self.rows) < TRANSFER_CHECK:
            return True
        if self._history_model is None:
            hx, hy, hgroups, hweight = self._history_rows(others=True)
            self._history_model = MODELS[self.model_name](seed=self.seed).fit(
                hx, hy, groups=hgroups, weight=hweight
            )
        own = np.asarray(self.rows, dtype=np.int64)
        predicted = self._history_model.predict(self._rows_matrix(own))
        rho = spearmanr(predicted, targets(self.times, self.flops)).statistic
        return bool(np.isfinite(rho) and rho >= MIN_TRANSFER_RHO)

    def _train(self) -> None:
        if self.uses_history:
            self.uses_history = self._history_ranks_own_results()  # once dropped, for good
        hx, hy, hgroups, hweight = (
            self.history if self.uses_history else self._history_rows(others=False)
        )
        own = np.asarray(self.rows, dtype=np.int64)
        x = np.concatenate([hx, self._rows_matrix(own)])
        y = np.concatenate([hy, log_times(self.times, self.flops) if len(own) else np.empty(0)])
        groups = np.concatenate([hgroups, np.zeros(len(own), dtype=np.int64)])
        own_weight = max(WEIGHT_OWN, OWN_SHARE * hweight.sum() / max(len(own), 1))
        weight = np.concatenate([hweight, np.full(len(own), own_weight)])
        self.model = MODELS[self.model_name](seed=self.seed).fit(x, y, groups=groups, weight=weight)
        # Failures teach across shapes even when the history's speeds do not: every shape's.
        failed_x, failed = self.failure_history
        self.failures.fit(
            np.concatenate([failed_x, x[len(hx) :]]),
            np.concatenate([failed, np.isnan(y[len(hy) :])]),
            np.concatenate([np.ones(len(failed)), weight[len(hweight) :]]),
        )
        self._trained_on = len(self.rows)
        self.fits += 1

    def _rank_pool(self) -> NDArray[np.int64]:
        """Candidate rows, predicted fastest first, and those predicted to fail after the rest."""
        assert self.model is not None
        candidates = np.flatnonzero(~self.proposed)
        if len(self.table) <= self.pool:  # score the whole table rather than copy most of it
            x, at = self._table_matrix(), candidates  # the candidates' rows of x
        else:
            if len(candidates) > self.pool:
                chosen = np.zeros(len(self.table), dtype=bool)
                chosen[self.rng.choice(candidates, self.pool, replace=False)] = True
                chosen[self._climb()] = True
                candidates = np.flatnonzero(chosen)
            x, at = self._rows_matrix(candidates), np.arange(len(candidates))
        scores = self.model.predict(x)[at]
        failing = self.failures.likely_to_fail(x)[at]
        return candidates[np.lexsort((scores, failing))]

    def _climb(self) -> NDArray[np.int64]:
        """Rows found by hill climbing on the model from the best measured configs."""
        assert self.model is not None
        measured = sorted(
            (t, r) for r, t in zip(self.rows, self.times, strict=True) if t is not None
        )
        frontier = np.asarray([r for _, r in measured[:CLIMB_STARTS]], dtype=np.int64)
        found: set[int] = set()
        for _ in range(CLIMB_ROUNDS):
            neighbours = np.asarray(
                sorted({n for row in frontier.tolist() for n in self._neighbours(row)}),
                dtype=np.int64,
            )
            neighbours = neighbours[~self.proposed[neighbours]] if len(neighbours) else neighbours
            if not len(neighbours):
                break
            found.update(neighbours.tolist())
            order = self.model.rank(self._rows_matrix(neighbours))
            frontier = neighbours[order[:CLIMB_STARTS]]
        return np.asarray(sorted(found), dtype=np.int64)

    def _neighbours(self, row: int) -> list[int]:
        """Legal configs that differ from ``row`` in one parameter's value."""
        config = self.table.config(row)
        rows = []
        for parameter in self.table.space.parameters:
            for value in parameter.values:
                if value != config[parameter.name]:
                    found = self.table.index({**config, parameter.name: value})
                    if found is not None:
                        rows.append(found)
        return rows

    # -- proposing -------------------------------------------------------------------------

    def propose(self, count: int) -> list[int]:
        free = np.flatnonzero(~self.proposed)
        if not len(free) or count < 1:
            return []
        borrowed = [row for row in self.borrowed if not self.proposed[row]][:count]
        if borrowed:
            self.proposed[borrowed] = True
            return borrowed
        if len(self.history[1]) or len(self.rows) >= self.initial:
            if self.model is None or self._due():
                self._fit()
            picked = self._pick(count)
        else:  # nothing to learn from yet: a seeded random start
            picked = self.rng.choice(free, min(count, len(free)), replace=False)
        self.proposed[picked] = True
        return [int(row) for row in picked]

    def _pick(self, count: int) -> NDArray[np.int64]:
        """The predicted best, with some picks drawn at random from the predicted top."""
        ranking = self._ranking[~self.proposed[self._ranking]]
        if not len(ranking):  # the pool ran dry between fits: score a fresh one
            self._ranking = ranking = self._rank_pool()
        count = min(count, len(ranking))
        explored = int(self.rng.binomial(count, self.explore))
        top = max(count * 4, math.ceil(EXPLORE_TOP * len(ranking)))
        exploit, runners_up = ranking[: count - explored], ranking[count - explored : top]
        extra = self.rng.choice(runners_up, explored, replace=False)  # top >= count: enough
        return np.concatenate([exploit, extra]).astype(np.int64)


STRATEGY = ModelSearch
