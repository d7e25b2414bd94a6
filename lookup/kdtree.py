"""Nearest neighbours in integer coordinates: a k-d tree whose ties go to the lowest entry
index, so that Python and the C header's linear scan pick the same entry. Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Any

_LEAF = 8
# A node is (None, [(point, index), ...]) for a leaf, else (axis, split, low, high).
_Node = tuple[Any, ...]


class KdTree:
    """A k-d tree over integer points; ``nearest`` returns the point with the smallest
    (squared distance, index) that is not excluded: what a linear scan in index order finds.
    """

    def __init__(self, points: Sequence[tuple[int, ...]], indices: Sequence[int]) -> None:
        self._root = self._build(list(zip(points, indices, strict=True)))

    def _build(self, items: list[tuple[tuple[int, ...], int]]) -> _Node:
        if len(items) <= _LEAF:
            return (None, items)
        dims = len(items[0][0])
        spreads = [max(p[d] for p, _ in items) - min(p[d] for p, _ in items) for d in range(dims)]
        axis = spreads.index(max(spreads))
        if spreads[axis] == 0:  # all points equal: one leaf, whatever its size
            return (None, items)
        items.sort(key=lambda item: item[0][axis])
        middle = len(items) // 2
        split = items[middle][0][axis]
        return (axis, split, self._build(items[:middle]), self._build(items[middle:]))

    def nearest(self, query: tuple[int, ...], excluded: Collection[int]) -> int | None:
        """Exact integer distances decide; ``math.dist`` (a quarter of the cost, float) only
        skips points that are clearly further than the best so far.
        """
        best, best_index, radius = math.inf, -1, math.inf
        dist = math.dist
        stack: list[tuple[_Node, int]] = [(self._root, 0)]
        while stack:
            node, bound = stack.pop()
            if bound > best:
                continue
            if node[0] is None:
                for point, index in node[1]:
                    if dist(point, query) > radius:
                        continue
                    distance = 0
                    for a, b in zip(point, query, strict=False):  # strict costs a third here
                        a -= b
                        distance += a * a
                    if (distance < best or (distance == best and index < best_index)) and (
                        index not in excluded
                    ):
                        best, best_index = distance, index
                        # Far above float error (1e-16 relative): no tie is ever skipped.
                        radius = math.sqrt(distance) * (1 + 1e-9) + 1e-6
                continue
            axis, split, low, high = node
            gap = query[axis] - split
            near, far = (low, high) if gap < 0 else (high, low)
            stack.append((far, max(bound, gap * gap)))  # popped after near
            stack.append((near, bound))
        return None if best_index < 0 else best_index
