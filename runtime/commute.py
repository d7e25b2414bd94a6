"""Transposes of whole rows moved across the GEMM beside them, where ``fold`` and ``views``
then absorb them.

PyTorch exports ``nn.MultiheadAttention(batch_first=True)`` (ViT's) with the sequence first
inside: a Transpose of the block's input from (B, S, E) to (S, B, E) before the QKV
projection, and one of the output projection's result back, its residual Add joined. A GEMM
treats its rows alike, so a Transpose that moves whole rows can run on the other side of it:
the projection reads the block's input as it lies and its result is moved instead, which the
head Gathers and Transposes after it fold into, and the batched products read in place; the
output projection reads rows the context's own move already put in order, and stores the
block's output with the residual added. ViT-B/16 loses two launches a layer (0.73 ms of
21.3 at batch 16 on an H200).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from octune.runtime import layout
from octune.runtime.steps import Alias, Epilogue, Graph, IndexMap, Step, Tuned

Shapes = Mapping[str, tuple[int, ...]]


def row_permutation(step: Step, shapes: Shapes) -> tuple[int, ...] | None:
    """The axis order of a Transpose whose last axis stays last (it moves whole rows), else
    None.
    """
    if not isinstance(step, IndexMap) or step.mode != "plain" or step.table:
        return None
    source = shapes[step.inputs[0]]
    rank, strides = len(source), layout.strides(source)
    if len(shapes[step.output]) != rank or any(a != (1, 0, 1, 1, 0) for a in step.axes[:-rank]):
        return None
    perm: list[int] = []
    for size, start, step_, dim, stride in step.axes[-rank:]:
        found = [
            j
            for j in range(rank)
            if j not in perm and source[j] == size == dim and (strides[j] == stride or size == 1)
        ]
        if start or step_ != 1 or not found:
            return None
        perm.append(found[0])
    return tuple(perm) if perm[-1] == rank - 1 and perm != sorted(perm) else None


def _column_wise(epilogue: Epilogue) -> bool:
    """Whether an epilogue treats every row alike: per-column vectors and nothing else read."""
    return epilogue.other is None and epilogue.inner == 1


def _residual(epilogue: Epilogue, size: int) -> bool:
    """Whether an epilogue only adds a tensor of the output's own layout (or nothing)."""
    if epilogue.empty:
        return True
    return (epilogue.scale, epilogue.bias, epilogue.activation, epilogue.multiply) == (
        None,
        None,
        "none",
        False,
    ) and (epilogue.other_inner, epilogue.other_size) == (1, size)


