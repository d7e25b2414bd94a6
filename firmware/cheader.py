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
    MATCH_RANK,
    MATCHES,
    NEAR_DISTANCE,
    Entry,
    KernelTable,
    TableError,
    check_call,
    check_operand,
    log2_fixed,
    size_bounds,
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
    variables: Mapping[str, int],
    limits: Mapping[str, int],
) -> str:
    """A vetted expression as C over ``c[i]`` (parameters) and ``v[i]`` (shape variables)."""
    text = ast.unparse(node)

    def emit(node: ast.expr) -> str:
        if isinstance(node, ast.Constant | ast.Name):
            value = check_operand(node, {**params, **variables}, limits, text)
            if isinstance(value, int):
                return f"INT64_C({value})"
            return f"(int64_t)c[{params[value]}]" if value in params else f"v[{variables[value]}]"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd | ast.Not):
            sign = {ast.USub: "-", ast.UAdd: "+", ast.Not: "!"}[type(node.op)]
            return f"(int64_t)({sign}{emit(node.operand)})"
        if isinstance(node, ast.BinOp):
            left, right = emit(node.left), emit(node.right)
            if isinstance(node.op, ast.Add | ast.Sub | ast.Mult):
                symbol = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}[type(node.op)]
                return f"({left} {symbol} {right})"
            if isinstance(node.op, ast.FloorDiv):
                return f"octune_floordiv_(&bad, {left}, {right})"
            if isinstance(node.op, ast.Mod):
                return f"octune_mod_(&bad, {left}, {right})"
        if isinstance(node, ast.Compare) and all(type(op) in _C_COMPARE for op in node.ops):
            terms = [emit(term) for term in (node.left, *node.comparators)]
            tests = [
                f"({a} {_C_COMPARE[type(op)]} {b})"
                for op, a, b in zip(node.ops, terms, terms[1:], strict=False)
            ]
            return f"(int64_t)({' && '.join(tests)})"
        if isinstance(node, ast.BoolOp):
            joiner = " && " if isinstance(node.op, ast.And) else " || "
            return f"(int64_t)({joiner.join(emit(value) for value in node.values)})"
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


_C_COMPARE = {
    ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
}  # fmt: skip


def _c(
    text: str, params: Mapping[str, int], variables: Mapping[str, int], limits: Mapping[str, int]
) -> str:
    return _c_expression(ast.parse(text, mode="eval").body, params, variables, limits)


def _prefix(table: KernelTable) -> str:
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


def _follow_ups(table: KernelTable, params: Mapping[str, int], variables: Mapping[str, int]) -> str:
    """C for the launches after the entry's and the workspace: ``_follow_`` checks that they
    are legal for config c and shape v and, given a config to fill, writes them into it.
    """
    p = _prefix(table)
    group_limit = table.limits.get("max_work_group_size")
    lines = []
    for i, step in enumerate(table.then):
        dims = len(step.launch_local)
        lines.append("    group = 1;")
        for d, (global_, local) in enumerate(
            zip(step.launch_global, step.launch_local, strict=True)
        ):
            lines.append(f"    g[{d}] = {_c(global_, params, variables, table.limits)};")
            lines.append(f"    l[{d}] = {_c(local, params, variables, table.limits)};")
            lines.append(f"    if (bad || l[{d}] < 1 || g[{d}] < 1 || g[{d}] % l[{d}]) return 0;")
            limit = table.limits.get(f"max_work_item_size_{d}")
            if limit is not None:
                lines.append(f"    if (l[{d}] > INT64_C({limit})) return 0;")
            lines.append(f"    group *= l[{d}];")
        if group_limit is not None:
            lines.append(f"    if (group > INT64_C({group_limit})) return 0;")
        lines.append(
            f"    if (cfg) {{\n        cfg->then_entry[{i}] = {c_string(step.entry)};\n"
            f"        cfg->then_work_dim[{i}] = {dims};\n        for (d = 0; d < {dims}; d++) {{\n"
            f"            cfg->then_global_size[{i}][d] = (size_t)g[d];\n"
            f"            cfg->then_local_size[{i}][d] = (size_t)l[d];\n        }}\n    }}"
        )
    workspace = (
        "0" if table.workspace is None else _c(table.workspace, params, variables, table.limits)
    )
    buffer = table.limits.get("max_buffer_bytes")
    most = "" if buffer is None else f" || workspace > INT64_C({buffer // 4})"
    body = "\n".join(lines)
    return f"""/* The launches after the entry's and the workspace of config c for shape
   variables v: 0 where they are not legal; with cfg, written into it. */
static inline int {p}_follow_(const int32_t *c, const int64_t *v, struct octune_config *cfg) {{
    int bad = 0, d = 0;
    int64_t g[OCTUNE_MAX_DIMS], l[OCTUNE_MAX_DIMS], group = 1, workspace;
    (void)c; (void)v; (void)g; (void)l; (void)group; (void)d;
{body}
    workspace = {workspace};
    if (bad || workspace < 0{most}) return 0;
    if (cfg) {{
        cfg->then_count = {len(table.then)};
        cfg->workspace_bytes = (size_t)workspace * 4;
    }}
    return 1;
}}
"""


