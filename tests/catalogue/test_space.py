"""Search spaces: exactly the configs a brute-force loop keeps, what a config launches, the
packaged gemm space. Bad space files: ``test_space_errors``."""

from __future__ import annotations

import itertools
import math
import textwrap
import time
from importlib import resources

import numpy as np
import pytest
from helpers.space_testing import LIMITS, SHAPE, SMALL, small_space, with_changes
from hypothesis import given, settings
from hypothesis import strategies as st

from octune.catalogue.enumeration import MAX_CANDIDATES, Parameter
from octune.catalogue.limits import LIMIT_NAMES, device_limits, max_buffer_bytes
from octune.catalogue.space import ConfigTable, SearchSpace
from octune.core.errors import SpaceError
from octune.core.results import config_key


def small_brute_force(limits):
    """The same rules, written as plain Python over the full product."""
    names = ("MWG", "NWG", "KWG", "MDIMC", "NDIMC", "VW", "SA", "SB", "PAD")
    values = (
        [8, 16, 32, 64],
        [8, 16, 32, 64],
        [8, 16, 32],
        [4, 8, 16],
        [4, 8, 16],
        [1, 2, 4],
        [0, 1],
        [0, 1],
        [0, 1],
    )
    kept = []
    for combo in itertools.product(*values):
        c = dict(zip(names, combo, strict=True))
        mwi, nwi = c["MWG"] // c["MDIMC"], c["NWG"] // c["NDIMC"]
        local_bytes = 4 * c["KWG"] * (c["SA"] * c["MWG"] + c["SB"] * c["NWG"])
        if (
            c["MWG"] % c["MDIMC"] == 0
            and c["NWG"] % c["NDIMC"] == 0
            and mwi % c["VW"] == 0
            and c["MDIMC"] * c["NDIMC"] <= limits["max_work_group_size"]
            and local_bytes <= limits["local_mem_size"]
            and 2 <= mwi * nwi <= 32
            and (c["SA"] == 1 or c["SB"] == 0)
        ):
            kept.append((c, {"MWI": mwi, "NWI": nwi, "LOCAL_BYTES": local_bytes}))
    return kept


# --- loading ------------------------------------------------------------------------------


def test_attributes():
    space = small_space()
    assert (space.kernel, space.problem, space.entry) == ("gemm", "gemm", "gemm_kernel")
    assert space.description == "a small gemm-like space"
    assert space.parameter_names == ("MWG", "NWG", "KWG", "MDIMC", "NDIMC", "VW", "SA", "SB", "PAD")
    assert space.parameters[0] == Parameter("MWG", (8, 16, 32, 64), "tile in M")
    assert space.parameters[6].values == (0, 1)  # booleans become 0/1
    assert space.source_text == SMALL
    assert space.raw_size == 4 * 4 * 3 * 3 * 3 * 3 * 2 * 2 * 2
    assert space.derived_names == ("MWI", "NWI", "LOCAL_BYTES", "WORK")


