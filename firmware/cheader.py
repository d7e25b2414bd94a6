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
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from typing import Any

from octune.lookup.semantics import (
    LAYOUT_WEIGHT,
    LOG2_TABLE,
    LOG_BITS,
    LOG_TABLE_BITS,
    MATCHES,
    NEAR_DISTANCE,
    Entry,
    KernelTable,
    TableError,
    check_call,
    check_operand,
    log2_fixed,
)

_HELPERS = """\
/* Python's floor division and modulo; *bad is set where the divisor is zero. */
static inline int64_t octune_floordiv_(int *bad, int64_t a, int64_t b) {
    int64_t q;
    if (b == 0) { *bad = 1; return 0; }
    q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0))) q -= 1;
    return q;
}
static inline int64_t octune_mod_(int *bad, int64_t a, int64_t b) {
    int64_t r;
    if (b == 0) { *bad = 1; return 0; }
    r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}
static inline int64_t octune_ceil_div_(int *bad, int64_t a, int64_t b) {
    return -octune_floordiv_(bad, -a, b);
}
static inline int64_t octune_round_up_(int *bad, int64_t a, int64_t b) {
    return octune_ceil_div_(bad, a, b) * b;
}
static inline int64_t octune_min_(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t octune_max_(int64_t a, int64_t b) { return a > b ? a : b; }

/* log2(v) of v's 11 leading bits in 16.16 fixed point, as octune.lookup.semantics.log2_fixed. */
static inline int64_t octune_log2_fixed_(int64_t v) {
    int shift = 0;
    while ((v >> shift) >= OCTUNE_LOG_TABLE_SIZE) shift++;
    return (int64_t)octune_log2_table_[v >> shift] + ((int64_t)shift << OCTUNE_LOG_BITS);
}
"""


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
    return re.sub(r"[^ -~]", "?", text).replace("*/", "* /")


def _c_expression(
    node: ast.expr,
    params: Mapping[str, int],
    shape_vars: Mapping[str, str],
    limits: Mapping[str, int],
) -> str:
    """A vetted launch expression as C over ``c[i]`` (parameters) and ``M``, ``N``, ``K``."""
    text = ast.unparse(node)

    def emit(node: ast.expr) -> str:
        if isinstance(node, ast.Constant | ast.Name):
            value = check_operand(node, {**params, **shape_vars}, limits, text)
            if isinstance(value, int):
                return f"INT64_C({value})"
            return f"(int64_t)c[{params[value]}]" if value in params else value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            sign = "-" if isinstance(node.op, ast.USub) else "+"
            return f"({sign}{emit(node.operand)})"
        if isinstance(node, ast.BinOp):
            left, right = emit(node.left), emit(node.right)
            if isinstance(node.op, ast.Add | ast.Sub | ast.Mult):
                symbol = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}[type(node.op)]
                return f"({left} {symbol} {right})"
            if isinstance(node.op, ast.FloorDiv):
                return f"octune_floordiv_(&bad, {left}, {right})"
            if isinstance(node.op, ast.Mod):
                return f"octune_mod_(&bad, {left}, {right})"
        if isinstance(node, ast.Call):
            name = check_call(node, text)
            args = [emit(arg) for arg in node.args]
            if name in ("ceil_div", "round_up"):
                return f"octune_{name}_(&bad, {args[0]}, {args[1]})"
            result = args[0]
            for arg in args[1:]:
                result = f"octune_{name}_({result}, {arg})"
            return result
        raise TableError(f"launch expression '{text}' cannot be translated to C")

    return emit(node)


def _prefix(table: KernelTable) -> str:
    return "octune_" + re.sub(r"[^A-Za-z0-9_]", "_", table.kernel)


def _entries(
    prefix: str, kind: str, entries: Sequence[Entry], configs: Mapping[tuple[int, ...], int]
) -> str:
    rows = [
        "{{" + ", ".join(map(str, e.shape)) + "}, {"
        + ", ".join(str(log2_fixed(v)) for v in e.shape[:3]) + "}, "
        + f"{configs[e.config]}, {e.time_s!r}, {e.gflops!r}}}"
        for e in entries
    ]  # fmt: skip
    body = ",\n    ".join(rows) if rows else "{{0}, {0}, 0, 0.0, 0.0}"
    return (
        f"static const struct {prefix}_entry_ {prefix}_{kind}_[{max(len(rows), 1)}] = {{\n"
        f"    {body}\n}};\n"
    )


