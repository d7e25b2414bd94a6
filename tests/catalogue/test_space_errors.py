"""Bad search space files: one line each, naming the file and the fix, also for YAML that would
expand or nest without bound."""

from __future__ import annotations

import pytest
from helpers.space_testing import SHAPE, SMALL, error_of, with_changes

from octune.catalogue.space import SearchSpace
from octune.core.errors import SpaceError


@pytest.mark.parametrize(
    ("text", "piece"),
    [
        ("kernel: [gemm\n", "YAML error at line"),
        ("kernel: gemm\n\tproblem: gemm\n", "YAML error at line 2"),
        ("", "is empty"),
        ("- 1\n- 2\n", "must be a YAML mapping"),
        ("just text", "must be a YAML mapping"),
    ],
)
def test_yaml_problems(text, piece):
    assert piece in error_of(text)


def test_duplicate_keys_are_errors():
    text = SMALL.replace(
        "  SB: {values: [0, 1]}\n", "  SB: {values: [0, 1]}\n  SB: {values: [1]}\n"
    )
    message = error_of(text)
    assert "duplicate key 'SB'" in message
    assert "line 14" in message


@pytest.mark.parametrize(
    ("text", "piece"),
    [
        (
            SMALL.replace("parameters:", "paramters:"),
            "unknown key 'paramters' (allowed: kernel, problem, entry, description, devices, "
            "parameters,",
        ),
        (SMALL.replace("parameters:", "paramters:"), "missing key 'parameters'"),
        (
            SMALL.replace("{values: [4, 8, 16]}", "{valus: [4, 8, 16]}", 1),
            "unknown key 'valus' in parameters.MDIMC (allowed: values, help)",
        ),
        (
            SMALL.replace("  local: [NDIMC, MDIMC]\n", "  locale: [NDIMC, MDIMC]\n"),
            "unknown key 'locale' in launch (allowed: local, global)",
        ),
        (SMALL.replace("entry: gemm_kernel\n", ""), "missing key 'entry'"),
        (SMALL.replace("[1, 2, 4]", "[1, 2.5, 4]"), "parameters.VW.values.1: must be an integer"),
        (SMALL.replace("[1, 2, 4]", "[1, '2', 4]"), "parameters.VW.values.1: must be an integer"),
        (SMALL.replace("[1, 2, 4]", "four"), "parameters.VW.values: Input should be a valid list"),
        (SMALL.replace("[1, 2, 4]", "[1, 99999999999999999999]"), "does not fit in 64 bits"),
        (SMALL.replace("- SA == 1 or SB == 0", "- [SA]"), "constraints.6: must be an expression"),
        (SMALL.replace("- SA == 1 or SB == 0", "- true"), "constraints.6: must be an expression"),
        (SMALL.replace("kernel: gemm", "kernel: ../../etc/passwd"), "must be a bare name"),
        (SMALL.replace("entry: gemm_kernel", "entry: gemm kernel"), "must be a C identifier"),
        (SMALL.replace("kernel: gemm", "kernel: 7"), "kernel: Input should be a valid string"),
        (
            SMALL.replace("{values: [1, 2, 4]}", "[1, 2, 4]"),
            "parameters.VW: Input should be a valid dictionary (write NAME: {values: [...], help",
        ),
        (SMALL + "retired: {abc123: raced}\n", "'abc123' must be a kernel version's sha256"),
        (SMALL + f"retired: {{{'0' * 64}: ' '}}\n", "say why the version is retired"),
    ],
)
def test_schema_errors(text, piece):
    assert piece in error_of(text)


def test_many_schema_errors_are_condensed():
    text = "kernel: 1\nproblem: 2\nentry: 3\nparameters: 4\nlaunch: 5\nextra: 6\n"
    message = error_of(text)
    assert "and 3 more" in message


