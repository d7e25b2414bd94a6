"""Attention's two batched products and the softmax between them as one launch.

After ``views``, an exported transformer's attention is three steps: the scores
alpha * q k ((B.., Sq, D) by (B.., D, Sk)), a softmax over their last axis, and the context
p v ((B.., Sq, Sk) by (B.., Sk, Dv)). The scores are B x heads x Sq x Sk values written once
and read twice, in three launches: ViT-B/16 at batch 16 on an H200 spent 2.81 ms in the
products and 0.74 in the softmax where PyTorch's one fused kernel took 1.24. ``ops.cl``'s
``attention`` computes a query row's output in one pass over the keys, with the softmax
online (FlashAttention's running maximum and sum, the sum of p v rescaled as the maximum
grows), keys and values shared by a work-group through local memory; ``attention_tiled``
computes 64 rows' in a 16 x 16 work-group, as a GEMM kernel computes a tile. The scores are
never stored; their epilogue (BERT's additive mask, a position bias) runs on each score in the
kernel. Where the device runs the three steps faster (a CPU may), the runtime's load-time
timing keeps them (``Runtime(attention=)``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from octune.runtime import batched as bmm
from octune.runtime.steps import Attention, Graph, Softmax, Step, Tuned, readers

#: The largest head size (D and Dv) the kernel keeps a query row and its sum in registers for.
HEAD_LIMIT = 128
#: The most scores an epilogue in the kernels takes (kernels/epilogue.clh's int indices).
EPILOGUE_LIMIT = 1 << 31
#: ops.cl's ``attention``: the query rows a work-group computes (one a work-item), by plan;
#: KEYS keys a step.
ROWS = {"fused-32": 32, "fused-64": 64}
KEYS = 32
#: ops.cl's ``attention_tiled``: 64 query rows a work-group of 16 x 16, for heads up to
#: TILED_HEAD wide.
TILED, TILED_ROWS, TILED_HEAD = "fused-tiled", 64, 64
#: The plans an attention can run by (``Runtime(attention=)``; None: the fastest here).
ATTENTION_PLANS = ("unfused", *ROWS, TILED)


def tiled_bytes(head: int) -> int:
    """``attention_tiled``'s local memory for q and k heads ``head`` wide: its q, k, v and
    probability tiles (rows padded to whole vectors and 4 more) and its rows' parts.
    """
    padded = -(-head // 4) * 4 + 4
    return 4 * (TILED_ROWS * padded + KEYS * padded + KEYS * 68 + TILED_ROWS * 36 + 16 * 64)


def shapes_of(step: Attention, shapes: Mapping[str, tuple[int, ...]]) -> list[tuple[int, ...]]:
    """q's, k's, v's and the output's shapes as the kernel reads them (``bmm.shapes_of``)."""
    scores, _, context = step.parts
    q, k, _ = bmm.shapes_of(scores, shapes)
    _, v, y = bmm.shapes_of(context, shapes)
    return [q, k, v, y]


def _product(step: Step | None) -> Tuned | None:
    """``step`` where it is a float batched product, else None."""
    if isinstance(step, Tuned) and step.layer.batched and step.layer.dtype != "int8":
        return step
    return None


def _one_reader(name: str, graph: Graph, readers: Mapping[str, list[Step]]) -> Step | None:
    found = readers.get(name, [])
    return found[0] if len(found) == 1 and name not in graph.outputs else None


def _attention(
    scores: Tuned, softmax: Softmax, context: Tuned, graph: Graph, epilogues: bool
) -> Attention | None:
    """The three steps as one, where they are attention's: the scores (through their epilogue,
    where ``epilogues`` allows one) read only by a plain softmax over their last axis, read
    only as the context's A, with head sizes the kernels take and one batch shape throughout.
    """
    q, _, y = bmm.shapes_of(scores, graph.shapes)
    p, v, out = bmm.shapes_of(context, graph.shapes)
    if (
        not (scores.epilogue.empty or (epilogues and math.prod(y) < EPILOGUE_LIMIT))
        or not softmax.epilogue.empty
        or scores.views[2] is not None
        or context.views[0] is not None
        or context.inputs[0] != softmax.output
        or (softmax.inner, softmax.length) != (1, y[-1])
        or tuple(p) != tuple(y)
        or tuple(out[:-2]) != tuple(y[:-2])
        or max(q[-1], v[-1]) > HEAD_LIMIT
    ):
        return None
    return Attention(
        name=scores.name,
        nodes=scores.nodes + softmax.nodes + context.nodes,
        ops=scores.ops + softmax.ops + context.ops,
        inputs=(*scores.inputs[:2], context.inputs[1]),
        output=context.output,
        epilogue=context.epilogue,
        alpha=scores.alpha * context.alpha,
        views=(*scores.views[:2], *context.views[1:]),
        parts=(scores, softmax, context),
    )


def fuse(graph: Graph, steps: Sequence[Step], epilogues: bool = True) -> list[Step]:
    """``steps`` with each attention's three as one ``Attention`` at the context's place (where
    v, which may be computed after the scores, is ready); with ``epilogues`` False, only those
    whose scores have no epilogue (``Runtime(fuse=False)``).
    """
    producer = {step.output: step for step in steps}
    reading = readers(steps)
    fused: dict[int, Attention] = {}
    for softmax in steps:
        if not isinstance(softmax, Softmax):
            continue
        scores = _product(producer.get(softmax.inputs[0]))
        context = _product(_one_reader(softmax.output, graph, reading))
        if scores is None or context is None:
            continue
        if _one_reader(scores.output, graph, reading) is not softmax:
            continue
        found = _attention(scores, softmax, context, graph, epilogues)
        if found is not None:
            fused.update({id(scores): found, id(softmax): found, id(context): found})
    return [
        fused.get(id(step), step)
        for step in steps
        if id(step) not in fused or fused[id(step)].parts[2] is step
    ]
