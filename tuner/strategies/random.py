"""Uniform sampling without replacement: the baseline every smarter strategy must beat."""

from __future__ import annotations

import numpy as np

from octune.tuner.strategies.base import FixedOrder


class RandomSearch(FixedOrder):
    name = "random"

    def order(self) -> np.ndarray:
        return np.random.default_rng(self.seed).permutation(len(self.table))


STRATEGY = RandomSearch
