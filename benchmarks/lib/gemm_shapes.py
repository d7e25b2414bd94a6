"""GEMM shapes as the per-shape benchmarks name them: the classes they are measured by, a shape's
text (``MxNxK`` with an optional ``:TN``-style suffix) as a workload, its operands as they lie in
memory, and ratios summarised by class.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from typing import Any

from octune.catalogue.family import Workload
from octune.kernels.gemm import gemm_workload

#: Shapes by class, none of them in the grid or the sets this project tuned before.
CLASSES = {
    "matrix-vector": ["1x4096x4096", "1x4096x4096:NT", "4096x1x4096", "1x1000x2048:NT",
                      "1x1000x1280:NT", "1x3072x768", "1x768x3072:NT", "1x30522x768:NT"],
    "skinny": ["4x4096x4096", "16x4096x1024", "4096x8x4096", "2048x32x2048"],
    "small-batch": ["8x4096x4096:NT", "4x1000x2048:NT", "12x3072x768", "3x8192x2048"],
    "long-k": ["256x256x8192", "128x768x3072", "512x49x4608", "64x1000x4096"],
    "transformer": ["128x768x768", "128x3072x768", "512x768x768:NT", "384x384x64:NT"],
    "im2col": ["3136x64x576", "784x128x1152", "196x256x2304", "3136x256x64"],
    "odd": ["1000x999x997", "333x1025x77", "77x4095x513"],
    "large-square": ["4096x4096x4096", "8192x8192x8192"],
}  # fmt: skip


#: Shapes by class that no run had tuned when they were first measured: the check on cases the
#: kernels and the search were not developed against (``--held-out``). First set 2026-11-26; the
#: second (2026-11-27, after the first had been tuned) is each list's next shape, im2col's next
#: two; the third (2026-11-27, later) the last shape of transformer, im2col, long-k and odd. The
#: fourth (2026-11-30, issue 63), from networks no run had used: Whisper-base's encoder (1500
#: frames), CLIP ViT-L/14 (257 tokens), GPT-2 medium at 256 tokens, Swin-T's first stage (3136
#: tokens), T5-small at 512, a 16-token LLaMA-7B step, and odd sizes: each list's shapes after
#: the third set's. The fifth (2026-11-30, later; measured once the starts were chosen without
#: it): Stable Diffusion's UNet at 64x64 latents, wav2vec2-base (499 frames), DETR's encoder,
#: DeiT-S, a 64-token Mistral-7B prefill, BERT-large at 384 tokens and an odd size: each list's
#: last shapes.
HELD_OUT = {
    "transformer": ["197x2304x768", "384x1024x1024", "577x2304x768", "1500x2048x512",
                    "257x3072x1024", "256x3072x1024:NT", "3136x288x96", "4096x320x320",
                    "4096x2560x320", "1024x640x640", "499x3072x768", "850x2048x256",
                    "197x1152x384"],
    "im2col": ["12544x64x147", "49x2048x512", "196x1024x256", "784x192x32", "3136x256x2304"],
    "long-k": ["96x512x6144", "128x1024x4096", "256x1024x4096", "1500x512x2048",
               "257x1024x4096", "512x512x2048", "384x1024x4096"],
    "odd": ["513x257x1031", "771x1537x259", "1025x385x1153", "999x777x555", "1231x613x419"],
    "skinny": ["1024x16x4096", "8192x32x1024"],
    "small-batch": ["6x2048x5120:NT", "32x4096x4096:NT", "16x11008x4096:NT",
                    "64x14336x4096:NT"],
    "matrix-vector": ["1x2048x8192:NT", "1x11008x4096:NT"],
}  # fmt: skip


def class_of(shape: str) -> str:
    """The class that lists a shape given by ``--shapes``, so that runs split by hand report
    as one list does.
    """
    listed = (name for lists in (CLASSES, HELD_OUT) for name, shapes in lists.items()
              if shape in shapes)  # fmt: skip
    return next(listed, "given")


def parse_shape(text: str) -> Workload:
    sizes, _, layout = text.partition(":")
    m, n, k = (int(part) for part in sizes.lower().split("x"))
    layout = layout.upper() or "NN"
    return gemm_workload(m, n, k, transa=layout[0] == "T", transb=layout[1] == "T")


def operands(workload: Workload, make: Callable[[tuple[int, int]], Any]) -> tuple[Any, Any]:
    """op(A) and op(B), each made (``make(shape)``) as it lies in memory and transposed as a
    view where the workload says so: the library gets the layout and its op flags.
    """
    s = workload.shape
    a = make((s["k"], s["m"]) if s["transa"] else (s["m"], s["k"]))
    b = make((s["n"], s["k"]) if s["transb"] else (s["k"], s["n"]))
    return (a.T if s["transa"] else a), (b.T if s["transb"] else b)


def class_summary(
    ratios: dict[str, list[tuple[float, ...]]], order: list[str]
) -> list[tuple[str, int, list[float], list[float]]]:
    """(class, shapes, median and lowest ratio by each clock) for each class in ``order``, then
    for all of them together ("all"); a clock's NaNs are left out.
    """
    summary = []
    for name in [*order, "all"]:
        by_shape = ratios.get(name) or [r for v in ratios.values() for r in v]
        if by_shape:
            by_clock = list(zip(*by_shape, strict=True))
            medians = [finite_median(clock) for clock in by_clock]
            lowest = [min(finite(clock), default=math.nan) for clock in by_clock]
            summary.append((name, len(by_shape), medians, lowest))
    return summary


def finite(ratios: Iterable[float]) -> list[float]:
    """The ratios a clock gave: the host's clock gives NaN where its noise swamped the kernel."""
    return [ratio for ratio in ratios if math.isfinite(ratio)]


def finite_median(ratios: Iterable[float]) -> float:
    """The median of the ratios a clock gave; NaN where it gave none."""
    kept = finite(ratios)
    return statistics.median(kept) if kept else math.nan