def _shape_checks(table: KernelTable) -> str:
    """C that fills v[] (shape variables, derived ones) from q[] and returns -1 for a shape
    the Python lookup refuses: out of range, impossible, past 32-bit indexing, not taken.
    """
    problem = table.problem
    variables = {name: i for i, name in enumerate(problem.variables)}
    keys = problem.keys
    lines = [
        f"    if (q[{i}] < INT64_C({low}) || q[{i}] > INT64_C({high})) return -1;"
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
        f"    if (bad || !({_c(text, {}, variables, {})})) return -1;" for text, _ in problem.rules
    ]
    if problem.max_elements:
        lines += [
            f"    if (bad || {_c(text, {}, variables, {})} > INT64_C({problem.max_elements})) "
            "return -1;"
            for text in problem.extents
        ]
    lines += [
        f"    if (bad || !({_c(text, {}, variables, {})})) return -1;" for text in table.requires
    ]
    lines.append("    if (bad) return -1;")
    return "\n".join(lines)


def _kernel(table: KernelTable, template: str) -> str:
    """One kernel's tables and its lookup over a shape array q (``Problem.keys`` order)."""
    p = _prefix(table)
    macro = p.upper()
    problem = table.problem
    nkeys, nsizes, nvars = len(problem.keys), len(problem.sizes), len(problem.variables)
    dtype = problem.dtypes[0]
    tuned = [e for e in table.tuned if e.dtype == dtype]
    predictions = [e for e in table.predictions if e.dtype == dtype]
    configs: dict[tuple[int, ...], int] = {table.default_config: 0}
    for entry in (*tuned, *predictions):
        configs.setdefault(entry.config, len(configs))
    params = {name: i for i, name in enumerate(table.parameters)}
    variables = {name: i for i, name in enumerate(problem.variables)}
    flag_defines = list(problem.flag_defines)
    flag_copies = "\n".join(
        f"    cfg->defines[{i}] = (int)q[{problem.keys.index(key)}];"
        for i, key in enumerate(problem.flag_defines.values())
    )
    define_names = [*flag_defines, *table.parameters]
    dims = len(table.launch_local)
    expressions = [
        _c(text, params, variables, table.limits)
        for text in (*table.launch_global, *table.launch_local)
    ]
    flops = _c(problem.flops, {}, variables, {})
    follow = _follow_ups(table, params, variables)
    extra = " ".join(table.extra_build_options)
    limit_checks = []
    for d in range(dims):
        limit = table.limits.get(f"max_work_item_size_{d}")
        if limit is not None:
            limit_checks.append(f"    if (l[{d}] > INT64_C({limit})) return 0;")
    group_limit = table.limits.get("max_work_group_size")
    if group_limit is not None:
        limit_checks.append(f"    if (group > INT64_C({group_limit})) return 0;")
    config_rows = ",\n    ".join("{" + ", ".join(map(str, c)) + "}" for c in configs)
    entries = _entries(p, "tuned", tuned, configs, nsizes)
    entries += _entries(p, "predicted", predictions, configs, nsizes)
    bounds = size_bounds(tuned, nsizes).get(dtype)
    inside = "    inside = 0;"
    if bounds is not None:  # as KernelIndex.inside
        low, high = bounds
        checks = " || ".join(f"q[{d}] < {low[d]} || q[{d}] > {high[d]}" for d in range(nsizes))
        inside = f"    inside = !({checks});"
    name = _comment(table.kernel)
    parts = source_parts(template)
    parts_text = ",\n    ".join(c_string(part) for part in parts)
    first_param = len(flag_defines)
    return f"""
/* ---- kernel {name} ({_comment(problem.name)}): {len(tuned)} tuned workloads,
   {len(predictions)} model answers ---- */

#define {macro}_NPARAMS {len(table.parameters)}
#define {macro}_NDEFINES {len(define_names)}
#define {macro}_WORK_DIM {dims}
#define {macro}_NTUNED {len(tuned)}
#define {macro}_NPREDICTED {len(predictions)}

struct {p}_entry_ {{
    int32_t shape[{nkeys}];
    int32_t logs[{nsizes}];
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
{follow}
/* Launch sizes of config c for the shape variables v; 0 where they are not legal. */
static inline int {p}_launch_(const int32_t *c, const int64_t v[{nvars}],
                              int64_t g[OCTUNE_MAX_DIMS], int64_t l[OCTUNE_MAX_DIMS]) {{
    int bad = 0, d;
    int64_t group = 1;
    (void)c; (void)v;
{chr(10).join(f"    g[{d}] = {expressions[d]};" for d in range(dims))}
{chr(10).join(f"    l[{d}] = {expressions[dims + d]};" for d in range(dims))}
    if (bad) return 0;
    for (d = 0; d < {macro}_WORK_DIM; d++) {{
        if (l[d] < 1 || g[d] < 1 || g[d] % l[d] != 0) return 0;
        group *= l[d];
    }}
{chr(10).join(limit_checks)}
    return {p}_follow_(c, v, NULL);
}}

static inline void {p}_fill_(struct octune_config *cfg, int match, int config,
                             const int64_t q[{nkeys}], const int64_t v[{nvars}],
                             const int64_t g[OCTUNE_MAX_DIMS], const int64_t l[OCTUNE_MAX_DIMS]) {{
    int d;
    cfg->match = match;
    cfg->kernel = {p}_kernel_;
    cfg->entry = {p}_entry_name_;
    cfg->kernel_sha256 = {p}_sha256_;
    cfg->source = {p}_source_;
    cfg->source_count = {len(parts)};
    cfg->define_names = {p}_define_names_;
    cfg->ndefines = {macro}_NDEFINES;
    cfg->extra_options = {p}_extra_options_;
{flag_copies}
    for (d = 0; d < {macro}_NPARAMS; d++) cfg->defines[{first_param} + d] = {p}_configs_[config][d];
    cfg->work_dim = {macro}_WORK_DIM;
    for (d = 0; d < {macro}_WORK_DIM; d++) {{
        cfg->global_size[d] = (size_t)g[d];
        cfg->local_size[d] = (size_t)l[d];
    }}
    cfg->time_s = -1.0;
    cfg->gflops = -1.0;
    cfg->source_index = -1;
    cfg->nkeys = {nkeys};
    for (d = 0; d < OCTUNE_MAX_KEYS; d++) cfg->source_shape[d] = 0;
    (void){p}_follow_({p}_configs_[config], v, cfg);
    (void)q;
}}

/* The legal entry nearest to q: squared log2 distance of the sizes plus the linear keys'
   (transposes, filter sizes...) penalty (into *distance); the lowest index wins a tie.
   -1 when none is legal. */
static inline int {p}_nearest_(const struct {p}_entry_ *entries, int count,
                               const int64_t q[{nkeys}],
                               const int64_t v[{nvars}], int64_t g[OCTUNE_MAX_DIMS],
                               int64_t l[OCTUNE_MAX_DIMS], int64_t *distance_out) {{
    int64_t logs[{nsizes}], best_distance = 0, gg[OCTUNE_MAX_DIMS], ll[OCTUNE_MAX_DIMS];
    int i, d, best = -1;
    for (d = 0; d < {nsizes}; d++) logs[d] = octune_log2_fixed_(q[d]);
    for (i = 0; i < count; i++) {{
        int64_t distance = 0;
        for (d = 0; d < {nsizes}; d++) {{
            int64_t diff = logs[d] - entries[i].logs[d];
            distance += diff * diff;
        }}
        for (d = {nsizes}; d < {nkeys}; d++) {{
            int64_t diff = (q[d] - entries[i].shape[d]) * INT64_C({LAYOUT_WEIGHT});
            distance += diff * diff;
        }}
        if (best >= 0 && distance >= best_distance) continue;
        if (!{p}_launch_({p}_configs_[entries[i].config], v, gg, ll)) continue;
        best = i;
        best_distance = distance;
        for (d = 0; d < {macro}_WORK_DIM; d++) {{ g[d] = gg[d]; l[d] = ll[d]; }}
    }}
    *distance_out = best_distance;
    return best;
}}

/* Look up the {name} config for the shape q ({", ".join(problem.keys)}; {dtype}).
   Returns the match (OCTUNE_MATCH_*) and fills *cfg, or -1 for a shape out of range, an
   impossible one, one this kernel does not take, or one no config can launch. */
static inline int {p}_lookup(const int64_t q[{nkeys}], struct octune_config *cfg) {{
    int64_t v[{nvars}], g[OCTUNE_MAX_DIMS], l[OCTUNE_MAX_DIMS], distance = 0;
    int64_t pg[OCTUNE_MAX_DIMS], pl[OCTUNE_MAX_DIMS];
    int i, j, d, bad = 0, inside;
    double flops;
    const struct {p}_entry_ *found;
{_shape_checks(table)}
{inside}
    flops = (double)({flops});
    if (bad) return -1;
    for (i = 0; i < {macro}_NTUNED; i++) {{
        found = &{p}_tuned_[i];
        for (d = 0; d < {nkeys} && found->shape[d] == q[d]; d++) {{}}
        if (d == {nkeys} && {p}_launch_({p}_configs_[found->config], v, g, l)) {{
            {p}_fill_(cfg, OCTUNE_MATCH_EXACT, found->config, q, v, g, l);
            cfg->time_s = found->time_s;
            break;
        }}
    }}
    if (i == {macro}_NTUNED) {{
        i = {p}_nearest_({p}_tuned_, {macro}_NTUNED, q, v, g, l, &distance);
        /* A neighbour further than OCTUNE_NEAR_DISTANCE yields to the model's answers, for a
           shape inside the range of the tuned ones. */
        if (i < 0 || ({macro}_NPREDICTED > 0 && distance > OCTUNE_NEAR_DISTANCE && inside)) {{
            j = {p}_nearest_({p}_predicted_, {macro}_NPREDICTED, q, v, pg, pl, &distance);
            if (j >= 0) {{
                found = &{p}_predicted_[j];
                {p}_fill_(cfg, OCTUNE_MATCH_PREDICTED, found->config, q, v, pg, pl);
                cfg->gflops = found->gflops;
                cfg->time_s = flops / (found->gflops * 1e9);
                return OCTUNE_MATCH_PREDICTED;
            }}
            if (i < 0) {{
                if (!{p}_launch_({p}_configs_[0], v, g, l)) return -1;
                {p}_fill_(cfg, OCTUNE_MATCH_DEFAULT, 0, q, v, g, l);
                return OCTUNE_MATCH_DEFAULT;
            }}
        }}
        found = &{p}_tuned_[i];
        {p}_fill_(cfg, OCTUNE_MATCH_NEAREST, found->config, q, v, g, l);
        cfg->time_s = flops / (found->gflops * 1e9);
    }}
    cfg->gflops = found->gflops;
    cfg->source_index = i;
    for (d = 0; d < {nkeys}; d++) cfg->source_shape[d] = found->shape[d];
    return cfg->match;
}}
"""


