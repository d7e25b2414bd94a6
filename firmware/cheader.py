"""The C99 header of a firmware bundle: static tables and ``octune_<kernel>_lookup`` functions
with the semantics of ``octune.lookup.semantics`` (exact, nearest legal, the bundle's predicted
table, default), for runtimes without Python. No allocation, no globals that change, only
``<stddef.h>``, ``<stdint.h>`` and ``<stdio.h>`` (snprintf for the build options).

Distances use the same 16.16 fixed-point log2 table and integer arithmetic as the Python
lookup, and launch sizes are the same vetted expressions translated to C with Python's floor
division, so both pick the same config and sizes for every query; the tests compile the header
with ``gcc -std=c99 -Wall -Wextra -Werror`` and compare on random queries. The C lookup scans
the entries linearly (a few microseconds for a thousand); Python uses k-d trees with the same
tie-break (lowest entry index among equal distances).

The C text lies in ``templates/`` (``header.h.j2``, which includes ``kernel.h.j2`` per kernel,
with its ``follow.h.j2``, and ``family.h.j2`` per family); this module works out what they
write: tables, launch sizes and shape checks translated to C.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from octune.core.expressions import ExpressionError, vet_integer
from octune.lookup.data import Entry, LookupTable, TableError
from octune.lookup.neighbours import (
    LAYOUT_WEIGHT,
    LOG2_TABLE,
    LOG_BITS,
    LOG_TABLE_BITS,
    NEAR_DISTANCE,
    log2_fixed,
    size_bounds,
)
from octune.lookup.semantics import MATCH_RANK, MATCHES

if TYPE_CHECKING:
    import jinja2


def c_string(text: str) -> str:
    """A C string literal, split after each newline; '?' is escaped against trigraphs."""
    pieces, line = [], []
    for byte in text.encode():
        char = chr(byte)
        if char == "\\" or char == '"' or char == "?":
            line.append("\\" + char)
        elif char == "\n":
            line.append("\\n")
            pieces.append('"' + "".join(line) + '"')
            line = []
        elif 32 <= byte < 127:
            line.append(char)
        else:
            line.append(f"\\{byte:03o}")
    if line or not pieces:
        pieces.append('"' + "".join(line) + '"')
    return "\n    ".join(pieces)


def source_parts(text: str, limit: int = 4000) -> list[str]:
    """The source in pieces of at most ``limit`` bytes, cut after a newline where one is
    near: C99 compilers need only accept 4095-character string literals (-pedantic says so),
    and OpenCL takes a program as several strings anyway.
    """
    parts, rest = [], text.encode()
    while len(rest) > limit:
        cut = rest.rfind(b"\n", 0, limit) + 1 or limit
        while cut < len(rest) and rest[cut] & 0xC0 == 0x80:  # not inside a UTF-8 character
            cut -= 1
        parts.append(rest[:cut].decode())
        rest = rest[cut:]
    return [*parts, rest.decode()]


def _comment(text: str) -> str:
    """``text`` fit for a C comment: printable ASCII, with no ``*/`` to end it early and no
    ``/*`` for -Wcomment to refuse under -Werror (a device named so by whoever uploaded it).
    """
    return re.sub(r"[^ -~]", "?", text).replace("*/", "* /").replace("/*", "/ *")


def _c(
    text: str, params: Mapping[str, int], variables: Mapping[str, int], limits: Mapping[str, int]
) -> str:
    """An integer expression of the language (``vet_integer``) as C over ``c[i]``
    (parameters), ``v[i]`` (shape variables) and the device's limits, with Python's semantics:
    ``and``/``or`` give the deciding operand, ``//`` and ``%`` round toward minus infinity.
    """
    try:
        vetted = vet_integer(text, "launch expression")
    except ExpressionError as error:
        raise TableError(str(error)) from None
    for name in vetted.names:
        if name not in params and name not in variables and name not in limits:
            raise TableError(
                f"launch expression '{vetted.text}' uses '{name}', which is neither a "
                "parameter, a shape variable nor a device limit of the table"
            )

    def emit(node: ast.expr) -> str:
        match node:
            case ast.Constant(value=value):
                return f"INT64_C({int(value)})"
            case ast.Name(id=name) if name in params:
                return f"(int64_t)c[{params[name]}]"
            case ast.Name(id=name) if name in variables:
                return f"v[{variables[name]}]"
            case ast.Name(id=name):
                return f"INT64_C({limits[name]})"
            case ast.UnaryOp(op=op, operand=operand):
                sign = {ast.USub: "-", ast.UAdd: "+", ast.Not: "!"}[type(op)]
                return f"(int64_t)({sign}{emit(operand)})"
            case ast.BinOp(left=left, op=ast.Pow(), right=ast.Constant(value=exponent)):
                return "(" + " * ".join([emit(left)] * exponent or ["INT64_C(1)"]) + ")"
            case ast.BinOp(left=left, op=op, right=right):
                a, b = emit(left), emit(right)
                if isinstance(op, ast.FloorDiv | ast.Mod):
                    helper = "floordiv" if isinstance(op, ast.FloorDiv) else "mod"
                    return f"octune_{helper}_(&bad, {a}, {b})"
                return f"({a} {_C_ARITHMETIC[type(op)]} {b})"
            case ast.Compare(left=left, ops=ops, comparators=comparators):
                terms = [emit(term) for term in (left, *comparators)]
                tests = [
                    f"({a} {_C_COMPARE[type(op)]} {b})"
                    for op, a, b in zip(ops, terms, terms[1:], strict=False)
                ]
                return f"(int64_t)({' && '.join(tests)})"
            case ast.BoolOp(op=op, values=values):
                *first, result = [emit(value) for value in values]
                for value in reversed(first):  # pure operands: each may be evaluated twice
                    if isinstance(op, ast.And):
                        result = f"({value} ? {result} : {value})"
                    else:
                        result = f"({value} ? {value} : {result})"
                return result
            case ast.IfExp(test=test, body=body, orelse=orelse):
                return f"({emit(test)} ? {emit(body)} : {emit(orelse)})"
            case ast.Call(func=ast.Name(id=name), args=args):
                emitted = [emit(arg) for arg in args]
                if name in ("ceil_div", "round_up"):
                    return f"octune_{name}_(&bad, {emitted[0]}, {emitted[1]})"
                result = emitted[0]
                for arg in emitted[1:]:
                    result = f"octune_{name}_({result}, {arg})"
                return result
        raise AssertionError(f"vet let through {ast.dump(node)}")  # pragma: no cover

    return emit(vetted.tree)


_C_ARITHMETIC = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}
_C_COMPARE = {
    ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
}  # fmt: skip


#: How a kernel's arguments are laid out (``Family.argument_layout``): ``OCTUNE_ARGS_*``, 0 for
#: a kernel no runtime launches.
ARGUMENT_LAYOUTS = ("gemm", "gemm_int8", "conv2d", "conv2d_int8", "conv2d_as_gemm")


def _arguments(table: LookupTable) -> str:
    from octune.catalogue.registry import families

    family = families().get(table.problem.name)
    layout = family.argument_layout(table.entry, table.dtype) if family is not None else None
    return f"OCTUNE_ARGS_{layout.upper()}" if layout in ARGUMENT_LAYOUTS else "OCTUNE_ARGS_NONE"


def _prefix(table: LookupTable) -> str:
    return "octune_kernel_" + re.sub(r"[^A-Za-z0-9_]", "_", table.kernel)


def _entries(
    prefix: str,
    kind: str,
    entries: Sequence[Entry],
    configs: Mapping[tuple[int, ...], int],
    sizes: int,
) -> str:
    rows = [
        "{{" + ", ".join(map(str, e.shape)) + "}, {"
        + ", ".join(str(log2_fixed(v)) for v in e.shape[:sizes]) + "}, "
        + f"{configs[e.config]}, {e.time_s!r}, {e.gflops!r}}}"
        for e in entries
    ]  # fmt: skip
    body = ",\n    ".join(rows) if rows else "{{0}, {0}, 0, 0.0, 0.0}"
    return (
        f"static const struct {prefix}_entry_ {prefix}_{kind}_[{max(len(rows), 1)}] = {{\n"
        f"    {body}\n}};\n"
    )


def _shape_checks(table: LookupTable) -> str:
    """C that fills v[] (shape variables, derived ones) from q[] and returns OCTUNE_MATCH_NONE
    for a shape
    the Python lookup refuses: out of range, impossible, past 32-bit indexing, not taken.
    """
    problem = table.problem
    variables = {name: i for i, name in enumerate(problem.variables)}
    keys = problem.keys
    lines = [
        f"    if (q[{i}] < INT64_C({low}) || q[{i}] > INT64_C({high})) return OCTUNE_MATCH_NONE;"
        for i, (low, high) in enumerate(problem.ranges)
    ]
    lines += [
        f"    v[{i}] = q[{keys.index(key)}];" for i, key in enumerate(problem.shape_vars.values())
    ]
    first = len(problem.shape_vars)
    lines += [
        f"    v[{first + i}] = {_c(text, {}, variables, {})};"
        for i, (_, text) in enumerate(problem.derived)
    ]
    lines += [
        f"    if (bad || !({_c(text, {}, variables, {})})) return OCTUNE_MATCH_NONE;"
        for text, _ in problem.rules
    ]
    if problem.max_elements:
        lines += [
            f"    if (bad || {_c(text, {}, variables, {})} > INT64_C({problem.max_elements})) "
            "return OCTUNE_MATCH_NONE;"
            for text in problem.extents
        ]
    lines += [
        f"    if (bad || !({_c(text, {}, variables, {})})) return OCTUNE_MATCH_NONE;"
        for text in table.requires
    ]
    lines.append("    if (bad) return OCTUNE_MATCH_NONE;")
    return "\n".join(lines)


def _kernel(table: LookupTable, template: str) -> dict[str, Any]:
    """What ``kernel.h.j2`` writes of one kernel: its tables, launch sizes translated to C,
    and its lookup over a shape array q (``Problem.keys`` order).
    """
    p = _prefix(table)
    problem = table.problem
    dtype = table.dtype
    tuned = [e for e in table.tuned if e.dtype == dtype]
    predictions = [e for e in table.predictions if e.dtype == dtype]
    configs: dict[tuple[int, ...], int] = {table.default_config: 0}
    for entry in (*tuned, *predictions):
        configs.setdefault(entry.config, len(configs))
    define_names = [*problem.flag_defines, *table.parameters]
    parts = source_parts(template)
    return {
        "p": p,
        "macro": p.upper(),
        "name": _comment(table.kernel),
        "problem_name": _comment(problem.name),
        "key_names": ", ".join(problem.keys),
        "dtype": dtype,
        "ntuned": len(tuned),
        "npredicted": len(predictions),
        "nparams": len(table.parameters),
        "ndefines": len(define_names),
        "first_param": len(problem.flag_defines),
        "dims": len(table.launch_local),
        "nkeys": len(problem.keys),
        "nsizes": len(problem.sizes),
        "nvars": len(problem.variables),
        "arguments": _arguments(table),
        "kernel_string": c_string(table.kernel),
        "entry_string": c_string(table.entry),
        "sha_string": c_string(table.sha256),
        "extra_string": c_string(" ".join(table.extra_build_options)),
        "define_names": ", ".join(c_string(n) for n in define_names),
        "nparts": len(parts),
        "parts": ",\n    ".join(c_string(part) for part in parts),
        "nconfigs": len(configs),
        "config_rows": ",\n    ".join("{" + ", ".join(map(str, row)) + "}" for row in configs),
        "entries": _entries(p, "tuned", tuned, configs, len(problem.sizes))
        + _entries(p, "predicted", predictions, configs, len(problem.sizes)),
        "flag_copies": "\n".join(
            f"    cfg->defines[{i}] = (int)q[{problem.keys.index(key)}];"
            for i, key in enumerate(problem.flag_defines.values())
        ),
        **_launch_code(table),
        "shape_checks": _shape_checks(table),
        "inside": _inside(table, tuned),
        "flops": _c(problem.flops, {}, {n: i for i, n in enumerate(problem.variables)}, {}),
    }


def _launch_code(table: LookupTable) -> dict[str, Any]:
    """The launch sizes, follow-up launches and workspace in C, with the device's limits
    checked as ``KernelIndex.launch`` checks them.
    """
    params = {name: i for i, name in enumerate(table.parameters)}
    variables = {name: i for i, name in enumerate(table.problem.variables)}

    def c(text: str) -> str:
        return _c(text, params, variables, table.limits)

    limit_checks = [
        f"    if (l[{d}] > INT64_C({limit})) return 0;"
        for d in range(len(table.launch_local))
        if (limit := table.limits.get(f"max_work_item_size_{d}")) is not None
    ]
    group_limit = table.limits.get("max_work_group_size")
    if group_limit is not None:
        limit_checks.append(f"    if (group > INT64_C({group_limit})) return 0;")
    buffer = table.limits.get("max_buffer_bytes")
    then = [
        {
            "entry": c_string(step.entry),
            "sizes": [
                {"global_": c(global_), "local": c(local),
                 "limit": table.limits.get(f"max_work_item_size_{d}")}
                for d, (global_, local) in enumerate(
                    zip(step.launch_global, step.launch_local, strict=True)
                )
            ],
        }
        for step in table.then
    ]  # fmt: skip
    return {
        "global_lines": "\n".join(
            f"    g[{d}] = {c(text)};" for d, text in enumerate(table.launch_global)
        ),
        "local_lines": "\n".join(
            f"    l[{d}] = {c(text)};" for d, text in enumerate(table.launch_local)
        ),
        "limit_checks": "\n".join(limit_checks),
        "group_limit": group_limit,
        "then": then,
        "workspace": "0" if table.workspace is None else c(table.workspace),
        "workspace_limit": "" if buffer is None else f" || workspace > INT64_C({buffer // 4})",
    }


def _inside(table: LookupTable, tuned: Sequence[Entry]) -> str:
    """C setting ``inside`` as ``KernelIndex.inside``: every size within the tuned range."""
    bounds = size_bounds(tuned, len(table.problem.sizes)).get(table.dtype)
    if bounds is None:
        return "    inside = 0;"
    low, high = bounds
    checks = " || ".join(
        f"q[{d}] < {low[d]} || q[{d}] > {high[d]}" for d in range(len(table.problem.sizes))
    )
    return f"    inside = !({checks});"


def _family(name: str, dtype: str, tables: Sequence[LookupTable]) -> dict[str, Any]:
    """What ``family.h.j2`` writes of a family's lookup for one dtype: each kernel's answer,
    the fastest kept (``best_answer``'s order). float32's is ``octune_gemm_lookup``, the
    others' name their dtype (``octune_gemm_float16_lookup``), so no answer crosses dtypes.
    """
    problem = tables[0].problem
    keys = problem.keys
    function = name if dtype == "float32" else f"{name}_{dtype}"
    defaults = {key: value for key, value in problem.defaults if value}
    return {
        "macro": re.sub(r"[^A-Za-z0-9_]", "_", function).upper(),
        "query_fields": "\n".join(
            f"    long {key};" + (f"  /* 0: {defaults[key]} */" if key in defaults else "")
            for key in problem.keys
        ),
        "query_args": ", ".join(
            f"q->{key} ? q->{key} : {defaults[key]}" if key in defaults else f"q->{key}"
            for key in keys
        ),
        "name": _comment(f"{name} {dtype}"),
        "function": "octune_" + re.sub(r"[^A-Za-z0-9_]", "_", function),
        "key_names": ", ".join(keys),
        "nkeys": len(keys),
        "kernels": ", ".join(_comment(t.kernel) for t in tables),
        "args": ", ".join(f"long {key}" for key in keys),
        "fill": " ".join(f"q_[{i}] = {key};" for i, key in enumerate(keys)),
        "calls": "\n".join(
            f"    if ({_prefix(t)}_lookup(q_, &candidate_)) "
            "octune_keep_better_(cfg, &candidate_, &found_);"
            for t in sorted(tables, key=lambda t: (-t.fit, t.kernel))
        ),
    }


