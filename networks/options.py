"""The options every command that takes a network shares (``tune --model``, ``workloads
from-onnx``, ``run``, ``report``); typer only, so the CLI loads no ONNX to declare them.
"""

from __future__ import annotations

from typing import Annotated

import typer

BatchOption = Annotated[
    int | None, typer.Option(help="batch size: the first dimension of each dynamic input")
]
DimOption = Annotated[
    list[str] | None,
    typer.Option("--dim", help="NAME=SIZE for a dynamic dimension of the model; repeatable"),
]