def _family(name: str, tables: Sequence[KernelTable]) -> str:
    """A family's lookup: each kernel's answer, the fastest kept (``best_answer``'s order)."""
    problem = tables[0].problem
    keys = problem.keys
    args = ", ".join(f"long {key}" for key in keys)
    fill = " ".join(f"q_[{i}] = {key};" for i, key in enumerate(keys))
    calls = "\n".join(
        f"    if ({_prefix(t)}_lookup(q_, &candidate_) >= 0) "
        "octune_keep_better_(cfg, &candidate_, &found_);"
        for t in sorted(tables, key=lambda t: (-t.fit, t.kernel))
    )
    fn = "octune_" + re.sub(r"[^A-Za-z0-9_]", "_", name)
    return f"""
/* The {_comment(name)} config for ({", ".join(keys)}): of the bundle's {_comment(name)} kernels
   ({", ".join(_comment(t.kernel) for t in tables)}), the fastest answer -- measured before
   estimated before default, then the lower time, then the first asked (those written for
   the device's type first, then by name). Returns the match
   (OCTUNE_MATCH_*), or -1 where no kernel takes the shape. */
static inline int {fn}_lookup({args}, struct octune_config *cfg) {{
    int64_t q_[{len(keys)}];
    struct octune_config candidate_ = {{0}};
    int found_ = 0;
    *cfg = candidate_;  /* every field set, as compilers cannot tell that found_ guards it */
    {fill}
{calls}
    return found_ ? cfg->match : -1;
}}
"""


