"""Small networks the runtime's tests build, shared between them."""

from __future__ import annotations

from octune.networks.graph import GraphBuilder


def residual(g: GraphBuilder) -> tuple[str, list[int]]:
    """Two residual blocks; the second's shortcut conv comes after its main path."""
    x = g.input("input", [1, 8, 10, 10])
    y = g.relu(g.batch_norm(g.conv(x, "a1", 8, 8, 3), "a1.bn", 8), "a1.relu")
    y = g.batch_norm(g.conv(y, "a2", 8, 8, 3), "a2.bn", 8, gain=0.5)
    x = g.relu(g.node("Add", [y, x], "a.add"), "a.relu")
    y = g.batch_norm(g.conv(x, "b1", 8, 16, 3, stride=2), "b1.bn", 16)
    shortcut = g.batch_norm(g.conv(x, "b.down", 8, 16, 1, stride=2, pad=0), "b.down.bn", 16)
    return g.relu(g.node("Add", [shortcut, y], "b.add"), "b.relu"), [1, 16, 5, 5]
