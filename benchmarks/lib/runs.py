"""Earlier runs' ``--out`` files (gzipped or not) and the configs they chose, for the scripts that
re-time those configs without tuning again.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections.abc import Iterable, Mapping
from pathlib import Path


def read_run(path: Path) -> bytes:
    """An earlier run's ``--out`` file or database, gzipped as the kept ones are, or not."""
    return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()


def write_run(path: Path, run: dict[str, object]) -> None:
    """``--out``: gzipped where its name ends in .gz, as ``read_run`` reads it."""
    text = json.dumps(run, indent=1).encode()
    path.write_bytes(gzip.compress(text) if path.suffix == ".gz" else text)


def chosen_configs(
    paths: list[Path], prefix: str = "gemm", missing: Mapping[str, int] | None = None
) -> list[tuple[str, str, dict[str, int]]]:
    """(shape, kernel, config) of each row of earlier runs whose kernel's name starts with
    ``prefix`` (by default gemm.cl's kernels, whose tiles the A/B scripts vary), first run first;
    ``missing`` (``--missing``) fills the parameters a run's configs lack.
    """
    return [
        (row["shape"], row["kernel"], {**(missing or {}), **row["config"]})
        for path in paths
        for row in json.loads(read_run(path))["rows"]
        if row.get("config") and row["kernel"].startswith(prefix)
    ]


def add_missing_argument(parser: argparse.ArgumentParser, *default: str) -> None:
    """``--missing``, for the scripts that re-time configs of earlier runs: a parameter added to
    a space since a run is absent from its configs, and the value that builds the kernel the run
    timed has to be given.
    """
    parser.add_argument("--missing", nargs="*", default=list(default), metavar="NAME=VALUE",
                        help="parameters newer than the runs, at the value that builds the "
                             "kernel they ran")  # fmt: skip


def assignments(items: Iterable[str]) -> dict[str, int]:
    """``NAME=VALUE`` items (a config's parameters on the command line) as a mapping."""
    pairs = (item.partition("=") for item in items if item)
    return {name.strip(): int(value) for name, _, value in pairs}