def render(
    device: Mapping[str, Any],
    tables: Sequence[KernelTable],
    sources: Mapping[str, tuple[str, str]],
    manifest: Mapping[str, Any],
) -> str:
    """The whole header for one device's tables."""
    max_keys = max((len(t.problem.keys) for t in tables), default=1)
    max_then = max((len(t.then) for t in tables), default=0) or 1
    ranks = ", ".join(str(MATCH_RANK[m]) for m in MATCHES)
    max_defines = max((len(t.problem.flag_defines) + len(t.parameters) for t in tables), default=1)
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
 * Self-contained C99: static tables and static inline functions, no allocation. Each family
 * has octune_<family>_lookup(<its shape keys>, &cfg), e.g. octune_gemm_lookup(m, n, k,
 * transa, transb, &cfg), answering with the fastest of its kernels; each kernel has
 * octune_kernel_<kernel>_lookup(q, &cfg) over the shape as an array. A kernel answers with the
 * exact tuned workload, else the nearest tuned workload whose launch is legal for the query
 * (if it is further than OCTUNE_NEAR_DISTANCE, the model's nearest answer first, where the
 * bundle has any), else the model's nearest answer, else the default config -- the same
 * answers as octune's Python lookup. octune_build_options(&cfg, buf, size) writes the
 * build options.
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

