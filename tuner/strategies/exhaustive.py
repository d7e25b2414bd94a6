"""Measure every legal config in enumeration order: the ground truth for small spaces."""

from __future__ import annotations

import numpy as np

from octune.tuner.strategies.base import FixedOrder


class Exhaustive(FixedOrder):
    name = "exhaustive"

    def order(self) -> np.ndarray:
        return np.arange(len(self.table))


STRATEGY = Exhaustive