def _kernel(table: KernelTable, template: str) -> str:
    """One kernel's tables and functions."""
    p = _prefix(table)
    macro = p.upper()
    problem = table.problem
    if tuple(problem.shape_vars) != ("M", "N", "K") or len(problem.keys) != 5:
        raise TableError(f"the C header supports GEMM-like kernels only, not {problem.name}")
    dtype = problem.dtypes[0]
    tuned = [e for e in table.tuned if e.dtype == dtype]
    predictions = [e for e in table.predictions if e.dtype == dtype]
    configs: dict[tuple[int, ...], int] = {table.default_config: 0}
    for entry in (*tuned, *predictions):
        configs.setdefault(entry.config, len(configs))
    params = {name: i for i, name in enumerate(table.parameters)}
    flag_defines = list(problem.flag_defines)
    flag_copies = "\n".join(
        f"    cfg->defines[{i}] = (int)q[{problem.keys.index(key)}];"
        for i, key in enumerate(problem.flag_defines.values())
    )
    define_names = [*flag_defines, *table.parameters]
    dims = len(table.launch_local)
    expressions = [
        _c_expression(ast.parse(text, mode="eval").body, params, problem.shape_vars, table.limits)
        for text in (*table.launch_global, *table.launch_local)
    ]
    extra = " ".join(table.extra_build_options)
    limit_checks = []
    for d in range(dims):
        limit = table.limits.get(f"max_work_item_size_{d}")
        if limit is not None:
            limit_checks.append(f"    if (l[{d}] > INT64_C({limit})) return 0;")
    # Shapes the tuner refuses (an operand past 32-bit indexing) get -1, as in Python.
    operand_checks = "".join(
        f"    if ({' * '.join(f'q[{problem.keys.index(key)}]' for key in operand)} > "
        f"INT64_C({problem.max_elements})) return -1;\n"
        for operand in (problem.operands if problem.max_elements else ())
    )
    group_limit = table.limits.get("max_work_group_size")
    if group_limit is not None:
        limit_checks.append(f"    if (group > INT64_C({group_limit})) return 0;")
    config_rows = ",\n    ".join("{" + ", ".join(map(str, c)) + "}" for c in configs)
    entries = _entries(p, "tuned", tuned, configs) + _entries(p, "predicted", predictions, configs)
    name = _comment(table.kernel)
    parts = source_parts(template)
    parts_text = ",\n    ".join(c_string(part) for part in parts)
    launch_args = f"int64_t g[{macro}_WORK_DIM], int64_t l[{macro}_WORK_DIM]"
    first_param = len(flag_defines)
    return f"""
/* ---- kernel {name}: {len(tuned)} tuned workloads, {len(predictions)} model answers ---- */

#define {macro}_NPARAMS {len(table.parameters)}
#define {macro}_NDEFINES {len(define_names)}
#define {macro}_WORK_DIM {dims}
#define {macro}_NTUNED {len(tuned)}
#define {macro}_NPREDICTED {len(predictions)}
#define {macro}_MAX_SIZE INT64_C({problem.max_size})

/* What a runtime needs to build and launch the kernel for one query. */
struct {p}_config {{
    int match;                     /* OCTUNE_MATCH_EXACT, _NEAREST, _PREDICTED or _DEFAULT */
    const char *kernel;            /* kernel family */
    const char *entry;             /* OpenCL function name */
    const char *kernel_sha256;     /* the kernel version (template + space) it was tuned with */
    const char *const *source;     /* that template's OpenCL C source in source_count parts, */
    unsigned source_count;         /* as clCreateProgramWithSource(ctx, n, parts, NULL, &e) */
    const char *const *define_names;
    int defines[{macro}_NDEFINES];     /* -D values: transposes, then the tuning parameters */
    size_t global_size[{macro}_WORK_DIM];
    size_t local_size[{macro}_WORK_DIM];
    double time_s;                 /* measured (exact), estimated (nearest, predicted), -1 */
    double gflops;                 /* of the source workload or model; -1 for default */
    int source_index;              /* tuned (or model) entry the config is from, -1 */
    int64_t source_shape[5];       /* m, n, k, transa, transb of that entry */
}};

struct {p}_entry_ {{
    int32_t shape[5];
    int32_t logs[3];
    int32_t config;
    double time_s;
    double gflops;
}};

static const char {p}_kernel_[] = {c_string(table.kernel)};
static const char {p}_entry_name_[] = {c_string(table.entry)};
static const char {p}_sha256_[] = {c_string(table.sha256)};
static const char {p}_extra_options_[] = {c_string(extra)};
static const char *const {p}_define_names_[{macro}_NDEFINES] = {{
    {", ".join(c_string(n) for n in define_names)}
}};
static const char *const {p}_source_[{len(parts)}] = {{
    {parts_text}
}};
static const int32_t {p}_configs_[{len(configs)}][{macro}_NPARAMS] = {{
    {config_rows}
}};
{entries}
/* Launch sizes of config c for an M x N x K problem; 0 where they are not legal. */
static inline int {p}_launch_(const int32_t *c, int64_t M, int64_t N, int64_t K,
                              int64_t g[{macro}_WORK_DIM], int64_t l[{macro}_WORK_DIM]) {{
    int bad = 0, d;
    int64_t group = 1;
    (void)c; (void)M; (void)N; (void)K;
{chr(10).join(f"    g[{d}] = {expressions[d]};" for d in range(dims))}
{chr(10).join(f"    l[{d}] = {expressions[dims + d]};" for d in range(dims))}
    if (bad) return 0;
    for (d = 0; d < {macro}_WORK_DIM; d++) {{
        if (l[d] < 1 || g[d] < 1 || g[d] % l[d] != 0) return 0;
        group *= l[d];
    }}
{chr(10).join(limit_checks)}
    return 1;
}}

static inline void {p}_fill_(struct {p}_config *cfg, int match, int config, const int64_t q[5],
                             const {launch_args.replace(", int64_t", ", const int64_t")}) {{
    int d;
    cfg->match = match;
    cfg->kernel = {p}_kernel_;
    cfg->entry = {p}_entry_name_;
    cfg->kernel_sha256 = {p}_sha256_;
    cfg->source = {p}_source_;
    cfg->source_count = {len(parts)};
    cfg->define_names = {p}_define_names_;
{flag_copies}
    for (d = 0; d < {macro}_NPARAMS; d++) cfg->defines[{first_param} + d] = {p}_configs_[config][d];
    for (d = 0; d < {macro}_WORK_DIM; d++) {{
        cfg->global_size[d] = (size_t)g[d];
        cfg->local_size[d] = (size_t)l[d];
    }}
    cfg->time_s = -1.0;
    cfg->gflops = -1.0;
    cfg->source_index = -1;
    for (d = 0; d < 5; d++) cfg->source_shape[d] = 0;
}}

/* The legal entry nearest to q: squared log2 distance of the sizes plus the transpose
   penalty (into *distance); the lowest index wins a tie. -1 when none is legal. */
static inline int {p}_nearest_(const struct {p}_entry_ *entries, int count, const int64_t q[5],
                               int64_t g[{macro}_WORK_DIM], int64_t l[{macro}_WORK_DIM],
                               int64_t *distance_out) {{
    int64_t logs[3], best_distance = 0, gg[{macro}_WORK_DIM], ll[{macro}_WORK_DIM];
    int i, d, best = -1;
    for (d = 0; d < 3; d++) logs[d] = octune_log2_fixed_(q[d]);
    for (i = 0; i < count; i++) {{
        int64_t distance = 0;
        for (d = 0; d < 3; d++) {{
            int64_t diff = logs[d] - entries[i].logs[d];
            distance += diff * diff;
        }}
        for (d = 3; d < 5; d++) {{
            int64_t diff = (q[d] - entries[i].shape[d]) * INT64_C({LAYOUT_WEIGHT});
            distance += diff * diff;
        }}
        if (best >= 0 && distance >= best_distance) continue;
        if (!{p}_launch_({p}_configs_[entries[i].config], q[0], q[1], q[2], gg, ll)) continue;
        best = i;
        best_distance = distance;
        for (d = 0; d < {macro}_WORK_DIM; d++) {{ g[d] = gg[d]; l[d] = ll[d]; }}
    }}
    *distance_out = best_distance;
    return best;
}}

/* Look up the {name} config for C = op(A) op(B), op(A) m x k, op(B) k x n ({dtype}).
   Returns the match (OCTUNE_MATCH_*) and fills *cfg, or -1 for a shape out of range
   (sizes 1..{problem.max_size}) or one no config can launch. */
static inline int {p}_lookup(long m, long n, long k, int transa, int transb,
                             struct {p}_config *cfg) {{
    int64_t q[5], g[{macro}_WORK_DIM], l[{macro}_WORK_DIM], distance = 0;
    int64_t pg[{macro}_WORK_DIM], pl[{macro}_WORK_DIM];
    int i, j, d;
    const struct {p}_entry_ *found;
    q[0] = m; q[1] = n; q[2] = k; q[3] = transa != 0; q[4] = transb != 0;
    for (d = 0; d < 3; d++) if (q[d] < 1 || q[d] > {macro}_MAX_SIZE) return -1;
{operand_checks}    for (i = 0; i < {macro}_NTUNED; i++) {{
        found = &{p}_tuned_[i];
        for (d = 0; d < 5 && found->shape[d] == q[d]; d++) {{}}
        if (d == 5 && {p}_launch_({p}_configs_[found->config], q[0], q[1], q[2], g, l)) {{
            {p}_fill_(cfg, OCTUNE_MATCH_EXACT, found->config, q, g, l);
            cfg->time_s = found->time_s;
            break;
        }}
    }}
    if (i == {macro}_NTUNED) {{
        i = {p}_nearest_({p}_tuned_, {macro}_NTUNED, q, g, l, &distance);
        /* A neighbour further than OCTUNE_NEAR_DISTANCE yields to the model's answers. */
        if (i < 0 || ({macro}_NPREDICTED > 0 && distance > OCTUNE_NEAR_DISTANCE)) {{
            j = {p}_nearest_({p}_predicted_, {macro}_NPREDICTED, q, pg, pl, &distance);
            if (j >= 0) {{
                found = &{p}_predicted_[j];
                {p}_fill_(cfg, OCTUNE_MATCH_PREDICTED, found->config, q, pg, pl);
                cfg->gflops = found->gflops;
                cfg->time_s = (double)(INT64_C({problem.flops_per_point}) * q[0] * q[1] * q[2])
                    / (found->gflops * 1e9);
                return OCTUNE_MATCH_PREDICTED;
            }}
            if (i < 0) {{
                if (!{p}_launch_({p}_configs_[0], q[0], q[1], q[2], g, l)) return -1;
                {p}_fill_(cfg, OCTUNE_MATCH_DEFAULT, 0, q, g, l);
                return OCTUNE_MATCH_DEFAULT;
            }}
        }}
        found = &{p}_tuned_[i];
        {p}_fill_(cfg, OCTUNE_MATCH_NEAREST, found->config, q, g, l);
        cfg->time_s = (double)(INT64_C({problem.flops_per_point}) * q[0] * q[1] * q[2])
            / (found->gflops * 1e9);
    }}
    cfg->gflops = found->gflops;
    cfg->source_index = i;
    for (d = 0; d < 5; d++) cfg->source_shape[d] = found->shape[d];
    return cfg->match;
}}

/* The build options of a looked-up config ("-DTRANSA=0 ... -w"), like the Python answer's
   build_options; returns what snprintf returns. */
static inline int {p}_build_options(const struct {p}_config *cfg, char *out, size_t size) {{
    size_t used = 0;
    int d, n;
    if (size > 0) out[0] = '\\0';
    for (d = 0; d < {macro}_NDEFINES; d++) {{
        n = snprintf(out + (used < size ? used : size), used < size ? size - used : 0,
                     "%s-D%s=%d", d ? " " : "", cfg->define_names[d], cfg->defines[d]);
        if (n < 0) return n;
        used += (size_t)n;
    }}
    if ({p}_extra_options_[0] != '\\0') {{
        n = snprintf(out + (used < size ? used : size), used < size ? size - used : 0,
                     " %s", {p}_extra_options_);
        if (n < 0) return n;
        used += (size_t)n;
    }}
    return (int)used;
}}
"""