{_HELPERS}
#define OCTUNE_MAX_DIMS 3
#define OCTUNE_MAX_THEN {max_then}
#define OCTUNE_MAX_KEYS {max_keys}
#define OCTUNE_MAX_DEFINES {max_defines}

/* What a runtime needs to build and launch a kernel for one query. */
struct octune_config {{
    int match;                     /* OCTUNE_MATCH_EXACT, _NEAREST, _PREDICTED or _DEFAULT */
    const char *kernel;            /* the kernel (algorithm) that answers */
    const char *entry;             /* OpenCL function name */
    const char *kernel_sha256;     /* the kernel version (template + space) it was tuned with */
    const char *const *source;     /* that template's OpenCL C source in source_count parts, */
    unsigned source_count;         /* as clCreateProgramWithSource(ctx, n, parts, NULL, &e) */
    const char *const *define_names;
    int ndefines;
    int defines[OCTUNE_MAX_DEFINES];  /* -D values: the shape's defines, then the parameters */
    const char *extra_options;     /* after the defines, e.g. "-w" */
    unsigned work_dim;
    size_t global_size[OCTUNE_MAX_DIMS];
    size_t local_size[OCTUNE_MAX_DIMS];
    double time_s;                 /* measured (exact), estimated (nearest, predicted), -1 */
    double gflops;                 /* of the source workload or model; -1 for default */
    int source_index;              /* tuned (or model) entry the config is from, -1 */
    int nkeys;
    int64_t source_shape[OCTUNE_MAX_KEYS];  /* that entry's shape, in the family's key order */
    /* Launches after the entry's, in order, with the same arguments (split-K's sum), and a
       scratch buffer they share, passed as each launch's last argument (0: none): zero-fill
       it once when allocating it (a kernel's counters there start at zero; runs leave them
       so). */
    unsigned then_count;
    const char *then_entry[OCTUNE_MAX_THEN];
    unsigned then_work_dim[OCTUNE_MAX_THEN];
    size_t then_global_size[OCTUNE_MAX_THEN][OCTUNE_MAX_DIMS];
    size_t then_local_size[OCTUNE_MAX_THEN][OCTUNE_MAX_DIMS];
    size_t workspace_bytes;
}};

