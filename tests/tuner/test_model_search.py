"""The cost model and the `model` strategy on the synthetic recorded spaces (see
benchmarks/make_synthetic.py): they must learn the structure, beat random search by a wide
margin, and tune a second shape faster from the first one's measurements.
"""

from __future__ import annotations

import gzip
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from octune.catalogue.space import ConfigTable
from octune.core.errors import OctuneError
from octune.core.results import Measurement, Status
from octune.db.store import Store
from octune.replay.harness import (
    RecordedSpace,
    RecordingError,
    ReplayRunner,
    replay,
    restrict,
    to_reach,
)
from octune.tuner.cost_model import MODELS, Context, Features, targets
from octune.tuner.device import DeviceInfo
from octune.tuner.strategies.model import MAX_WORK_OCTAVES, TRANSFER_CHECK, ModelSearch
from octune.tuner.strategies.random import RandomSearch

DATA = Path(__file__).resolve().parent / "data"  # copies of benchmarks/data recordings
BUDGET = 150
SEEDS = range(5)


@pytest.fixture(scope="module")
def first() -> RecordedSpace:
    return RecordedSpace.load(DATA / "synthetic_a.json.gz")


@pytest.fixture(scope="module")
def second() -> RecordedSpace:
    """Another shape on the same device: its sweet spots sit elsewhere."""
    return RecordedSpace.load(DATA / "synthetic_b.json.gz")


@pytest.fixture(scope="module")
def table(first: RecordedSpace) -> ConfigTable:
    return first.table()


def run(recorded: RecordedSpace, strategy: ModelSearch | RandomSearch) -> list[float]:
    return replay(strategy, ReplayRunner(recorded), BUDGET, stop_s=recorded.best_s)


def reach(recorded: RecordedSpace, trace: list[float], fraction: float) -> int:
    """Measurements until `fraction` of the recorded best; BUDGET + 1 when never reached."""
    return to_reach(trace, recorded.best_s, fraction) or BUDGET + 1


@pytest.fixture(scope="module")
def cold(first: RecordedSpace, table: ConfigTable) -> list[list[float]]:
    """The model's runs on the first shape with nothing stored before, one per seed."""
    return [run(first, ModelSearch(table, seed=s, target=first.context)) for s in SEEDS]


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_cost_models_learn_the_order_of_configs(name, first, table):
    """Trained on 200 measured configs, predictions order the other configs like the truth:
    a model that guessed would score about 0.
    """
    times = first.times_for(table)
    features = Features(table.space).matrix(table.values, first.context)
    rows = np.random.default_rng(0).choice(len(table), 200, replace=False)
    y = targets([None if np.isnan(t) else t for t in times[rows]], [1] * len(rows))
    model = MODELS[name](seed=0).fit(features[rows], y)
    rest = np.setdiff1d(np.flatnonzero(np.isfinite(times)), rows)
    assert spearman(model.predict(features[rest]), times[rest]) > 0.6
    top = rest[model.rank(features[rest])[:20]]
    assert np.median(times[top]) < np.quantile(times[rest], 0.1)


def test_model_needs_far_fewer_measurements_than_random(first, table, cold):
    model = [reach(first, trace, 0.9) for trace in cold]
    blind = [reach(first, run(first, RandomSearch(table, seed=s)), 0.9) for s in SEEDS]
    assert max(model) <= BUDGET, model
    assert np.median(model) * 2 <= np.median(blind), (model, blind)


def test_model_proposals_are_far_better_than_random_choice(first, table):
    """After its random start the model proposes configs from the fast end of the space;
    replaced by random choice, their median would sit at the space's median.
    """
    strategy = ModelSearch(table, seed=4, target=first.context)
    trace = replay(strategy, ReplayRunner(first), 60)
    learned = np.asarray(trace[strategy.initial :])
    times = first.times_for(table)
    assert np.nanmedian(learned) < np.nanquantile(times, 0.1)
    assert strategy.fits > 1


def test_large_space_is_sampled_and_climbed(first, table):
    """With a pool smaller than the space, the sampled pool plus hill climbing still learns."""
    seeds = SEEDS[:3]
    runs = [run(first, ModelSearch(table, seed=s, target=first.context, pool=400)) for s in seeds]
    blind = [run(first, RandomSearch(table, seed=s)) for s in seeds]
    assert np.median([reach(first, t, 0.9) for t in runs]) * 2 <= np.median(
        [reach(first, t, 0.9) for t in blind]
    )


def test_history_of_another_shape_speeds_up_tuning(first, second, table, cold):
    history = second.records()
    warm = [
        run(first, ModelSearch(table, seed=s, target=first.context, history=history)) for s in SEEDS
    ]
    cold_reach = [reach(first, trace, 0.95) for trace in cold]
    warm_reach = [reach(first, trace, 0.95) for trace in warm]
    assert np.median(warm_reach) * 2 <= np.median(cold_reach), (warm_reach, cold_reach)


