"""Short labels for the tables a terminal shows: a layer by the part of its name that tells it
apart, so that a network's table fits 80 columns without cutting what differs.
"""

from __future__ import annotations

import re

from rich import box
from rich.console import Console
from rich.table import Table

#: An exporter's last name part that is only the operator (PyTorch's ``.../Conv``, ``Relu_1``).
_OPERATOR = re.compile(r"[A-Z][A-Za-z0-9]*(_\d+)?")
#: Below this many columns, tables leave out their least needed columns.
NARROW = 100


def layer_label(name: str) -> str:
    """``/features/features.3/squeeze/Conv`` (PyTorch's exporters) as ``features.3/squeeze``:
    empty parts, the operator appended last, and a part the next one repeats left out.
    """
    parts = [part for part in name.split("/") if part]
    if len(parts) > 1 and _OPERATOR.fullmatch(parts[-1]):
        parts = parts[:-1]
    kept = [p for i, p in enumerate(parts) if i + 1 == len(parts) or not parts[i + 1].startswith(p)]
    return "/".join(kept) or name


def fitted_table(
    console: Console,
    title: str,
    columns: dict[str, bool],
    numeric: tuple[str, ...] = ("launches", "time µs", "µs", "share"),
    whole: tuple[str, ...] = ("layer", "kernel"),
) -> Table:
    """A table for a terminal of any width: light borders, the ``whole`` columns never cut,
    the ``numeric`` ones right-justified; ``columns`` maps each column to whether it is kept
    on a narrow terminal (below ``NARROW`` columns).
    """
    narrow = console.width < NARROW
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    for column, essential in columns.items():
        if essential or not narrow:
            table.add_column(column, justify="right" if column in numeric else "left",
                             no_wrap=column in whole)  # fmt: skip
    return table