static const int octune_match_rank_[{len(MATCHES)}] = {{{ranks}}};

/* Keep *candidate in *best if it ranks before it: measured, estimated, default; then the
   lower time (unknown last); on a tie the one asked first stays. */
static inline void octune_keep_better_(struct octune_config *best,
                                       const struct octune_config *candidate, int *found) {{
    double a = candidate->time_s < 0 ? 1e300 : candidate->time_s, b;
    int ra = octune_match_rank_[candidate->match], rb;
    if (*found) {{  /* *best is only read once it holds an answer */
        b = best->time_s < 0 ? 1e300 : best->time_s;
        rb = octune_match_rank_[best->match];
        if (ra != rb ? ra > rb : a >= b) return;
    }}
    *best = *candidate;
    *found = 1;
}}

/* The build options of a looked-up config ("-DTRANSA=0 ... -w"), like the Python answer's
   build_options; returns what snprintf returns. */
static inline int octune_build_options(const struct octune_config *cfg, char *out, size_t size) {{
    size_t used = 0;
    int d, n;
    if (size > 0) out[0] = '\\0';
    for (d = 0; d < cfg->ndefines; d++) {{
        n = snprintf(out + (used < size ? used : size), used < size ? size - used : 0,
                     "%s-D%s=%d", d ? " " : "", cfg->define_names[d], cfg->defines[d]);
        if (n < 0) return n;
        used += (size_t)n;
    }}
    if (cfg->extra_options[0] != '\\0') {{
        n = snprintf(out + (used < size ? used : size), used < size ? size - used : 0,
                     " %s", cfg->extra_options);
        if (n < 0) return n;
        used += (size_t)n;
    }}
    return (int)used;
}}
"""
    body = "".join(_kernel(table, sources[table.sha256][0]) for table in tables)
    by_family: dict[str, list[KernelTable]] = {}
    for table in tables:
        by_family.setdefault(table.problem.name, []).append(table)
    body += "".join(_family(name, group) for name, group in sorted(by_family.items()))
    return header + body + "\n#endif /* OCTUNE_LOOKUP_H */\n"