class Commuter:
    """The pass over a graph's steps, before ``fold``: ``commute`` gives them with each row
    move beside a GEMM on its other side, where the moves around it can absorb it.
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.steps = list(graph.steps)

    def commute(self) -> list[Step]:
        typed = self.graph.typed.keys()  # a quantized model's bytes: moved as they are
        for gemm in [s for s in self.steps if isinstance(s, Tuned)]:
            layer = gemm.layer  # a GEMM whose A's rows are y's (a conv's are not rows at all)
            rows = layer.family == "gemm" and not layer.shape.get("transa", 0)
            if rows and layer.count == 1 and not typed & {*gemm.inputs, gemm.output}:
                gemm = self._before(gemm)
                self._after(gemm)
        return self.steps

    # -- the graph as it stands --------------------------------------------------------------

    def _readers(self, name: str) -> list[Step]:
        return [s for s in self.steps if name in (*s.inputs, s.epilogue.other)]

    def _producer(self, name: str) -> Step | None:
        return next((s for s in self.steps if s.output == name), None)

    def _sole_reader(self, name: str) -> Step | None:
        found = self._readers(name)
        return found[0] if len(found) == 1 and name not in self.graph.outputs else None

    def _maps_only(self, name: str) -> bool:
        """Whether every reader of ``name`` (through Reshapes) is a plain move."""
        readers = self._readers(name)
        return name not in self.graph.outputs and all(
            self._maps_only(s.output)
            if isinstance(s, Alias)
            else isinstance(s, IndexMap) and s.mode == "plain" and s.inputs == (name,)
            for s in readers
        )

    def _up(self, name: str) -> tuple[Step | None, list[Step]]:
        """The step that wrote ``name`` before Reshapes read alone, and those Reshapes."""
        aliases: list[Step] = []
        producer = self._producer(name)
        while isinstance(producer, Alias) and self._sole_reader(producer.output) is not None:
            aliases.append(producer)
            producer = self._producer(producer.inputs[0])
        return producer, aliases

    def _down(self, name: str) -> tuple[Step | None, list[Step]]:
        """The step that alone reads ``name`` through Reshapes read alone, and those Reshapes."""
        aliases: list[Step] = []
        reader = self._sole_reader(name)
        while isinstance(reader, Alias):
            aliases.append(reader)
            reader = self._sole_reader(reader.output)
        return reader, aliases

    def _swap(self, old: list[Step], at: Step, new: list[Step]) -> None:
        """``old`` steps out, ``new`` in where ``at`` stood."""
        index = self.steps.index(at)
        self.steps[index : index + 1] = new
        self.steps = [s for s in self.steps if not any(s is o for o in old if o is not at)]

    def _moved(
        self,
        step: IndexMap,
        source: str,
        shape: tuple[int, ...],
        perm: tuple[int, ...],
        output: str,
    ) -> IndexMap:
        """``step``'s row move, applied to ``source`` read as ``shape``, into ``output``."""
        self.graph.shapes[output] = tuple(shape[axis] for axis in perm)
        axes = layout.index_axes(layout.transpose(shape, perm))
        return IndexMap(
            name=step.name,
            nodes=step.nodes,
            ops=step.ops,
            inputs=(source,),
            output=output,
            axes=axes,
        )

    # -- the two moves -----------------------------------------------------------------------

    def _before(self, gemm: Tuned) -> Tuned:
        """A row move into the GEMM's input: the GEMM reads the unmoved rows, and its result
        is moved, where only moves read it.
        """
        shapes = self.graph.shapes
        move, aliases = self._up(gemm.inputs[0])
        perm = None if move is None else row_permutation(move, shapes)
        if (
            not isinstance(move, IndexMap)
            or perm is None
            or self.graph.typed.keys() & {move.inputs[0], move.output}
            or shapes[move.output][-1] != shapes[gemm.inputs[0]][-1]  # whole rows of A
            or not move.epilogue.empty
            or self._sole_reader(move.output) is None
            or not _column_wise(gemm.epilogue)
            or not self._maps_only(gemm.output)
        ):
            return gemm
        source = move.inputs[0]
        rows = shapes[source][:-1]
        product = f"{gemm.output}:unmoved"
        shapes[product] = (*rows, shapes[gemm.output][-1])
        moved = self._moved(move, product, shapes[product], perm, f"{gemm.output}:moved")
        new = replace(gemm, inputs=(source, *gemm.inputs[1:]), output=product)
        for reader in self._readers(gemm.output):
            self.steps[self.steps.index(reader)] = replace(reader, inputs=(moved.output,))
        self._swap([move, *aliases, gemm], gemm, [new, moved])
        return new

    def _after(self, gemm: Tuned) -> None:
        """A row move of the GEMM's result (its residual Add too): the GEMM reads rows moved
        before it, where a move wrote them, and stores the result in place.
        """
        shapes = self.graph.shapes
        move, aliases = self._down(gemm.output)
        perm = None if move is None else row_permutation(move, shapes)
        if (
            not isinstance(move, IndexMap)
            or perm is None
            or self.graph.typed.keys() & {move.output, move.epilogue.other}
            or shapes[move.inputs[0]][-1] != shapes[gemm.output][-1]  # whole rows of y
            or not _column_wise(gemm.epilogue)
        ):
            return
        size = math.prod(shapes[move.output])
        written, _ = self._up(gemm.inputs[0])
        if (
            not _residual(move.epilogue, size)
            or (move.epilogue.other and gemm.epilogue.activation != "none")
            or not isinstance(written, IndexMap)
        ):
            return
        rows = shapes[move.inputs[0]][:-1]
        moved = self._moved(
            move, gemm.inputs[0], (*rows, shapes[gemm.inputs[0]][-1]), perm, f"{move.output}:rows"
        )
        moved = replace(moved, nodes=move.nodes[:1], ops=move.ops[:1])  # its residual Add:
        epilogue = gemm.epilogue  # the GEMM's
        if move.epilogue.other:
            epilogue = replace(epilogue, other=move.epilogue.other, other_size=size)
        new = replace(
            gemm,
            inputs=(moved.output, *gemm.inputs[1:]),
            output=move.output,
            epilogue=epilogue,
            nodes=gemm.nodes + move.nodes[1:],
            ops=gemm.ops + move.ops[1:],
        )
        self._swap([gemm, *aliases, move], move, [moved, new])