def test_the_nearest_shapes_fastest_config_is_measured_first(first, second, table):
    """What a lookup answers an untuned shape with is its first candidate, so tuning it can
    only improve on that answer; another device's fastest configs are not borrowed.
    """
    history = second.records()
    fastest = min((r for r in history if r.time_s is not None), key=lambda r: r.time_s or 0)
    search = ModelSearch(table, seed=0, history=history, target=first.context)
    assert search.propose(4) == [table.index(fastest.config)]
    assert len(search.propose(4)) == 4  # then the model's picks
    elsewhere = {**first.context.device, "fingerprint": "0" * 16}
    other_device = Context(elsewhere, first.context.shape)
    assert ModelSearch(table, seed=0, history=history, target=other_device).borrowed == []


def test_the_nearest_shapes_config_comes_before_the_default(first, second, table):
    """A session names the space's default too: the untuned answer is the nearest shape's
    config where one is tuned, so that comes first and the default right after it; with no
    other shape tuned, the default comes first.
    """
    history = second.records()
    fastest = min((r for r in history if r.time_s is not None), key=lambda r: r.time_s or 0)
    nearest = table.index(fastest.config)
    default = 0 if nearest != 0 else 1
    search = ModelSearch(table, seed=0, history=history, target=first.context, default=default)
    assert search.propose(2) == [nearest, default]
    cold = ModelSearch(table, seed=0, target=first.context, default=default)
    assert cold.propose(1) == [default]


def test_a_device_type_s_starts_come_first_where_nothing_is_borrowed(first, second, table):
    """With no other shape tuned on the device, the kernel's starts for its type (good on
    other devices of the type) come first, then the default, before any random config; a
    device that has tuned other shapes measures their configs and the default first.
    """
    starts = [5, 9, 5, 1]
    cold = ModelSearch(table, seed=0, target=first.context, default=1, starts=starts)
    assert cold.propose(4) == [5, 9, 1]  # each once
    assert len(cold.propose(4)) == 4  # then the random start
    history = second.records()
    warm = ModelSearch(table, seed=0, history=history, target=first.context, default=1,
                       starts=starts)  # fmt: skip
    assert warm.borrowed[:2] == [warm.borrowed[0], 1] and warm.borrowed[-2:] == [5, 9]


def test_history_needs_a_target_and_models_are_named(first, second, table):
    with pytest.raises(OctuneError, match="no target"):
        ModelSearch(table, history=second.records())
    with pytest.raises(OctuneError, match="unknown cost model 'svm'"):
        ModelSearch(table, model="svm")


