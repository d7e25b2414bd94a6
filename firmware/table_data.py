"""A lookup table as plain data and back (``table_to_data``, ``table_from_data``): what a
bundle's lookup.json holds and its SQLite form is built from, every field checked on the way
back, since a bundle comes from a file. Standard library only, as the lookup.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from octune.core.precision import check_dtype
from octune.core.problem import Problem
from octune.lookup.data import Entry, FollowUp, LookupTable

ENTRY_COLUMNS = ["shape", "dtype", "config", "time_s", "spread_s", "gflops", "workload_key"]


def source_files(table: LookupTable) -> tuple[str, str]:
    """Where a kernel version's template and space live inside a bundle."""
    stem = f"kernels/{table.kernel}-{table.sha256[:16]}"
    return f"{stem}.cl", f"{stem}.yaml"


def table_to_data(table: LookupTable) -> dict[str, Any]:
    """A table as JSON-able data; configs are listed once and entries refer to them."""
    configs: dict[tuple[int, ...], int] = {}
    for entry in (*table.tuned, *table.predictions):
        configs.setdefault(entry.config, len(configs))

    def rows(entries: Sequence[Entry]) -> dict[str, Any]:
        return {
            "columns": ENTRY_COLUMNS,
            "rows": [
                [list(e.shape), e.dtype, configs[e.config], e.time_s, e.spread_s, e.gflops,
                 e.workload_key]
                for e in entries
            ],
        }  # fmt: skip

    template, space = source_files(table)
    return {
        "kernel": table.kernel,
        "sha256": table.sha256,
        "entry": table.entry,
        "device_fingerprint": table.device_fingerprint,
        "problem": {
            "name": table.problem.name,
            "sizes": list(table.problem.sizes),
            "flags": list(table.problem.flags),
            "shape_vars": table.problem.shape_vars,
            "flag_defines": table.problem.flag_defines,
            "dtypes": list(table.problem.dtypes),
            "max_size": table.problem.max_size,
            "flops": table.problem.flops,
            "ranges": [list(r) for r in table.problem.ranges],
            "derived": [list(d) for d in table.problem.derived],
            "rules": [list(r) for r in table.problem.rules],
            "extents": list(table.problem.extents),
            "max_elements": table.problem.max_elements,
            "defaults": [list(d) for d in table.problem.defaults],
        },
        "requires": list(table.requires),
        "dtype": table.dtype,
        "fit": table.fit,
        "parameters": list(table.parameters),
        "launch": {"global": list(table.launch_global), "local": list(table.launch_local)},
        "workspace": table.workspace,
        "then": [
            {
                "entry": step.entry,
                "global": list(step.launch_global),
                "local": list(step.launch_local),
            }
            for step in table.then
        ],
        "limits": table.limits,
        "default_config": list(table.default_config),
        "extra_build_options": list(table.extra_build_options),
        "sources": {"template": template, "space": space},
        "configs": [list(config) for config in configs],
        "tuned": rows(table.tuned),
        "predictions": rows(table.predictions),
    }


