"""Attention's two batched products and the softmax between them as one launch.

After ``views``, an exported transformer's attention is three steps: the scores
alpha * q k ((B.., Sq, D) by (B.., D, Sk)), a softmax over their last axis, and the context
p v ((B.., Sq, Sk) by (B.., Sk, Dv)). The scores are B x heads x Sq x Sk values written once
and read twice, in three launches: ViT-B/16 at batch 16 on an H200 spent 2.81 ms in the
products and 0.74 in the softmax where PyTorch's one fused kernel took 1.24. ``ops.cl``'s
``attention`` computes a query row's output in one pass over the keys, with the softmax
online (FlashAttention's running maximum and sum, the sum of p v rescaled as the maximum
grows), keys and values shared by a work-group through local memory; ``attention_tiled``
computes 64 or 32 rows' in a work-group, as a GEMM kernel computes a tile. The scores are
never stored; their epilogue (a position bias, a constant mask) and a mask added by a launch of
its own (Hugging Face's BERT's, one per image) run on each score in the kernel. Where the device
runs the steps faster apart (a CPU may), the runtime's load-time timing keeps them
(``Runtime(attention=)``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from octune.runtime import batched as bmm
from octune.runtime import layout
from octune.runtime.steps import Attention, Broadcast, Graph, Softmax, Step, Tuned, readers

#: The largest head size (D and Dv) the kernel keeps a query row and its sum in registers for.
HEAD_LIMIT = 128
#: The most scores an epilogue in the kernels takes (kernels/epilogue.clh's int indices).
EPILOGUE_LIMIT = 1 << 31
#: ops.cl's ``attention``: the query rows a work-group computes (one a work-item), by plan;
#: KEYS keys a step.
ROWS = {"fused-32": 32, "fused-64": 64}
KEYS = 32
#: ops.cl's ``attention_tiled``: by plan, the height TG of its 16 x TG work-group, which
#: computes 4 TG query rows; heads up to TILED_HEAD wide.
TILED = {"fused-tiled": 16, "fused-tiled-32": 8}
TILED_HEAD = 64
#: The plans an attention can run by (``Runtime(attention=)``; None: the fastest here).
ATTENTION_PLANS = ("unfused", *ROWS, *TILED)


def tiled_bytes(head: int, rows: int) -> int:
    """``attention_tiled``'s local memory for q and k heads ``head`` wide and ``rows`` query
    rows a work-group: its q, k, v and probability tiles (rows padded to whole vectors and 4
    more) and its rows' parts.
    """
    padded = -(-head // 4) * 4 + 4
    return 4 * (rows * padded + KEYS * padded + KEYS * 68 + rows * 36 + 16 * rows)


def shapes_of(step: Attention, shapes: Mapping[str, tuple[int, ...]]) -> list[tuple[int, ...]]:
    """q's, k's, v's and the output's shapes as the kernel reads them (``bmm.shapes_of``)."""
    scores, context = step.parts[0], step.parts[-1]
    assert isinstance(scores, Tuned) and isinstance(context, Tuned)
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


class Masked(NamedTuple):
    """A mask added to a batched product's scores (BERT's, GPT's): a Broadcast of its own."""

    step: Broadcast
    scores: Tuned
    mask: str
    strides: tuple[int, ...]  # the mask's along the Broadcast's RANK axes


def _masked(step: Step | None, producer: Mapping[str, Step], graph: Graph) -> Masked | None:
    """``step`` where it adds a tensor to a batched product's scores without broadcasting
    them, else None.
    """
    if not isinstance(step, Broadcast) or (step.function, len(step.inputs)) != ("add", 2):
        return None
    for k, name in enumerate(step.inputs):
        scores, mask = _product(producer.get(name)), step.inputs[1 - k]
        fits = graph.shapes[step.output] == graph.shapes[name] and mask != name
        if scores is not None and fits and step.epilogue.empty and mask not in graph.typed:
            return Masked(step, scores, mask, step.strides[1 - k])
    return None


def _attention(
    scores: Tuned,
    masked: Masked | None,
    softmax: Softmax,
    context: Tuned,
    graph: Graph,
    epilogues: bool,
) -> Attention | None:
    """The steps as one, where they are attention's: the scores (through their epilogue,
    where ``epilogues`` allows one, and a mask's Add) read only by a plain softmax over their
    last axis, read only as the context's A, with head sizes the kernels take and one batch
    shape throughout.
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
        or (masked is not None and tuple(graph.shapes[masked.step.output]) != tuple(y))
    ):
        return None
    inputs, mask, middle = (*scores.inputs[:2], context.inputs[1]), (), (softmax,)
    if masked is not None:  # its strides along the batch axes as the kernels' meta has them
        along = masked.strides[layout.RANK - len(y) :]
        inputs, mask = (*inputs, masked.mask), (*layout.padded(along[:-2], 0), *along[-2:])
        middle = (masked.step, softmax)
    parts = (scores, *middle, context)
    return Attention(
        name=scores.name,
        nodes=tuple(node for part in parts for node in part.nodes),
        ops=tuple(op for part in parts for op in part.ops),
        inputs=inputs,
        output=context.output,
        epilogue=context.epilogue,
        alpha=scores.alpha * context.alpha,
        views=(*scores.views[:2], *context.views[1:]),
        parts=parts,
        mask=mask,
    )


def fuse(graph: Graph, steps: Sequence[Step], epilogues: bool = True) -> list[Step]:
    """``steps`` with each attention's as one ``Attention`` at the context's place (where v,
    which may be computed after the scores, is ready); with ``epilogues`` False, only those
    whose scores have no epilogue (``Runtime(fuse=False)``).
    """
    producer = {step.output: step for step in steps}
    reading = readers(steps)
    fused: dict[int, Attention] = {}
    for softmax in steps:
        if not isinstance(softmax, Softmax):
            continue
        before = producer.get(softmax.inputs[0])
        masked = _masked(before, producer, graph)
        scores = masked.scores if masked is not None else _product(before)
        context = _product(_one_reader(softmax.output, graph, reading))
        if scores is None or context is None:
            continue
        if _one_reader(scores.output, graph, reading) is not (masked.step if masked else softmax):
            continue
        if masked is not None and _one_reader(masked.step.output, graph, reading) is not softmax:
            continue
        found = _attention(scores, masked, softmax, context, graph, epilogues)
        if found is not None:
            fused.update({id(part): found for part in found.parts})
    return [
        fused.get(id(step), step)
        for step in steps
        if id(step) not in fused or fused[id(step)].parts[-1] is step
    ]