def test_history_of_a_shape_of_very_different_work_is_left_out(second, table):
    """A shape with over 2^MAX_WORK_OCTAVES times the work fills the device otherwise: left out."""
    history = second.records()
    shape = second.workload["shape"]
    scale = 2 ** int(MAX_WORK_OCTAVES // 2 + 1)  # on M and N: more than MAX_WORK_OCTAVES
    near = Context(second.device, {**shape, "m": shape["m"] * 2})
    far = Context(second.device, {**shape, "m": shape["m"] * scale, "n": shape["n"] * scale})
    assert len(ModelSearch(table, seed=0, history=history, target=near).history[1]) > 0
    assert len(ModelSearch(table, seed=0, history=history, target=far).history[1]) == 0


def test_recording_round_trip_and_replay(first, table, tmp_path):
    path = tmp_path / "copy.json.gz"
    first.save(path)
    again = RecordedSpace.load(path)
    assert again.parameters == first.parameters
    np.testing.assert_array_equal(again.configs, first.configs)
    np.testing.assert_array_equal(again.time_s, first.time_s)
    runner = ReplayRunner(again)
    fastest = int(np.nanargmin(first.time_s))
    config = dict(zip(first.parameters, first.configs[fastest].tolist(), strict=True))
    result = runner.measure(config)
    assert result.ok and result.median_s == first.best_s
    failed = first.status.index("launch_error")
    bad = dict(zip(first.parameters, first.configs[failed].tolist(), strict=True))
    assert runner.measure(bad).status is Status.LAUNCH_ERROR
    part = RecordedSpace.load(path)
    part.configs, part.status, part.time_s = part.configs[:10], part.status[:10], part.time_s[:10]
    assert len(part.table()) == 10
    with pytest.raises(RecordingError, match="was not recorded"):
        ReplayRunner(part).measure(config if fastest >= 10 else bad)


class Watched(RandomSearch):
    """Random search that notes, at each proposal, how many it was asked for and how many of
    its earlier proposals were still unmeasured.
    """

    def __init__(self, table: ConfigTable, seed: int) -> None:
        super().__init__(table, seed=seed)
        self.unmeasured = 0
        self.asks: list[tuple[int, int]] = []

    def propose(self, count: int) -> list[int]:
        self.asks.append((count, self.unmeasured))
        rows = super().propose(count)
        self.unmeasured += len(rows)
        return rows

    def observe(self, row: int, measurement: Measurement) -> None:
        self.unmeasured -= 1


def test_replay_keeps_a_window_in_flight_like_a_session(first, table):
    """With a window of 8, proposals come 4 at a time while 4 are still unmeasured."""
    strategy = Watched(table, seed=1)
    trace = replay(strategy, ReplayRunner(first), 40, window=8)
    assert len(trace) == 40 and strategy.unmeasured == 0
    assert strategy.asks[0] == (8, 0)
    assert all(count + waiting == 8 and count >= 4 for count, waiting in strategy.asks[1:-1])
    one_by_one = Watched(table, seed=1)
    assert replay(one_by_one, ReplayRunner(first), 40) == replay(
        RandomSearch(table, seed=1), ReplayRunner(first), 40
    )
    assert set(one_by_one.asks) == {(1, 0)}


def test_bad_recordings_and_restrictions_are_one_line_errors(first, tmp_path):
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(b"not gzip")
    with pytest.raises(RecordingError, match=r"cannot read recorded space .*record_space\.py"):
        RecordedSpace.load(broken)
    other = tmp_path / "other.json.gz"
    other.write_bytes(gzip.compress(b'{"format": "something else"}'))
    with pytest.raises(RecordingError, match="not a recorded space"):
        RecordedSpace.load(other)
    space = first.space()
    with pytest.raises(RecordingError, match=r"TM values \[3\] are not a non-empty subset"):
        restrict(space, {"TM": [3]})
    with pytest.raises(RecordingError, match="unknown parameter NOPE"):
        restrict(space, {"NOPE": [1]})
    assert len(restrict(space, {"TM": [2], "TN": [4]}).enumerate(first.limits)) > 0


def test_store_history_feeds_the_model(first, table, tmp_path, device_info: DeviceInfo):
    """Measurements stored for one shape come back as records the model warm-starts from."""
    with Store(f"sqlite:///{tmp_path / 'octune.db'}") as store:
        device = store.device_id(device_info)
        kernel = store.kernel_version_id("synthetic", "f" * 64, "source", "space")
        workload = store.workload_id(
            "gemm", "gemm:synthetic-a", dict(first.workload["shape"]), "float32"
        )
        session = store.start_session(device, kernel, workload, "random", 1, {})
        for record in first.records()[:50]:
            status = Status.OK if record.time_s is not None else Status.LAUNCH_ERROR
            times = (record.time_s,) if record.time_s is not None else ()
            store.add_measurement(
                session, Measurement(record.config, status, times, flops=record.flops)
            )
        store.finish_session(session, "completed")
        history = store.history("synthetic", "f" * 64)
        assert store.history("synthetic", "0" * 64) == []
        assert store.history("synthetic", "f" * 64, device_info.fingerprint) == history
        assert store.history("synthetic", "f" * 64, "0" * 16) == []
        assert store.version_stamp(device_info.fingerprint, "f" * 64)[1] == 50
    assert len(history) == 50
    assert history[0].device["fingerprint"] == device_info.fingerprint
    assert history[0].workload == first.workload["shape"]
    assert [r.time_s for r in history] == [r.time_s for r in first.records()[:50]]
    shape = first.workload["shape"]
    target = Context(first.device, {**shape, "m": 1024})
    strategy = ModelSearch(table, seed=0, history=history, target=target)
    assert len(strategy.history[1]) == 50
    assert len(strategy.propose(4)) == 4 and strategy.fits == 1
    resumed = ModelSearch(table, history=history, target=Context(history[0].device, shape))
    assert (resumed.history[2] == 0).all(), "an earlier session of this shape is its own data"


def test_history_that_misranks_the_shapes_own_results_is_dropped(first, second, table):
    """Measured results outrank a history that orders them badly: the model then learns from
    the shape alone, while a history that orders them well stays in training.
    """
    helpful = second.records()
    misleading = [  # the other shape with its speeds turned upside down
        replace(record, time_s=None if record.time_s is None else 1e-3 / record.time_s)
        for record in helpful
    ]
    kept = ModelSearch(table, seed=0, history=helpful, target=first.context)
    dropped = ModelSearch(table, seed=0, history=misleading, target=first.context)
    for search in (kept, dropped):
        replay(search, ReplayRunner(first), 40)
        assert len(search.rows) >= TRANSFER_CHECK
    assert kept.uses_history
    assert not dropped.uses_history


def test_failures_at_other_shapes_are_ranked_last(first, second, table):
    """Configs that failed at another shape (on synthetic spaces, too many outputs times the
    vector width: a register limit, whatever the shape) are predicted to fail at a new shape,
    from the config's own columns, and proposed after every other config.
    """
    features = Features(table.space)
    shape_free = np.array(features.names)[features.config_columns]
    assert not [name for name in shape_free if name.startswith(("shape_", "groups"))]
    search = ModelSearch(table, seed=0, history=second.records(), target=first.context)
    proposed = search.propose(30)  # the other shape's fastest config alone, then the model's
    proposed += search.propose(30)
    flagged = search.failures.likely_to_fail(features.matrix(table.values, first.context))
    failed = ~np.isfinite(first.times_for(table))
    assert flagged[failed].mean() > 0.9 and flagged[~failed].mean() < 0.05
    assert not flagged[proposed].any()
