"""The nearest tuned shape: distance is Euclidean in log2 space of the sizes, in 16.16 fixed
point computed with integers, so Python and the generated C header rank the same candidates
identically; one k-d tree per dtype. Standard library only, as the lookup (``semantics``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from octune.core.problem import Problem
from octune.lookup.data import Entry
from octune.lookup.kdtree import KdTree

#: Fixed-point fraction bits of the log2 distance (shared with the C header).
LOG_BITS = 16
#: A differing transpose (layout flag) counts as this many octaves along one size.
LAYOUT_OCTAVES = 2
LAYOUT_WEIGHT = LAYOUT_OCTAVES << LOG_BITS
#: A tuned neighbour at most this far (in octaves, as the distance above) beats a model's
#: answer: as far as a differing transpose alone, or twice the size in every dimension.
NEAR_OCTAVES = 2
#: The same as a squared fixed-point distance, as the neighbour search computes it.
NEAR_DISTANCE = (NEAR_OCTAVES << LOG_BITS) ** 2


def _log2_digits(value: int) -> int:
    """log2(value) in 16.16 fixed point by the binary digit-by-digit method, on integers."""
    exponent = value.bit_length() - 1
    mantissa = (value << 30) >> exponent  # value / 2**exponent in [1, 2), 2.30 fixed point
    result = exponent << LOG_BITS
    for bit in range(LOG_BITS - 1, -1, -1):
        mantissa = (mantissa * mantissa) >> 30
        if mantissa >= 1 << 31:
            mantissa >>= 1
            result |= 1 << bit
    return result


#: log2 of 0..2**LOG_TABLE_BITS - 1 in 16.16 fixed point; the C header carries the same table.
LOG_TABLE_BITS = 11
LOG2_TABLE: tuple[int, ...] = (0, *(_log2_digits(i) for i in range(1, 1 << LOG_TABLE_BITS)))


def log2_fixed(value: int) -> int:
    """log2 of ``value`` (>= 1) cut to its 11 leading bits, in 16.16 fixed point: a distance
    metric that integer code in Python and C computes bit for bit the same, fast.
    """
    shift = value.bit_length() - LOG_TABLE_BITS
    if shift <= 0:
        return LOG2_TABLE[value]
    return LOG2_TABLE[value >> shift] + (shift << LOG_BITS)


def size_bounds(
    entries: Sequence[Entry], sizes: int
) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Per dtype, the least and the greatest value of each of the first ``sizes`` keys."""
    columns: dict[str, list[tuple[int, ...]]] = {}
    for entry in entries:
        columns.setdefault(entry.dtype, []).append(entry.shape[:sizes])
    bounds = {}
    for dtype, shapes in columns.items():
        each_size = list(zip(*shapes, strict=True))
        bounds[dtype] = (tuple(map(min, each_size)), tuple(map(max, each_size)))
    return bounds


class NeighbourIndex:
    """Entries as points (16.16 log2 of each size, then each layout flag times
    ``LAYOUT_WEIGHT``), one k-d tree per dtype.
    """

    def __init__(self, problem: Problem, entries: Sequence[Entry]) -> None:
        self._sizes = len(problem.sizes)
        groups: dict[str, list[int]] = {}
        for index, entry in enumerate(entries):
            groups.setdefault(entry.dtype, []).append(index)
        self._trees = {
            dtype: KdTree([self.point(entries[i].shape) for i in indices], indices)
            for dtype, indices in groups.items()
        }

    def point(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        sizes = self._sizes
        return (
            *map(log2_fixed, shape[:sizes]),
            *(flag * LAYOUT_WEIGHT for flag in shape[sizes:]),
        )

    def distance(self, a: tuple[int, ...], b: tuple[int, ...]) -> int:
        """Squared fixed-point distance between two shapes, as ``KdTree.nearest`` measures it."""
        return sum((x - y) ** 2 for x, y in zip(self.point(a), self.point(b), strict=True))

    def nearest(
        self, shape: tuple[int, ...], dtype: str, legal: Callable[[int], bool]
    ) -> int | None:
        """The nearest entry that ``legal`` accepts; legality is only asked of the winner,
        and a rejected winner is excluded before searching again.
        """
        return next(self.nearest_first(shape, dtype, legal), None)

    def nearest_first(
        self, shape: tuple[int, ...], dtype: str, legal: Callable[[int], bool]
    ) -> Iterator[int]:
        """The entries ``legal`` accepts, nearest first (ties to the earlier entry)."""
        tree = self._trees.get(dtype)
        if tree is None:
            return
        point, seen = self.point(shape), set[int]()
        while (index := tree.nearest(point, seen)) is not None:
            seen.add(index)
            if legal(index):
                yield index
