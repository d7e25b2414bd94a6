"""The cost model's answers for shapes nobody tuned: the lookup's ``predicted`` match.

One model per device and kernel version, trained on that device's stored measurements
(``Store.history``) with the cost model's features (``octune.tuner.cost_model``) plus the
layout flags, regressing log(seconds per flop). For a shape it scores a candidate set -- every
tuned best and each workload's fastest few configs on the device, so every one verified there --
and proposes the one predicted fastest whose launch is legal for the shape, with its predicted
time.

The service and the bundles must answer identically and a bundle cannot carry a model, so both
answer ``predicted`` from one table: the model's answer on a grid of shapes (every octave of
each size inside the range of the tuned shapes, over the layouts and dtypes tuned on the
device). ``octune.lookup.semantics`` answers from it like ``nearest`` and decides when it beats
a tuned neighbour (one further than ``NEAR_OCTAVES``, inside that range).
``DeviceModel`` also answers single shapes as a live ``Predictor``.
"""

from __future__ import annotations

import gc
import itertools
import logging
import math
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from xgboost import XGBRegressor

from octune.catalogue.space import SearchSpace
from octune.core.problem import ShapeRules
from octune.core.results import HistoryRecord
from octune.db.queries import StoredDevice
from octune.db.store import Store
from octune.lookup.data import Entry, LookupTable, Prediction, Query
from octune.lookup.semantics import KernelIndex
from octune.lookup.tables import stored_shape, stored_space
from octune.tuner.cost_model import Context, Features, targets

#: Sizes of the grid of model answers in every dimension: each octave from 16 to 8192.
GRID_SIZES: tuple[int, ...] = tuple(1 << e for e in range(4, 14))
#: Most grid points per layout: a family with many sizes answers from the live model only.
MAX_GRID = 4096
#: Too little to learn from below these: passing measurements, and tuned workloads among them
#: (one workload says nothing about how the best config moves with the shape).
MIN_MEASUREMENTS, MIN_WORKLOADS = 20, 2
#: Most candidates: configs that passed on the device, each workload's fastest first.
MAX_CANDIDATES = 1024
#: Training rows per workload, sampled when there are more: a retrain stays a few seconds.
ROWS_PER_WORKLOAD = 1000
#: Feature rows scored per call of the estimator (a grid is about 300,000): bounds memory.
CHUNK_ROWS = 100_000
#: ``Entry.workload_key`` of model answers (a bundle's import skips them).
MODEL_KEY = "model"
#: Estimates closer than this (log seconds) are ties: below the 1-2 % by which a measured time
#: moves from run to run, which the model learned from. Of tied configs the one measured at
#: the shape nearest the query is proposed: the fastest estimate among many close ones is
#: the likeliest to be the model's error (on a thin grid, a config measured on two far shapes
#: won by 1.7 % and ran at 0.47 of the best, beside one measured at a near shape at 0.93).
TIE = math.log(1.02)

log = logging.getLogger(__name__)


def time_model(seed: int) -> XGBRegressor:
    """XGBoost regressing log(seconds per flop) itself. The search's estimators
    (``cost_model.MODELS``) flatten each shape's slow half, since they only need an order of
    configs; the lookup needs a time, for small shapes where every config is slow too.
    """
    return XGBRegressor(
        n_estimators=100, max_depth=5, learning_rate=0.15, subsample=0.8, colsample_bytree=0.8,
        tree_method="hist", n_jobs=1, random_state=seed,
    )  # fmt: skip


