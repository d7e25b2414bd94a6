"""The contract every search strategy keeps, checked on a recorded space replayed without a
device: only legal, never-measured rows, at most the count asked for, the same run for the
same seed, and every row exactly once before it says the space is exhausted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from octune.catalogue.space import ConfigTable
from octune.replay.harness import RecordedSpace, ReplayRunner
from octune.tuner.strategies.base import (
    Strategy,
    available_strategies,
    get_strategy,
    proposals_due,
)

DATA = Path(__file__).resolve().parent / "data"  # copies of benchmarks/data recordings
BATCHES = (1, 5, 3, 8)  # a session feeding parallel builds asks for batches of any size


@pytest.fixture(scope="module")
def recorded() -> RecordedSpace:
    return RecordedSpace.load(DATA / "synthetic_a.json.gz")


@pytest.fixture(scope="module")
def table(recorded: RecordedSpace) -> ConfigTable:
    return recorded.table()


def drive(strategy: Strategy, runner: ReplayRunner, budget: int) -> list[int]:
    """Propose in batches of varying size, observe each result, return every row proposed."""
    proposed: list[int] = []
    step = 0
    while len(proposed) < budget:
        count = min(BATCHES[step % len(BATCHES)], budget - len(proposed))
        rows = strategy.propose(count)
        assert len(rows) <= count
        if not rows:
            break
        for row in rows:
            strategy.observe(row, runner.measure(strategy.table.config(row)))
        proposed.extend(rows)
        step += 1
    return proposed


@pytest.mark.parametrize("name", available_strategies())
def test_only_legal_unmeasured_rows_within_budget(name, recorded, table):
    skip = set(np.random.default_rng(5).choice(len(table), 200, replace=False).tolist())
    strategy = get_strategy(name)(table, seed=3, skip=skip)
    proposed = drive(strategy, ReplayRunner(recorded), budget=40)
    assert len(proposed) == 40
    assert all(isinstance(row, int) and 0 <= row < len(table) for row in proposed)
    assert not skip & set(proposed), "proposed a config measured before"
    assert len(set(proposed)) == len(proposed), "proposed a config twice"
    assert strategy.propose(0) == []


@pytest.mark.parametrize("name", available_strategies())
def test_same_seed_same_run(name, recorded, table):
    runs = [
        drive(get_strategy(name)(table, seed=11), ReplayRunner(recorded), budget=30)
        for _ in range(2)
    ]
    assert runs[0] == runs[1]


@pytest.mark.parametrize("name", available_strategies())
def test_exhausts_a_small_space_exactly_once(name, recorded, table):
    small = table.take(np.arange(0, len(table), 150))  # 39 configs spread over the space
    skip = {0, 7}
    strategy = get_strategy(name)(small, seed=2, skip=skip)
    proposed = drive(strategy, ReplayRunner(recorded), budget=len(small) + 10)
    assert sorted(proposed) == sorted(set(range(len(small))) - skip)
    assert strategy.propose(4) == []


def test_proposals_come_in_batches_of_half_a_window():
    """Sessions and replays ask a strategy for more only once half the window is free."""
    assert proposals_due(8, 0) == 8
    assert proposals_due(8, 4) == 4
    assert proposals_due(8, 5) == 0
    assert proposals_due(1, 0) == 1
    assert proposals_due(1, 1) == 0