def _ints(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise ValueError(f"{what} must be a list of integers")
    return tuple(value)


def _strings(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of strings")
    return tuple(value)


def _mapping(value: object, kind: type, what: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and type(v) is kind for k, v in value.items()
    ):
        raise ValueError(f"{what} must map names to {kind.__name__}s")
    return dict(value)


def _number(value: object, what: str) -> float:
    if type(value) not in (int, float) or not value == value:  # NaN never equals itself
        raise ValueError(f"{what} must be a number")
    return float(value)  # type: ignore[arg-type]


def _follow_ups(value: object) -> tuple[FollowUp, ...]:
    if not isinstance(value, list) or not all(isinstance(step, dict) for step in value):
        raise ValueError("then must be a list of launches")
    return tuple(
        FollowUp(
            _text(step["entry"], "then.entry"),
            _strings(step["global"], "then.global"),
            _strings(step["local"], "then.local"),
        )
        for step in value
    )


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string")
    return value


# What octune itself passes a compiler besides the defines: -w, -cl-... switches, -D NAME=int.
# A table asking for anything else (an include path, a plugin to load) was not written by it.
_BUILD_OPTION = re.compile(r"-w|-cl-[a-z0-9-]+|-D[A-Za-z_][A-Za-z0-9_]*(=-?[0-9]+)?")


def _build_options(value: object) -> tuple[str, ...]:
    options = _strings(value, "extra_build_options")
    for option in options:
        if not _BUILD_OPTION.fullmatch(option):
            raise ValueError(f"extra_build_options holds {option!r}, not an option octune writes")
    return options


def table_from_data(data: Mapping[str, Any]) -> LookupTable:
    """Inverse of ``table_to_data``, checking every field's type (ValueError says which)."""
    kernel = _text(data["kernel"], "kernel")
    problem = _problem(data["problem"])
    configs = [_ints(c, f"{kernel} configs") for c in data["configs"]]

    def entries(kind: str) -> tuple[Entry, ...]:
        block = data[kind]
        if block["columns"] != ENTRY_COLUMNS:
            raise ValueError(f"{kind} columns must be {ENTRY_COLUMNS}")
        out = []
        for row in block["rows"]:
            shape, dtype, config, time_s, spread_s, gflops, key = row
            if type(config) is not int or not 0 <= config < len(configs):
                raise ValueError(f"{kind} row {key!r} refers to config {config!r}, not listed")
            out.append(
                Entry(
                    shape=_ints(shape, f"{kind} shape"),
                    dtype=_text(dtype, f"{kind} dtype"),
                    config=configs[config],
                    time_s=_number(time_s, f"{kind} time_s"),
                    spread_s=_number(spread_s, f"{kind} spread_s"),
                    gflops=_number(gflops, f"{kind} gflops"),
                    workload_key=_text(key, f"{kind} workload_key"),
                )
            )
        return tuple(out)

    return LookupTable(
        kernel=kernel,
        sha256=_text(data["sha256"], "sha256"),
        entry=_text(data["entry"], "entry"),
        device_fingerprint=_text(data["device_fingerprint"], "device_fingerprint"),
        problem=problem,
        parameters=_strings(data["parameters"], "parameters"),
        launch_global=_strings(data["launch"]["global"], "launch.global"),
        launch_local=_strings(data["launch"]["local"], "launch.local"),
        limits=_mapping(data["limits"], int, "limits"),
        default_config=_ints(data["default_config"], "default_config"),
        extra_build_options=_build_options(data["extra_build_options"]),
        tuned=entries("tuned"),
        predictions=entries("predictions"),
        requires=_strings(data.get("requires", []), "requires"),
        workspace=None if data.get("workspace") is None else _text(data["workspace"], "workspace"),
        then=_follow_ups(data.get("then", [])),
        fit=_fit(data.get("fit", 1)),  # bundles before 2026-11-28: every kernel for any device
        dtype=_dtype(data.get("dtype", "float32")),  # bundles before 2026-11-29: float32 only
    )


def _dtype(value: object) -> str:
    return check_dtype(_text(value, "dtype"))


def _fit(value: object) -> int:
    if type(value) is not int or value not in (0, 1, 2):
        raise ValueError(f"fit must be 0, 1 or 2, not {value!r}")
    return value


def _problem(data: Mapping[str, Any]) -> Problem:
    """A table's problem; bundles written before kernel families were plug-ins (GEMM only)
    carry ``flops_per_point`` and operands as key lists: read as the expressions they mean.
    """
    sizes = _strings(data["sizes"], "problem.sizes")
    flags = _strings(data["flags"], "problem.flags")
    shape_vars = _mapping(data["shape_vars"], str, "problem.shape_vars")
    max_size = int(_number(data["max_size"], "problem.max_size"))
    var_of = {key: var for var, key in shape_vars.items()}
    if "flops" in data:
        flops = _text(data["flops"], "problem.flops")
        ranges = tuple(_ints(r, "problem.ranges") for r in data["ranges"])
        extents = _strings(data["extents"], "problem.extents")
    else:
        per_point = int(_number(data["flops_per_point"], "problem.flops_per_point"))
        flops = " * ".join([str(per_point), *(var_of[key] for key in sizes)])
        data = {**data, "defaults": [[flag, 0] for flag in flags]}
        ranges = (*((1, max_size) for _ in sizes), *((0, 1) for _ in flags))
        extents = tuple(
            " * ".join(var_of[key] for key in _strings(operand, "problem.operands"))
            for operand in data.get("operands", [])
        )
    if len(ranges) != len(sizes) + len(flags) or any(len(r) != 2 for r in ranges):
        raise ValueError("problem.ranges must give (low, high) for every size and flag")
    return Problem(
        name=_text(data["name"], "problem.name"),
        sizes=sizes,
        flags=flags,
        shape_vars=shape_vars,
        flag_defines=_mapping(data["flag_defines"], str, "problem.flag_defines"),
        dtypes=_strings(data["dtypes"], "problem.dtypes"),
        max_size=max_size,
        flops=flops,
        ranges=tuple((low, high) for low, high in ranges),
        derived=tuple(_pair(d, "problem.derived") for d in data.get("derived", [])),
        rules=tuple(_pair(r, "problem.rules") for r in data.get("rules", [])),
        extents=extents,
        max_elements=int(_number(data.get("max_elements", 0), "problem.max_elements")),
        defaults=tuple(
            (_text(key, "problem.defaults"), int(_number(value, "problem.defaults")))
            for key, value in (_pair_any(d) for d in data.get("defaults", []))
        ),
    )


def _pair_any(value: object) -> tuple[object, object]:
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError("problem.defaults entries must be [key, value] pairs")
    return value[0], value[1]


def _pair(value: object, what: str) -> tuple[str, str]:
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError(f"{what} entries must be [name or expression, text] pairs")
    first, second = _strings(value, what)
    return first, second