def test_from_file(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    assert SearchSpace.from_file(path, SHAPE).parameter_names[0] == "MWG"
    with pytest.raises(SpaceError, match="cannot read search space"):
        SearchSpace.from_file(tmp_path / "missing.yaml", SHAPE)


def test_ints_and_strings_are_both_expressions():
    space = SearchSpace.from_yaml(
        with_changes(
            derived="""\
            derived:
              FOUR: 4
              MWI: MWG // MDIMC
            """,
            constraints="constraints:",
            launch="""\
            launch:
              local: [16]
              global: [1024]
            """,
        ),
        "ints.yaml",
        SHAPE,
    )
    table = space.enumerate(LIMITS)
    assert set(table.derived("FOUR").tolist()) == {4}
    config = table.config(0)
    assert space.launch(config, {"M": 1, "N": 1, "K": 1}, LIMITS) == ((1024,), (16,))


# --- enumeration --------------------------------------------------------------------------


def test_enumerate_keeps_exactly_what_brute_force_keeps_in_product_order():
    for limits in (LIMITS, {**LIMITS, "max_work_group_size": 64, "local_mem_size": 2048}):
        table = small_space().enumerate(limits)
        expected = small_brute_force(limits)
        assert list(table.configs()) == [c for c, _ in expected]
        assert table.values.dtype == np.int64
        assert table.values.shape == (len(expected), 9)
        for name in ("MWI", "NWI", "LOCAL_BYTES"):
            assert table.derived(name).tolist() == [d[name] for _, d in expected]


def test_a_space_keeps_the_tables_of_its_last_devices():
    space = small_space()
    tables = [space.enumerate({**LIMITS, "compute_units": units}) for units in range(1, 7)]
    assert space.enumerate({**LIMITS, "compute_units": 6}) is tables[-1]
    assert space.enumerate({**LIMITS, "compute_units": 3}) is tables[2]  # among the last four
    again = space.enumerate({**LIMITS, "compute_units": 1})  # dropped: enumerated again
    assert again is not tables[0] and list(again.configs()) == list(tables[0].configs())
    assert not tables[-1].values.flags.writeable  # shared, so read-only


def test_config_table_access():
    table = small_space().enumerate(LIMITS)
    assert isinstance(table, ConfigTable)
    assert table.names == small_space().parameter_names
    configs = list(table.configs())
    assert len(configs) == len(table) > 0
    for i, config in enumerate(configs):
        assert table.config(i) == config
        assert table.index(config) == i
        assert all(type(v) is int for v in config.values())
    assert table.column("MWG").tolist() == [c["MWG"] for c in configs]
    illegal = {**configs[0], "MDIMC": 16, "MWG": 8}  # 8 % 16 != 0
    assert table.index(illegal) is None
    assert table.index({**configs[0], "MWG": 48}) is None  # not one of the values
    assert table.index({k: v for k, v in configs[0].items() if k != "PAD"}) is None
    assert table.index({**configs[0], "EXTRA": 1}) is None
    assert table.index_json(config_key(configs[3])) == 3
    assert table.index_json(config_key(illegal)) is None
    assert table.index_json("not json") is None
    assert table.index_json("[1, 2]") is None
    with pytest.raises(KeyError, match="known: MWI, NWI, LOCAL_BYTES, WORK"):
        table.derived("NOPE")


def test_rows_whose_derived_value_divides_by_zero_are_not_legal():
    text = with_changes(
        parameters="""\
        parameters:
          A: {values: [0, 1, 2, 3, 4, 6]}
          B: {values: [0, 1, 2, 3]}
          C: {values: [0, 2]}
        """,
        derived="""\
        derived:
          Q: A // B
          UNUSED: A % C
        """,
        constraints="""\
        constraints:
          - Q >= 1
          - B != 0 and A % B == 0 or A == 0
        """,
        launch="""\
        launch:
          local: [1]
          global: [1]
        """,
    )
    space = SearchSpace.from_yaml(text, "div.yaml", SHAPE)
    table = space.enumerate(LIMITS)
    expected = [
        {"A": a, "B": b, "C": c}
        for a, b, c in itertools.product([0, 1, 2, 3, 4, 6], [0, 1, 2, 3], [0, 2])
        if b != 0 and c != 0 and a // b >= 1 and (a % b == 0 or a == 0)
    ]
    assert list(table.configs()) == expected
    with pytest.raises(SpaceError, match="derived Q = 'A // B' divide by zero"):
        space.check({"A": 2, "B": 0, "C": 2}, LIMITS)
    with pytest.raises(SpaceError, match="derived UNUSED = 'A % C' divide by zero"):
        space.check({"A": 2, "B": 1, "C": 0}, LIMITS)


# Random small spaces against brute force: exercises the pruning order and the key decoding.
RULES = [
    ("P0 % P1 == 0", lambda c: c["P0"] % c["P1"] == 0),
    ("P1 * P2 <= max_work_group_size", lambda c: c["P1"] * c["P2"] <= 64),
    ("P3 == 0 or P0 >= P2", lambda c: c["P3"] == 0 or c["P0"] >= c["P2"]),
    ("S % P4 != 1", lambda c: (c["P0"] + c["P4"]) % c["P4"] != 1),
    ("P2 < P0 + P3 <= 40", lambda c: c["P2"] < c["P0"] + c["P3"] <= 40),
    ("max(P1, P4) > 2", lambda c: max(c["P1"], c["P4"]) > 2),
    ("ceil_div(P0, P4) % 2 == 0", lambda c: -(-c["P0"] // c["P4"]) % 2 == 0),
]


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(
        st.lists(st.integers(1, 16), min_size=1, max_size=4, unique=True), min_size=5, max_size=5
    ),
    rules=st.lists(st.integers(0, len(RULES) - 1), unique=True, max_size=len(RULES)),
    limit=st.sampled_from([16, 64, 1024]),
)
def test_random_spaces_match_brute_force(values, rules, limit):
    names = [f"P{i}" for i in range(5)]
    parameters = "\n".join(f"  {n}: {{values: {v}}}" for n, v in zip(names, values, strict=True))
    constraints = "\n".join(f"  - {RULES[i][0]}" for i in rules) or "  - 1 == 1"
    text = (
        f"kernel: k\nproblem: p\nentry: k\nparameters:\n{parameters}\n"
        f"derived:\n  S: P0 + P4\nconstraints:\n{constraints}\n"
        "launch: {local: [1], global: [1]}\n"
    )
    space = SearchSpace.from_yaml(text, "random.yaml", SHAPE)
    limits = {**LIMITS, "max_work_group_size": limit}
    expected = []
    for combo in itertools.product(*values):
        c = dict(zip(names, combo, strict=True))
        checks = [RULES[i][1] for i in rules]
        if 1 in rules:
            checks[rules.index(1)] = lambda c: c["P1"] * c["P2"] <= limit
        if all(check(c) for check in checks):
            expected.append(c)
    if not expected:
        with pytest.raises(SpaceError, match="has no legal config"):
            space.enumerate(limits)
        return
    table = space.enumerate(limits)
    assert list(table.configs()) == expected
    assert table.derived("S").tolist() == [c["P0"] + c["P4"] for c in expected]
    for i in range(0, len(expected), 7):
        assert table.index(expected[i]) == i
        space.check(expected[i], limits)


def test_empty_space_names_the_constraint_and_the_device_limits():
    tiny = {**LIMITS, "local_mem_size": 100}
    text = with_changes(
        constraints="""\
        constraints:
          - SA == 1 and SB == 1
          - LOCAL_BYTES <= local_mem_size
        """
    )
    space = SearchSpace.from_yaml(text, "gemm.yaml", SHAPE)
    with pytest.raises(SpaceError) as caught:
        space.enumerate(tiny)
    message = str(caught.value)
    assert message.startswith(
        "search space gemm.yaml has no legal config on this device: "
        "constraint 'LOCAL_BYTES <= local_mem_size' removed the last"
    )
    assert "(local_mem_size=100)" in message
    assert "relax it or add smaller values" in message
    assert "\n" not in message


def test_empty_space_without_device_limits_says_the_rules_contradict():
    text = with_changes(constraints="constraints: [MWG > 100]")
    with pytest.raises(SpaceError) as caught:
        SearchSpace.from_yaml(text, "gemm.yaml", SHAPE).enumerate(LIMITS)
    message = str(caught.value)
    assert "constraint 'MWG > 100' removed the last 4 candidates" in message
    assert "\n" not in message


def test_constraint_on_device_limits_alone():
    text = with_changes(constraints="constraints: [compute_units >= 16]")
    with pytest.raises(SpaceError, match=r"removed the last 1 candidates \(compute_units=8\)"):
        SearchSpace.from_yaml(text, "gemm.yaml", SHAPE).enumerate(LIMITS)


def test_missing_device_limit():
    with pytest.raises(SpaceError, match="device limits lack local_mem_size"):
        small_space().enumerate({k: v for k, v in LIMITS.items() if k != "local_mem_size"})


def test_too_many_candidates_is_an_error_not_an_out_of_memory():
    values = list(range(1, 31))
    parameters = "\n".join(f"  P{i}: {{values: {values}}}" for i in range(6))
    text = f"kernel: k\nproblem: p\nentry: k\nparameters:\n{parameters}\n"
    text += "launch: {local: [1], global: [1]}\n"
    assert MAX_CANDIDATES < 30**6
    with pytest.raises(SpaceError, match="too large to enumerate"):
        SearchSpace.from_yaml(text, "huge.yaml", SHAPE).enumerate(LIMITS)


def test_large_space_enumerates_quickly():
    """~14 parameters, tens of millions raw: must stay far below the 2 s budget."""
    text = textwrap.dedent(
        """\
        kernel: gemm
        problem: gemm
        entry: gemm
        parameters:
          MWG: {values: [16, 32, 64, 128, 256]}
          NWG: {values: [16, 32, 64, 128, 256]}
          KWG: {values: [8, 16, 32]}
          MDIMC: {values: [4, 8, 16, 32]}
          NDIMC: {values: [4, 8, 16, 32]}
          VWM: {values: [1, 2, 4, 8]}
          VWN: {values: [1, 2, 4, 8]}
          VWA: {values: [1, 2, 4]}
          VWB: {values: [1, 2, 4]}
          SA: {values: [0, 1]}
          SB: {values: [0, 1]}
          KUNROLL: {values: [1, 2, 4, 8, 16]}
          STRM: {values: [0, 1]}
          STRN: {values: [0, 1]}
        derived:
          MWI: MWG // MDIMC
          NWI: NWG // NDIMC
          WGS: MDIMC * NDIMC
          LOCAL_BYTES: 4 * KWG * (SA * MWG + SB * NWG)
        constraints:
          - MWG % MDIMC == 0
          - NWG % NDIMC == 0
          - MWI % VWM == 0
          - NWI % VWN == 0
          - KWG % KUNROLL == 0
          - SA == 1 or VWA == 1
          - SB == 1 or VWB == 1
          - SA == 0 or (MWG * KWG) % (WGS * VWA) == 0
          - SB == 0 or (NWG * KWG) % (WGS * VWB) == 0
          - MWI * NWI <= 128
          - 16 <= WGS <= max_work_group_size
          - LOCAL_BYTES <= local_mem_size
        launch:
          local: [NDIMC, MDIMC]
          global: ["ceil_div(N, NWG) * NDIMC", "ceil_div(M, MWG) * MDIMC"]
        """
    )
    space = SearchSpace.from_yaml(text, "large.yaml", SHAPE)
    assert space.raw_size > 10_000_000
    limits = {**LIMITS, "max_work_group_size": 1024, "local_mem_size": 49152}
    start = time.perf_counter()
    table = space.enumerate(limits)
    elapsed = time.perf_counter() - start
    assert len(table) > 100_000
    assert elapsed < 10, f"enumeration took {elapsed:.1f} s"  # generous: shared CI machines
    for i in range(0, len(table), len(table) // 50):
        space.check(table.config(i), limits)


# --- check, launch, defines ---------------------------------------------------------------


def legal_config():
    return {
        "MWG": 32,
        "NWG": 16,
        "KWG": 8,
        "MDIMC": 8,
        "NDIMC": 4,
        "VW": 2,
        "SA": 1,
        "SB": 0,
        "PAD": 0,
    }


def check_error(config, limits=LIMITS) -> str:
    with pytest.raises(SpaceError) as caught:
        small_space().check(config, limits)
    message = str(caught.value)
    assert "\n" not in message
    assert "small.yaml" in message
    return message


def test_check_accepts_every_enumerated_config():
    space = small_space()
    space.check(legal_config(), LIMITS)
    for config in space.enumerate(LIMITS).configs():
        space.check(config, LIMITS)


def test_check_rejects_bad_configs():
    assert "unknown parameter MWGG" in check_error({**legal_config(), "MWGG": 1})
    config = legal_config()
    del config["KWG"]
    assert "lacks parameter KWG" in check_error(config)
    assert "KWG=12, which is not one of its values (8, 16, 32)" in check_error(
        {**legal_config(), "KWG": 12}
    )
    assert "not one of its values" in check_error({**legal_config(), "KWG": "8"})
    message = check_error({**legal_config(), "MDIMC": 16, "MWG": 8})
    assert "breaks constraint 'MWG % MDIMC == 0'" in message
    assert "MDIMC=16, MWG=8" in message
    message = check_error(legal_config(), {**LIMITS, "local_mem_size": 512})
    assert "breaks constraint 'LOCAL_BYTES <= local_mem_size'" in message
    assert "LOCAL_BYTES=1024, local_mem_size=512" in message


def test_check_accepts_numpy_integers():
    small_space().check({k: np.int64(v) for k, v in legal_config().items()}, LIMITS)


def test_launch_sizes():
    space = small_space()
    shape = {"M": 100, "N": 50, "K": 7}
    global_size, local_size = space.launch(legal_config(), shape, LIMITS)
    assert local_size == (4, 8)
    assert global_size == (math.ceil(50 / 16) * 4, math.ceil(100 / 32) * 8)
    assert all(type(v) is int for v in (*global_size, *local_size))


def test_launch_checks_the_config_and_the_shape():
    space = small_space()
    with pytest.raises(SpaceError, match="breaks constraint"):
        space.launch({**legal_config(), "MDIMC": 16, "MWG": 8}, {"M": 1, "N": 1}, LIMITS)
    with pytest.raises(SpaceError, match="shape lacks M"):
        space.launch(legal_config(), {"N": 1}, LIMITS)


def launch_space(local, global_, constraints="constraints:"):
    return SearchSpace.from_yaml(
        with_changes(
            launch=f"launch:\n  local: {local}\n  global: {global_}\n", constraints=constraints
        ),
        "launch.yaml",
        SHAPE,
    )


@pytest.mark.parametrize(
    ("local", "global_", "shape", "piece"),
    [
        ("[MDIMC]", '["ceil_div(N, M) * MDIMC"]', {"M": 0, "N": 5}, "divides by zero"),
        ("[MDIMC]", '["N - N"]', {"N": 64}, "gave 0"),
        ("[MDIMC]", "[N]", {"N": 30}, "launch global[0]=30 is not a multiple of local[0]=8"),
        ("[512]", "[512]", {}, "launch local[0]=512 exceeds max_work_item_size_0=256"),
        ("[64, 8]", "[64, 8]", {}, "has 512 work-items, more than max_work_group_size=256"),
    ],
)
def test_launch_errors(local, global_, shape, piece):
    space = launch_space(local, global_)
    with pytest.raises(SpaceError) as caught:
        space.launch(legal_config(), shape, LIMITS)
    message = str(caught.value)
    assert piece in message
    assert "launch.yaml" in message
    assert "\n" not in message


def test_sizes_are_integers_with_derived_values_written_out():
    """A launch size is computed by the tuner, the lookup and the C header alike: a space
    whose sizes could be fractions fails when it loads, not when a bundle is read.
    """
    with pytest.raises(SpaceError, match=r"launch global\[0\] 'N / 2' must be an integer"):
        launch_space("[MDIMC]", '["N / 2"]')

    def space_with(derived: str, local: str, global_: str) -> str:
        text = SMALL.replace("  WORK: MWI * NWI\n", f"  WORK: MWI * NWI\n  {derived}\n")
        return text.replace("local: [NDIMC, MDIMC]", f"local: [{local}]").replace(
            'global: ["ceil_div(N, NWG) * NDIMC", "ceil_div(M, MWG) * MDIMC"]',
            f"global: [{global_}]",
        )

    halved = space_with("HALF: MDIMC / 2", "HALF", "HALF")
    with pytest.raises(
        SpaceError, match=r"global\[0\] 'HALF' = 'MDIMC / 2' must be an integer.*//"
    ):
        SearchSpace.from_yaml(halved, "halved.yaml", SHAPE)
    chosen = space_with("ITEMS: 'MWI if MWI < 4 else 4'", "ITEMS", "'ceil_div(M, MWG) * ITEMS'")
    space = SearchSpace.from_yaml(chosen, "chosen.yaml", SHAPE)
    assert space.written_out(space.launch_global[0]) == (
        "ceil_div(M, MWG) * (MWG // MDIMC if MWG // MDIMC < 4 else 4)"
    )
    config = {**legal_config(), "MWG": 64, "MDIMC": 8}
    assert space.launch(config, {"M": 100, "N": 1}, LIMITS) == ((8,), (4,))


def test_a_workspace_must_fit_in_one_buffer_on_the_device():
    """A config's scratch grows with the shape: where it outgrows the device's largest buffer,
    the config cannot run there, and the measurer and the runtime hear so as a SpaceError.
    """
    space = SearchSpace.from_yaml(SMALL + "workspace: 4 * M * N\n", "scratch.yaml", SHAPE)
    limits = {**LIMITS, "max_buffer_bytes": max_buffer_bytes(1 << 30)}  # 256 MiB
    assert max_buffer_bytes(1 << 30) == 256 << 20 and max_buffer_bytes(1 << 20) == 128 << 20
    assert space.workspace_elements(legal_config(), {"M": 4096, "N": 4096}, limits) == 64 << 20
    with pytest.raises(SpaceError, match=r"of 268,500,992 bytes does not fit in one buffer"):
        space.workspace_elements(legal_config(), {"M": 4096, "N": 4097}, limits)
    assert space.workspace_elements(legal_config(), {"M": 4096, "N": 4097}, LIMITS) > 0


def test_defines_are_the_parameters_in_order():
    space = small_space()
    config = dict(reversed(legal_config().items()))
    defines = space.defines(config)
    assert list(defines) == list(space.parameter_names)
    assert defines == legal_config()
    with pytest.raises(SpaceError, match="lacks parameter PAD"):
        space.defines({k: v for k, v in config.items() if k != "PAD"})


# --- the packaged gemm space --------------------------------------------------------------

GEMM_LIMITS = {
    "max_work_group_size": 1024,
    "local_mem_size": 49152,
    "max_work_item_size_0": 1024,
    "max_work_item_size_1": 1024,
    "max_work_item_size_2": 1024,
    "compute_units": 132,
    "async_copy": 1,
}


def test_packaged_gemm_space_loads_and_enumerates():
    resource = resources.files("octune.search_spaces").joinpath("gemm.yaml")
    if not resource.is_file():
        pytest.skip("search_spaces/gemm.yaml is not written yet")
    space = SearchSpace.from_yaml(resource.read_text(), "gemm.yaml", SHAPE)
    table = space.enumerate(GEMM_LIMITS)
    assert len(table) > 0
    for i in range(0, len(table), max(1, len(table) // 20)):
        config = table.config(i)
        space.check(config, GEMM_LIMITS)
        assert table.index(config) == i
        global_size, local_size = space.launch(config, {"M": 1000, "N": 700, "K": 300}, GEMM_LIMITS)
        assert len(global_size) == len(local_size)


def test_asynchronous_copies_are_legal_only_where_the_device_has_them():
    """gemm.yaml's ASYNC configs need `async_copy`: NVIDIA's OpenCL, live or as stored."""
    space = SearchSpace.from_yaml(
        resources.files("octune.search_spaces").joinpath("gemm.yaml").read_text(),
        "gemm.yaml",
        SHAPE,
    )
    with_copies = space.enumerate(GEMM_LIMITS)
    without = space.enumerate({**GEMM_LIMITS, "async_copy": 0})
    assert 0 < len(without) < len(with_copies)
    assert all(config["ASYNC"] == 0 for config in without.configs())
    assert {config["ASYNC"] for config in with_copies.configs()} == {0, 1, 2}
    figures = dict(
        max_work_group_size=1024,
        max_work_item_sizes=(1024, 1024, 64),
        local_mem_size=49152,
        compute_units=132,
        global_mem_size=80 << 30,
    )
    assert device_limits(**figures, platform_name="NVIDIA CUDA")["async_copy"] == 1
    assert device_limits(**figures, platform_name="Portable Computing Language")["async_copy"] == 0
    assert set(device_limits(**figures, platform_name="x")) == set(LIMIT_NAMES)