def render(
    device: Mapping[str, Any],
    tables: Sequence[KernelTable],
    sources: Mapping[str, tuple[str, str]],
    manifest: Mapping[str, Any],
) -> str:
    """The whole header for one device's tables."""
    log_rows = ",\n    ".join(
        ", ".join(str(v) for v in LOG2_TABLE[i : i + 12]) for i in range(0, len(LOG2_TABLE), 12)
    )
    matches = "\n".join(f"#define OCTUNE_MATCH_{m.upper()} {i}" for i, m in enumerate(MATCHES))
    fingerprint = re.sub(r"[^0-9a-f]", "", str(device.get("fingerprint", "")))
    name, driver = (_comment(str(device.get(key, "?"))) for key in ("name", "driver_version"))
    written = _comment(f"octune {manifest['octune_version']} at {manifest['created_at']}")
    header = f"""/* octune lookup tables for {name} ({fingerprint}), driver {driver};
 * written by `octune export` of {written}. Generated: do not edit.
 *
 * Self-contained C99: static tables and static inline functions, no allocation. Each kernel
 * has octune_<kernel>_lookup(m, n, k, transa, transb, &cfg): the exact tuned workload, else
 * the nearest tuned workload whose launch is legal for the query (if it is further than
 * OCTUNE_NEAR_DISTANCE, the model's nearest answer first, where the bundle has any), else the
 * model's nearest answer, else the default config -- the same answers as octune's Python
 * lookup.
 */
#ifndef OCTUNE_LOOKUP_H
#define OCTUNE_LOOKUP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define OCTUNE_DEVICE_FINGERPRINT "{fingerprint}"
{matches}
#define OCTUNE_LOG_BITS {LOG_BITS}
#define OCTUNE_LOG_TABLE_SIZE {1 << LOG_TABLE_BITS}
#define OCTUNE_NEAR_DISTANCE INT64_C({NEAR_DISTANCE})

static const char *const octune_match_names[{len(MATCHES)}] = {{
    {", ".join(c_string(m) for m in MATCHES)}
}};

static const int32_t octune_log2_table_[OCTUNE_LOG_TABLE_SIZE] = {{
    {log_rows}
}};

{_HELPERS}"""
    body = "".join(_kernel(table, sources[table.sha256][0]) for table in tables)
    return header + body + "\n#endif /* OCTUNE_LOOKUP_H */\n"