@dataclass
class DeviceModel:
    """A trained model of one device and kernel version, with the candidates it chooses among."""

    table: LookupTable
    space: SearchSpace
    device: dict[str, Any]  # the history's device record: what the device features read
    estimator: XGBRegressor
    candidates: NDArray[np.int64]  # one config per row, columns in table.parameters order
    measured_on: tuple[tuple[tuple[int, ...], ...], ...] = ()  # each candidate's passed shapes
    _features: Features = field(init=False)
    _index: KernelIndex = field(init=False)

    def __post_init__(self) -> None:
        self._features = Features(self.space)
        self._index = KernelIndex(self.table)
        self._rules = ShapeRules(self.table.problem)

    def features(self, configs: NDArray[np.int64], shape: tuple[int, ...]) -> NDArray[np.float64]:
        """The cost model's features of ``configs`` at ``shape`` (``Problem.keys`` order), then
        the layout flags, which the search's features leave out (it tunes one layout at a time).
        """
        problem = self.table.problem
        context = Context(self.device, dict(zip(problem.keys, shape, strict=True)))
        x = self._features.matrix(configs, context)
        flags = np.tile(np.asarray(shape[len(problem.sizes) :], dtype=float), (len(x), 1))
        return np.hstack([x, flags])

    def predict(self, shapes: Sequence[tuple[int, ...]]) -> Iterator[Prediction | None]:
        """For each shape, the candidate predicted fastest whose launch is legal there."""
        per_chunk = max(1, CHUNK_ROWS // len(self.candidates))
        for start in range(0, len(shapes), per_chunk):
            chunk = shapes[start : start + per_chunk]
            x = np.vstack([self.features(self.candidates, shape) for shape in chunk])
            scores = self.estimator.predict(x).astype(float)
            scores = scores.reshape(len(chunk), len(self.candidates))
            for shape, row in zip(chunk, scores, strict=True):
                yield self._best(shape, row)

    def _best(self, shape: tuple[int, ...], scores: NDArray[np.float64]) -> Prediction | None:
        def legal(c: int) -> bool:
            return self._index.launch(tuple(self.candidates[c].tolist()), shape) is not None

        def distance(c: int) -> int:
            shapes = self.measured_on[c]
            return min((self._index.distance(s, shape) for s in shapes), default=sys.maxsize)

        c = pick(scores, legal, distance)
        if c is None:
            return None
        flops = self._rules.flops(self._rules.values(shape))
        time_s = math.exp(float(scores[c])) * flops
        return Prediction(tuple(self.candidates[c].tolist()), time_s, flops / time_s / 1e9)

    def __call__(self, table: LookupTable, query: Query) -> Prediction | None:
        """The live ``Predictor`` hook of ``KernelIndex.lookup``."""
        if (table.sha256, table.device_fingerprint) != (
            self.table.sha256,
            self.table.device_fingerprint,
        ):
            return None
        shape = tuple(int(query.shape[key]) for key in table.problem.keys)
        return next(self.predict([shape]))

    def grid(self) -> tuple[Entry, ...]:
        """Model answers on ``GRID_SIZES`` in every dimension, for each layout that was tuned,
        inside the range of the tuned shapes (the lookup trusts no estimate outside it).
        """
        problem = self.table.problem
        sizes = len(problem.sizes)
        if len(GRID_SIZES) ** sizes > MAX_GRID:  # conv2d's 6 sizes: 10^6 shapes, no grid
            return ()
        layouts = sorted({entry.shape[sizes:] for entry in self.table.tuned})
        dtypes = sorted({entry.dtype for entry in self.table.tuned})
        shapes = [
            (*point, *layout)
            for layout in layouts
            for point in itertools.product(GRID_SIZES, repeat=sizes)
            if any(self._index.inside((*point, *layout), dtype) for dtype in dtypes)
        ]
        answers = list(zip(shapes, self.predict(shapes), strict=True))
        return tuple(
            Entry(shape, dtype, p.config, p.time_s, 0.0, p.gflops, MODEL_KEY)
            for dtype in dtypes
            for shape, p in answers
            if p is not None and self._index.inside(shape, dtype)
        )


def pick(
    scores: NDArray[np.float64], legal: Callable[[int], bool], distance: Callable[[int], int]
) -> int | None:
    """The candidate to propose: the legal one with the best (lowest) score, unless others
    score within ``TIE`` of it; then the one of those measured nearest the query (``distance``),
    then the better score. Legality is asked of the best ones only.
    """
    tied: list[int] = []
    for c in np.argsort(scores, kind="stable").tolist():
        if tied and scores[c] > scores[tied[0]] + TIE:
            break
        if legal(c):
            tied.append(c)
    if len(tied) < 2:  # no tie to break: distance is asked only of tied candidates
        return tied[0] if tied else None
    return min(tied, key=lambda c: (distance(c), scores[c]))


Workloads = dict[tuple[int, ...], list[HistoryRecord]]


def _history(store: Store, device: StoredDevice, table: LookupTable) -> Workloads | None:
    """The device's measurements of the table's kernel version by shape, or None when they
    are too few to learn from.
    """
    names = table.parameters
    records = [
        r
        for r in store.history(table.kernel, table.sha256, device.fingerprint)
        if all(n in r.config for n in names)
    ]
    workloads: Workloads = {}
    for record in records:
        workloads.setdefault(stored_shape(table.problem, record.workload), []).append(record)
    passing = [shape for shape, rows in workloads.items() if any(r.time_s for r in rows)]
    if len(passing) < MIN_WORKLOADS or sum(r.time_s is not None for r in records) < (
        MIN_MEASUREMENTS
    ):
        return None
    return workloads


def _fitted(
    store: Store, device: StoredDevice, table: LookupTable, workloads: Workloads, seed: int
) -> DeviceModel:
    """A model of the table's kernel version fit on ``workloads`` (no candidates yet)."""
    names = table.parameters
    stored = store.lookup_kernel(device.fingerprint, table.kernel, table.sha256)
    assert stored is not None  # the history has rows of it
    device_record = next(iter(workloads.values()))[0].device
    model = DeviceModel(table, stored_space(stored), device_record, time_model(seed), _empty(names))
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for shape, rows in workloads.items():
        if len(rows) > ROWS_PER_WORKLOAD:
            rows = [rows[i] for i in sorted(rng.choice(len(rows), ROWS_PER_WORKLOAD, False))]
        configs = np.array([[r.config[n] for n in names] for r in rows], dtype=np.int64)
        xs.append(model.features(configs, shape))
        ys.append(targets([r.time_s for r in rows], [r.flops for r in rows]))
    model.estimator.fit(np.vstack(xs), np.concatenate(ys))
    return model


def train(
    store: Store, device: StoredDevice, table: LookupTable, seed: int = 0
) -> DeviceModel | None:
    """The model of ``table``'s device and kernel version, or None with too little data."""
    workloads = _history(store, device, table)
    if workloads is None:
        return None
    model = _fitted(store, device, table, workloads, seed)
    model.candidates, model.measured_on = _candidates(table, workloads)
    return model if len(model.candidates) else None


#: Of the tuned shapes, every this-many-th is held out of the check's training.
HOLD_OUT_EVERY = 4


@dataclass(frozen=True)
class HeldOut:
    """One measured config at a shape the checking model never saw, and its estimate."""

    shape: tuple[int, ...]
    config: tuple[int, ...]
    measured_s: float
    predicted_s: float


def held_out_check(
    store: Store, device: StoredDevice, table: LookupTable, seed: int = 0
) -> list[HeldOut]:
    """How far the model's times land from measured ones on shapes it did not learn from:
    a model fit without every HOLD_OUT_EVERY-th tuned shape, scoring each config measured
    there. Empty when too little is tuned to hold any shape out.
    """
    workloads = _history(store, device, table)
    if workloads is None:
        return []
    shapes = sorted(workloads)
    held = set(shapes[HOLD_OUT_EVERY - 1 :: HOLD_OUT_EVERY]) or {shapes[-1]}
    kept = {shape: rows for shape, rows in workloads.items() if shape not in held}
    if sum(any(r.time_s for r in rows) for rows in kept.values()) < MIN_WORKLOADS:
        return []
    model = _fitted(store, device, table, kept, seed)
    names = table.parameters
    out = []
    for shape in sorted(held):
        rows = [r for r in workloads[shape] if r.time_s is not None]
        if not rows:
            continue
        configs = np.array([[r.config[n] for n in names] for r in rows], dtype=np.int64)
        estimates = np.exp(model.estimator.predict(model.features(configs, shape)))
        for row, config, per_flop in zip(rows, configs, estimates, strict=True):
            out.append(
                HeldOut(shape, tuple(config.tolist()), float(row.time_s or 0.0),
                        float(per_flop) * max(row.flops, 1))
            )  # fmt: skip
    return out


def _empty(names: Sequence[str]) -> NDArray[np.int64]:
    return np.empty((0, len(names)), dtype=np.int64)


def _candidates(
    table: LookupTable, workloads: dict[tuple[int, ...], list[HistoryRecord]]
) -> tuple[NDArray[np.int64], tuple[tuple[tuple[int, ...], ...], ...]]:
    """Configs worth proposing, and the shapes each passed on: the tuned bests, then every
    config that passed on the device, each workload's fastest first, up to ``MAX_CANDIDATES``;
    so every answer passed verification there. Configs never run there are left out: the model
    extrapolates to them, and on a thinly tuned grid it proposed one for 3136 x 64 x 576 that
    ran at 0.20 of the shape's tuned best (benchmarks/RESULTS.md, issue 19, fifth part).
    """
    passed: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    ranked: list[list[tuple[int, ...]]] = []  # per workload, fastest first
    for shape, rows in workloads.items():
        fastest = sorted((r for r in rows if r.time_s is not None), key=lambda r: r.time_s or 0)
        configs = [tuple(int(r.config[n]) for n in table.parameters) for r in fastest]
        for config in configs:
            passed.setdefault(config, []).append(shape)
        ranked.append(configs)
    order: dict[tuple[int, ...], None] = dict.fromkeys(e.config for e in table.tuned)
    for configs in itertools.zip_longest(*ranked):  # every workload's best, then second ...
        for config in configs:
            if config is not None and len(order) < MAX_CANDIDATES:
                order.setdefault(config)
    if not order:
        return _empty(table.parameters), ()
    return np.array(list(order), dtype=np.int64), tuple(tuple(passed.get(c, ())) for c in order)


ModelKey = tuple[str, str]  # device fingerprint, kernel version sha256


@dataclass(frozen=True)
class Trained:
    """A model and its grid of answers, for the data stamp (``Store.version_stamp``) it was
    fit on.
    """

    stamp: tuple[int, int]
    model: DeviceModel | None
    answers: tuple[Entry, ...]


UNTRAINED = Trained((-1, -1), None, ())


class ModelAnswers:
    """``TableModel`` for ``build_table``: a device's grid of model answers, trained once per
    device and kernel version and kept until that pair's measurements change
    (``Store.version_stamp``), so a table rebuilt for another reason, for another device, or
    for the same version by hash and by "latest", does not retrain. Trains when asked: for
    ``octune export``; the server uses ``BackgroundModelAnswers``.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._lock = threading.Lock()
        self._cache: dict[ModelKey, Trained] = {}

    def model(self, store: Store, device: StoredDevice, table: LookupTable) -> DeviceModel | None:
        return self._trained(store, device, table).model

    def __call__(self, store: Store, device: StoredDevice, table: LookupTable) -> tuple[Entry, ...]:
        return self._trained(store, device, table).answers

    def _trained(self, store: Store, device: StoredDevice, table: LookupTable) -> Trained:
        key = (device.fingerprint, table.sha256)
        stamp = store.version_stamp(*key)
        with self._lock:
            cached = self._cache.get(key)
            if cached is None or cached.stamp != stamp:
                cached = self._cache[key] = self._train(store, device, table, stamp)
        return cached

    def _train(
        self, store: Store, device: StoredDevice, table: LookupTable, stamp: tuple[int, int]
    ) -> Trained:
        model = train(store, device, table, self.seed) if table.tuned else None
        return Trained(stamp, model, model.grid() if model else ())


#: Hears (device fingerprint, kernel sha256, grid answers, live model) after each training.
ModelListener = Callable[[str, str, tuple[Entry, ...], "DeviceModel | None"], None]


class BackgroundModelAnswers(ModelAnswers):
    """The server's ``TableModel``: building a table never waits for training (seconds to
    minutes). A table gets the answers of the model last trained for its device and kernel
    version -- none before the first, so the lookup answers from the tuned workloads alone --
    and a missing or stale model is trained on one background thread, one at a time; the
    ``subscribe``d callbacks hear of each new one, so the server swaps its answers in.
    """

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self._worker: ThreadPoolExecutor | None = None  # started by the first training
        self._queued: set[ModelKey] = set()
        self._idle = threading.Condition(self._lock)
        self._listeners: list[ModelListener] = []

    def subscribe(self, listener: ModelListener) -> None:
        """Call ``listener(device_fingerprint, kernel_sha256, answers, model)`` after each
        training: the grid of answers (what bundles carry) and the model itself, which answers
        any shape live.
        """
        self._listeners.append(listener)

    @property
    def training(self) -> int:
        """Models queued or being trained."""
        return len(self._queued)

    def wait(self) -> None:
        """Return once no model is queued or being trained and the listeners have heard of
        every one trained: the hook for tests and benchmarks (lookups never wait).
        """
        with self._idle:
            self._idle.wait_for(lambda: not self._queued)

    def close(self) -> None:
        """Drop queued trainings and finish the one in progress (it reads the store, which its
        owner closes next); a later table starts training again.
        """
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.shutdown(wait=True, cancel_futures=True)
        with self._idle:
            self._queued.clear()
            self._idle.notify_all()

    def _trained(self, store: Store, device: StoredDevice, table: LookupTable) -> Trained:
        key = (device.fingerprint, table.sha256)
        stamp = store.version_stamp(*key)
        with self._lock:
            cached = self._cache.get(key, UNTRAINED)
            if cached.stamp != stamp and key not in self._queued:
                self._queued.add(key)
                if self._worker is None:
                    self._worker = ThreadPoolExecutor(1, thread_name_prefix="octune-model")
                self._worker.submit(self._retrain, store, device, table)
        return cached

    def _retrain(self, store: Store, device: StoredDevice, table: LookupTable) -> None:
        """Train until the model is as new as the data (measurements may land meanwhile)."""
        key = (device.fingerprint, table.sha256)
        try:
            stamp = store.version_stamp(*key)
            while stamp != self._cache.get(key, UNTRAINED).stamp:
                with _no_cyclic_gc() if stamp[1] >= MIN_MEASUREMENTS else nullcontext():
                    trained = self._train(store, device, table, stamp)
                with self._lock:
                    previous, self._cache[key] = self._cache.get(key, UNTRAINED), trained
                if trained.model is not None or previous.model is not None:
                    for listener in self._listeners:  # too little data, before and now: no news
                        listener(*key, trained.answers, trained.model)
                stamp = store.version_stamp(*key)
        except Exception:  # a background thread has nobody to raise to; the next table retries
            log.exception("training the cost model of %s, kernel %s failed", *key)
        finally:
            with self._idle:
                self._queued.discard(key)
                self._idle.notify_all()


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector, process-wide. Reading a device's history makes
    millions of objects, and the full collections that their allocation triggers stop every
    thread for seconds (up to 8 s each on a million measurements): lookups served meanwhile
    would stall on them. Reference counting still frees what the history leaves behind; one
    collection at the end, still counted as training, settles the generations so that the
    first automatic one after it does not stall lookups instead.

    Not for a kernel version with fewer measurements than a model needs (``MIN_MEASUREMENTS``;
    most of a family's versions have none): its history is small, and that collection walks
    every object of the process whatever the training made. A table built queues one such
    training per version of its family, and each full collection stalled every thread (in the
    test suite's one long process, 15 to 35 a test at 0.7 s each: 64 s for a test of 12 alone).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.collect()
            gc.enable()