#: What a header's names may start with instead of ``octune``: a C identifier's start.
PREFIX = re.compile(r"^[a-z][a-z0-9_]{0,30}$")
#: C string literals (left alone: kernel sources and build options name OCTUNE_ defines),
#: and the identifiers the header declares.
_NAMES = re.compile(r'"(?:\\.|[^"\\\n])*"|\boctune_|\bOCTUNE_')


def prefixed(text: str, prefix: str) -> str:
    """The header with its names starting ``prefix_`` / ``PREFIX_`` instead of ``octune_`` /
    ``OCTUNE_`` (its functions, types, macros and include guard), so that two devices' headers
    live in one firmware; string literals (sources, build options, names) unchanged.
    """
    if prefix == "octune":
        return text

    def rename(match: re.Match[str]) -> str:
        found = match.group(0)
        if found.startswith('"'):
            return found
        return f"{prefix.upper()}_" if found.isupper() else f"{prefix}_"

    return _NAMES.sub(rename, text)


def render(
    device: Mapping[str, Any],
    tables: Sequence[LookupTable],
    sources: Mapping[str, tuple[str, str]],
    manifest: Mapping[str, Any],
    prefix: str = "octune",
) -> str:
    """The whole header for one device's tables (``templates/header.h.j2``), its names
    starting ``prefix_`` (``prefixed``).
    """
    by_family: dict[tuple[str, str], list[LookupTable]] = {}
    for table in tables:
        by_family.setdefault((table.problem.name, table.dtype), []).append(table)
    name, driver = (_comment(str(device.get(key, "?"))) for key in ("name", "driver_version"))
    return prefixed(
        _templates()
        .get_template("header.h.j2")
        .render(
            device_name=name,
            driver=driver,
            fingerprint=re.sub(r"[^0-9a-f]", "", str(device.get("fingerprint", ""))),
            written=_comment(f"octune {manifest['octune_version']} at {manifest['created_at']}"),
            device_name_string=c_string(str(device.get("name", ""))),
            driver_string=c_string(str(device.get("driver_version", ""))),
            # Numbered from 1: a lookup returns 0 (OCTUNE_MATCH_NONE) for no answer, so that
            # `if (!octune_gemm_lookup(...))` tests for a failure, not for an exact hit.
            matches="\n".join(
                f"#define OCTUNE_MATCH_{m.upper()} {i}" for i, m in enumerate(MATCHES, 1)
            ),
            nmatches=len(MATCHES) + 1,
            match_names=", ".join(c_string(m) for m in ("none", *MATCHES)),
            ranks="{" + ", ".join(str(r) for r in (99, *(MATCH_RANK[m] for m in MATCHES))) + "}",
            argument_layouts="\n".join(
                f"#define OCTUNE_ARGS_{layout.upper()} {i}"
                for i, layout in enumerate(ARGUMENT_LAYOUTS, 1)
            ),
            log_bits=LOG_BITS,
            log_table_size=1 << LOG_TABLE_BITS,
            near_distance=NEAR_DISTANCE,
            layout_weight=LAYOUT_WEIGHT,
            log_rows=",\n    ".join(
                ", ".join(str(v) for v in LOG2_TABLE[i : i + 12])
                for i in range(0, len(LOG2_TABLE), 12)
            ),
            max_then=max((len(t.then) for t in tables), default=0) or 1,
            max_keys=max((len(t.problem.keys) for t in tables), default=1),
            max_defines=max(
                (len(t.problem.flag_defines) + len(t.parameters) for t in tables), default=1
            ),
            kernels=[_kernel(table, sources[table.sha256][0]) for table in tables],
            families=[
                _family(name, dtype, group) for (name, dtype), group in sorted(by_family.items())
            ],
        ),
        prefix,
    )


@cache
def _templates() -> jinja2.Environment:
    """The header's text (``header.h.j2`` includes a kernel's, its follow-ups' and a family's),
    loaded on first use: a device that only reads bundles needs nothing but Python.
    """
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("octune.firmware", "templates"),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # C source, not HTML
    )