@pytest.mark.parametrize(
    ("changes", "piece"),
    [
        ({"parameters": "parameters: {}"}, "defines no parameters"),
        ({"parameters": "parameters:\n  A: {values: []}"}, "parameter A has no values"),
        (
            {"parameters": "parameters:\n  A: {values: [1, 2, 1]}"},
            "parameter A lists 1 more than once",
        ),
        ({"parameters": "parameters:\n  A: {values: [0, false]}"}, "lists 0 more than once"),
        (
            {"parameters": "parameters:\n  local_mem_size: {values: [1]}"},
            "parameter name 'local_mem_size' is also a device limit",
        ),
        (
            {"parameters": "parameters:\n  M: {values: [1]}"},
            "parameter name 'M' is also a problem shape variable",
        ),
        ({"parameters": "parameters:\n  min: {values: [1]}"}, "is also a function"),
        ({"parameters": "parameters:\n  if: {values: [1]}"}, "not usable as a C define"),
        ({"parameters": "parameters:\n  A-B: {values: [1]}"}, "not usable as a C define"),
        ({"derived": "derived:\n  MWG: 2"}, "derived name 'MWG' is also a parameter"),
        ({"derived": "derived:\n  compute_units: 2"}, "is also a device limit"),
        (
            {"derived": "derived:\n  A: B + 1\n  B: MWG"},
            "derived A = 'B + 1' uses 'B', which is not defined above it",
        ),
        ({"derived": "derived:\n  A: A + 1"}, "uses 'A', which is not defined above it"),
        (
            {"derived": "derived:\n  A: MWGG + 1"},
            "unknown name 'MWGG' in derived A 'MWGG + 1' (did you mean 'MWG'?)",
        ),
        (
            {"derived": "derived:\n  A: M * MWG"},
            "derived A 'M * MWG' uses shape variable M; derived values must not depend",
        ),
        (
            {"constraints": "constraints: [MWG <= M]"},
            "constraint 'MWG <= M' uses shape variable M; constraints must not depend",
        ),
        (
            {"constraints": "constraints: [MWG % MDIMCC == 0]"},
            "unknown name 'MDIMCC' in constraint 'MWG % MDIMCC == 0' (did you mean 'MDIMC'?)",
        ),
        (
            {"constraints": "constraints: [MWG.bit_length() > 2]"},
            "call to 'MWG.bit_length' is not allowed in constraint",
        ),
        (
            {"constraints": "constraints: ['__import__(\"os\")']"},
            "call to '__import__' is not allowed",
        ),
        (
            {"launch": "launch: {local: [NDIMC, MDIMC], global: [N]}"},
            "launch has 1 global and 2 local sizes",
        ),
        ({"launch": "launch: {local: [], global: []}"}, "launch has 0 dimensions"),
        (
            {"launch": "launch: {local: [1, 1, 1, 1], global: [1, 1, 1, 1]}"},
            "launch has 4 dimensions; OpenCL allows 1 to 3",
        ),
        (
            {"launch": "launch: {local: [NDIMC], global: ['ceil_div(Q, NWG)']}"},
            "unknown name 'Q' in launch global[0] 'ceil_div(Q, NWG)'",
        ),
        (
            {"launch": "launch: {local: [NDIMC], global: [ceil_div(N, NWG)]}"},
            "launch has 2 global and 1 local sizes; give both the same number of dimensions "
            "(YAML splits [a, b] lists at commas",
        ),
        (
            {"constraints": "constraints: [max(MWG, NWG) > 8]"},
            "syntax error in constraint 'max(MWG' at column 4: '(' was never closed; use numbers",
        ),
        ({"launch": "launch: {local: [''], global: [1]}"}, "empty launch local[0]"),
    ],
)
def test_semantic_errors(changes, piece):
    assert piece in error_of(with_changes(**changes))


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """Each level a list of ``width`` aliases of the one before: ``width ** levels`` values."""
    lines = [f"a0: &a0 [{', '.join(['1'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "piece"),
    [
        (SMALL + "bomb:\n  " + alias_bomb().replace("\n", "\n  "), "expands to more than"),
        (SMALL.replace("parameters:", alias_bomb() + "parameters:"), "expands to more than"),
        (SMALL + "deep: " + "[" * 5000 + "]" * 5000 + "\n", "nested more than 32 levels"),
    ],
)
def test_yaml_that_would_expand_or_nest_without_bound_is_refused_before_it_is_built(
    text: str, piece: str
) -> None:
    """A 5 KB alias bomb in an uploaded space grew a server to 22 GB (9 ** 9 values, which
    this test would never finish walking); 5,000 nested brackets ended in a RecursionError
    (issue 45). Both are one line.
    """
    with pytest.raises(SpaceError, match=piece):
        SearchSpace.from_yaml(text, "upload.yaml", SHAPE)


def test_anchors_within_the_limits_still_load() -> None:
    text = SMALL.replace("parameters:", "shared: &why one reason\nparameters:")
    with pytest.raises(SpaceError, match="unknown key 'shared'"):  # parsed, then checked
        SearchSpace.from_yaml(text, "ok.yaml", SHAPE)
