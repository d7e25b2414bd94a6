"""Earlier runs' ``--out`` files (gzipped or not) and the configs they chose, for the scripts that
re-time those configs without tuning again.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

from octune.catalogue.family import Workload
from octune.catalogue.registry import load_kernel

from .conv_shapes import Layer
from .gemm_shapes import class_of, parse_shape


def read_run(path: Path) -> bytes:
    """An earlier run's ``--out`` file or database, gzipped as the kept ones are, or not."""
    return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()


def write_run(path: Path, run: dict[str, object]) -> None:
    """``--out``: gzipped where its name ends in .gz, as ``read_run`` reads it."""
    text = json.dumps(run, indent=1).encode()
    path.write_bytes(gzip.compress(text) if path.suffix == ".gz" else text)


#: The fields a conv_layers.py row must have to name its layer.
LAYER_KEYS = {f.name for f in fields(Layer) if f.default is MISSING}


@dataclass(frozen=True)
class Pick:
    """A config an earlier run chose for one workload: a ``gemm_classes.py`` row (a shape) or a
    ``conv_layers.py`` row (a layer), named and grouped as that script reports it.
    """

    label: str
    group: str  # GEMM: the shape's class; conv: the layer's kind
    workload: Workload
    kernel: str
    config: dict[str, int]


def chosen_picks(
    paths: list[Path], missing: Mapping[str, int] | None = None, latest: bool = False
) -> list[Pick]:
    """Every row of earlier GEMM or conv runs that chose a config, first run first (with
    ``latest``, each workload's last one only); ``missing`` (``--missing``) fills the
    parameters a run's configs lack, where the kernel's space has them.
    """
    picks = []
    for path in paths:
        for row in json.loads(read_run(path))["rows"]:
            if not row.get("config"):
                continue
            known = load_kernel(row["kernel"]).space.parameter_names
            filled = {name: value for name, value in (missing or {}).items() if name in known}
            config = {**filled, **row["config"]}
            if "shape" in row:
                shape = row["shape"]
                workload, label, group = parse_shape(shape), shape, class_of(shape)
            elif row.keys() >= LAYER_KEYS:
                layer = Layer(**{f.name: row[f.name] for f in fields(Layer) if f.name in row})
                workload, group = layer.workload(), layer.kind
                label = f"{layer.name} @{layer.n}"
            else:
                raise SystemExit(f"{path}: a row with neither a shape (gemm_classes.py) nor "
                                 "a layer (conv_layers.py): give those scripts' --out")  # fmt: skip
            picks.append(Pick(label, group, workload, row["kernel"], config))
    return list({pick.label: pick for pick in picks}.values()) if latest else picks


def chosen_configs(
    paths: list[Path], prefix: str = "gemm", missing: Mapping[str, int] | None = None
) -> list[tuple[str, str, dict[str, int]]]:
    """(shape, kernel, config) of each GEMM row of earlier runs whose kernel's name starts with
    ``prefix`` (by default gemm.cl's kernels, whose tiles the A/B scripts vary), first run first;
    ``missing`` as in ``chosen_picks``.
    """
    return [
        (pick.label, pick.kernel, pick.config)
        for pick in chosen_picks(paths, missing)
        if pick.workload.problem == "gemm" and pick.kernel.startswith(prefix)
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
