"""Search strategies: one module each, exposing ``STRATEGY`` (see ``base.Strategy``)."""

from __future__ import annotations

import pkgutil


def available_strategies() -> list[str]:
    """The strategies' names, read from this folder without importing any: the command line
    lists them in its help, which must not load NumPy.
    """
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "base")
