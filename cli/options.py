"""The options several commands share, and the store they open. Typer and the standard
library only: declaring a command must not load what running it needs (SQLAlchemy, ONNX,
pyopencl, cryptography), so that `octune --help` answers at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from octune.core.console import console
from octune.core.errors import OctuneError
from octune.core.precision import DTYPES, check_dtype
from octune.core.results import OBJECTIVES, Objective

if TYPE_CHECKING:
    from octune.db.store import Store

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db", help="SQLAlchemy URL [default: $OCTUNE_DATABASE_URL or SQLite in the user data dir]"
    ),
]
DeviceOption = Annotated[
    str | None,
    typer.Option("--device", "-d", help="device index or name substring (see `octune devices`)"),
]
KernelArgument = Annotated[
    str, typer.Argument(help="a kernel family (all its kernels), e.g. gemm, or one kernel")
]
ObjectiveOption = Annotated[
    Objective, typer.Option(help=f"what best means: {', '.join(OBJECTIVES)}")
]
#: The options every command that takes a network shares (`tune --model`, `workloads
#: from-onnx`, `run`, `report`).
BatchOption = Annotated[
    int | None, typer.Option(help="batch size: the first dimension of each dynamic input")
]
DimOption = Annotated[
    list[str] | None,
    typer.Option("--dim", help="NAME=SIZE for a dynamic dimension of the model; repeatable"),
]

#: The element type of a workload, a lookup or an export (`docs/precision.md`).
DtypeOption = Annotated[
    str, typer.Option(help=f"element type: {', '.join(DTYPES)} (numpy's names)")
]


def checked_dtype(value: str) -> str:
    """``--dtype``'s value, or a one-line error naming the choices."""
    try:
        return check_dtype(value)
    except ValueError as error:
        raise OctuneError(f"--dtype: {error}") from None


PUBLIC_KEY_ENV_VAR = "OCTUNE_BUNDLE_PUBLIC_KEY"
#: Every command that reads a bundle (`import`, `lookup`, `run --bundle`).
PublicKey = Annotated[
    str | None,
    typer.Option(
        envvar=PUBLIC_KEY_ENV_VAR,
        show_envvar=False,
        help=f"Ed25519 public key (PEM file or text; ${PUBLIC_KEY_ENV_VAR}): read a bundle only "
        "if it verifies the bundle's signature; compile a kernel version octune does not ship "
        "(from the bundle or the --server) only if it verifies its signature",
    ),
]

#: ``--json -`` (and ``--summary -``): the JSON on stdout alone, the console left quiet.
STDOUT = Path("-")


def json_on_stdout(path: Path | None) -> None:
    """Before a command prints anything: with ``-`` for its JSON file, nothing but the JSON
    goes to stdout (``console`` quiet, as ``--quiet`` makes it).
    """
    if path == STDOUT:
        console.quiet = True


def write_json(path: Path, text: str) -> None:
    """JSON ``text`` into ``path``, or onto stdout for ``-``; one line where it cannot be
    written.
    """
    if path == STDOUT:
        print(text)
        return
    try:
        path.write_text(text + "\n", encoding="utf-8")
    except OSError as error:
        raise OctuneError(f"cannot write {path}: {error.strerror}") from None


#: A command's report as JSON on stdout instead of tables (nothing else on stdout).
JsonOption = Annotated[bool, typer.Option("--json", help="print the result as JSON on stdout")]

#: Commands whose shape options follow the kernel name (`tune gemm --m 64 ...`).
SHAPE_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True}


def open_store(db: str | None) -> Store:
    """The database of --db, else $OCTUNE_DATABASE_URL, else SQLite in the user data dir."""
    from octune.db.store import Store

    return Store(db or Store.default_url())
