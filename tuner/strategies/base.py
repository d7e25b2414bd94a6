"""The interface every search strategy implements, and how strategies are found by name.

A strategy sees the legal configs as rows of a ConfigTable and proposes row indices; it is
told each result so it can learn. Adding a strategy is adding one module to this package
that defines a `Strategy` subclass and names it in `STRATEGY`.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Collection
from typing import ClassVar

import numpy as np

from octune.catalogue.space import ConfigTable
from octune.core.errors import OctuneError
from octune.core.results import Measurement
from octune.tuner.strategies import available_strategies


def proposals_due(window: int, in_flight: int) -> int:
    """How many proposals to ask for with ``in_flight`` of ``window`` candidates unmeasured:
    none until half the window is free, so that a learning strategy refits once per batch
    while the other half keeps the device busy; always the free room when nothing is in flight.
    """
    free = window - in_flight
    return free if free >= max(1, window // 2) or in_flight == 0 else 0


class Strategy(ABC):
    name: ClassVar[str]
    # A strategy that sets this is built with `history` (the stored measurements of the same
    # kernel version, TuningStore.history) and `target` (the device and shape being tuned).
    learns_from_history: ClassVar[bool] = False

    def __init__(
        self, table: ConfigTable, *, seed: int | None = None, skip: Collection[int] = ()
    ) -> None:
        """`skip` holds rows already measured (an earlier session): never proposed again."""
        self.table = table
        self.seed = seed
        self.skip = frozenset(skip)

    @abstractmethod
    def propose(self, count: int) -> list[int]:
        """Up to `count` rows not proposed before; an empty list means the space is exhausted."""

    def observe(self, row: int, measurement: Measurement) -> None:  # noqa: B027
        """Learn from a result. Blind strategies ignore it."""


def get_strategy(name: str) -> type[Strategy]:
    known = available_strategies()
    if name not in known:
        raise OctuneError(f"unknown strategy '{name}': choose one of {', '.join(known)}")
    module = importlib.import_module(f"{__package__}.{name}")
    return module.STRATEGY


class FixedOrder(Strategy):
    """A strategy that decides its whole visiting order up front and never learns."""

    def __init__(
        self, table: ConfigTable, *, seed: int | None = None, skip: Collection[int] = ()
    ) -> None:
        super().__init__(table, seed=seed, skip=skip)
        self._order = self.order()
        self._next = 0

    @abstractmethod
    def order(self) -> np.ndarray:
        """Every row of the table, in the order to measure them."""

    def propose(self, count: int) -> list[int]:
        rows: list[int] = []
        while len(rows) < count and self._next < len(self._order):
            row = int(self._order[self._next])
            self._next += 1
            if row not in self.skip:
                rows.append(row)
        return rows
