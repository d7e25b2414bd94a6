"""kernels/gemm.cl computes C = alpha op(A) op(B) + beta C for every legal config and shape."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest

from octune.catalogue.family import Workload
from octune.catalogue.precision import tolerance as family_tolerance
from octune.catalogue.registry import KernelSpec, kernels_of, load_kernel
from octune.catalogue.space import ConfigTable
from octune.kernels.gemm import gemm_workload
from octune.tuner.device import DeviceInfo

pytestmark = pytest.mark.slow

ODD_SHAPES = [(1, 1, 1), (3, 77, 5), (77, 3, 130), (130, 67, 33), (64, 128, 96)]
LAYOUTS = [(False, False), (False, True), (True, False), (True, True)]


def run_gemm(
    context: cl.Context,
    kernel_spec: KernelSpec,
    config: dict[str, int],
    workload: Workload,
    rng: np.random.Generator,
    *,
    alpha: float,
    beta: float,
    pad: int,
    limits: dict[str, int] | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """One GEMM with leading dimensions `pad` wider than the matrices: out, reference, tolerance.
    ``limits`` stand in for the device's.
    """
    queue = cl.CommandQueue(context)
    s = workload.shape
    a = rng.standard_normal((s["k"], s["m"]) if s["transa"] else (s["m"], s["k"]), dtype=np.float32)
    b = rng.standard_normal((s["n"], s["k"]) if s["transb"] else (s["k"], s["n"]), dtype=np.float32)
    c = rng.standard_normal((workload.shape["m"], workload.shape["n"]), dtype=np.float32)

    # Store each matrix inside a wider one: the kernel must honour lda/ldb/ldc.
    def widen(x: np.ndarray) -> np.ndarray:
        wide = np.full((x.shape[0], x.shape[1] + pad), np.float32(7.0))
        wide[:, : x.shape[1]] = x
        return wide

    a_wide, b_wide, c_wide = widen(a), widen(b), widen(c)
    flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
    buffers = [cl.Buffer(context, flags, hostbuf=x) for x in (a_wide, b_wide, c_wide)]
    program = cl.Program(context, kernel_spec.source).build(
        options=kernel_spec.build_options(config, workload)
    )
    space, shape = kernel_spec.space, workload.shape_vars()
    limits = limits or DeviceInfo.from_cl(context.devices[0]).limits
    elements = space.workspace_elements(config, shape, limits)
    zeroed = space.zeroed_elements(config, shape, limits)
    # Scratch starts as NaN: a partial product the first launch fails to write shows. Its
    # counters (the leading `zeroed` elements) start at zero.
    scratch = np.full(elements, np.nan, np.float32)
    scratch.view(np.int32)[:zeroed] = 0
    workspace = [cl.Buffer(context, flags, hostbuf=scratch)] if elements else []
    for launch in space.launches(config, shape, limits):
        getattr(program, launch.entry)(
            queue, launch.global_size, launch.local_size,
            np.int32(s["m"]), np.int32(s["n"]), np.int32(s["k"]),
            np.float32(alpha), np.float32(beta),
            buffers[0], np.int32(a_wide.shape[1]),
            buffers[1], np.int32(b_wide.shape[1]),
            buffers[2], np.int32(c_wide.shape[1]),
            *workspace,
        )  # fmt: skip
    out = np.empty_like(c_wide)
    cl.enqueue_copy(queue, out, buffers[2])
    if zeroed:
        cl.enqueue_copy(queue, scratch, workspace[0])
        assert not scratch.view(np.int32)[:zeroed].any(), "counters left non-zero"
    assert np.all(out[:, workload.shape["n"] :] == np.float32(7.0)), "kernel wrote outside C"
    op_a = (a.T if s["transa"] else a).astype(np.float64)
    op_b = (b.T if s["transb"] else b).astype(np.float64)
    expected = alpha * (op_a @ op_b)
    tolerance = family_tolerance(s["k"], abs(alpha) * (np.abs(op_a) @ np.abs(op_b)))
    expected = expected + beta * c.astype(np.float64)
    return out[:, : workload.shape["n"]], expected, tolerance


def assert_gemm_matches_reference(
    context: cl.Context,
    kernel_spec: KernelSpec,
    config: dict[str, int],
    workload: Workload,
    rng: np.random.Generator,
    *,
    alpha: float,
    beta: float,
    pad: int,
    limits: dict[str, int] | None = None,
) -> np.ndarray:
    """``run_gemm``'s result, checked finite and within the family's tolerance of the
    reference.
    """
    out, expected, tolerance = run_gemm(
        context, kernel_spec, config, workload, rng, alpha=alpha, beta=beta, pad=pad, limits=limits
    )
    error = np.abs(out - expected) - tolerance - 1e-6 * max(1.0, abs(beta))
    assert np.isfinite(out).all() and (error <= 0).all(), (config, workload)
    return out


def sample_configs(table: ConfigTable, count: int, seed: int) -> list[dict[str, int]]:
    rows = np.random.default_rng(seed).choice(len(table), size=count, replace=False)
    return [table.config(int(row)) for row in rows]


@pytest.mark.parametrize(("transa", "transb"), LAYOUTS)
def test_random_legal_configs_match_float64_reference(
    cl_device: cl.Device,
    gemm_kernel: KernelSpec,
    gemm_table: ConfigTable,
    transa: bool,
    transb: bool,
) -> None:
    context = cl.Context([cl_device])
    rng = np.random.default_rng(1234 + 2 * transa + transb)
    for index, config in enumerate(sample_configs(gemm_table, 6, seed=17 + 2 * transa + transb)):
        m, n, k = ODD_SHAPES[index % len(ODD_SHAPES)]
        workload = gemm_workload(m, n, k, transa, transb)
        beta = 0.0 if index % 2 else -0.5
        assert_gemm_matches_reference(
            context, gemm_kernel, config, workload, rng, alpha=1.5, beta=beta, pad=index % 3
        )


def test_large_aligned_shape_takes_the_fast_path_correctly(
    cl_device: cl.Device, gemm_kernel: KernelSpec, gemm_table: ConfigTable
) -> None:
    """Interior tiles use vector loads/stores; sizes that are tile multiples exercise them."""
    context = cl.Context([cl_device])
    rng = np.random.default_rng(5)
    workload = gemm_workload(256, 256, 128)
    for config in sample_configs(gemm_table, 4, seed=99):
        assert_gemm_matches_reference(
            context, gemm_kernel, config, workload, rng, alpha=1.0, beta=0.0, pad=0
        )


def first_config(table: ConfigTable, **fixed: int) -> dict[str, int]:
    """The first legal config with the given values: small tiles build fast on a CPU."""
    for config in table.configs():
        if all(config[name] == value for name, value in fixed.items()):
            return config
    raise AssertionError(f"no legal config with {fixed}")


@pytest.mark.parametrize(("transa", "transb"), LAYOUTS)
def test_prefetch_double_buffers_across_many_k_tiles(
    cl_device: cl.Device,
    gemm_kernel: KernelSpec,
    gemm_table: ConfigTable,
    transa: bool,
    transb: bool,
) -> None:
    """PF = 1 fills one local buffer while computing on the other: K of several tiles and a
    ragged last one, edge tiles in M and N, and every combination of staged operands.
    """
    context = cl.Context([cl_device])
    rng = np.random.default_rng(7 + 2 * transa + transb)
    workload = gemm_workload(37, 45, 8 * 5 + 3, transa, transb)
    for sa, sb in ((1, 1), (1, 0), (0, 1)):
        config = first_config(gemm_table, MWG=16, NWG=32, KWG=8, PF=1, SA=sa, SB=sb)
        assert_gemm_matches_reference(
            context, gemm_kernel, config, workload, rng, alpha=0.75, beta=0.5, pad=1
        )


@pytest.mark.parametrize(("transa", "transb"), LAYOUTS)
def test_k_groups_share_out_k_tiles_and_sum_their_tiles(
    cl_device: cl.Device,
    gemm_kernel: KernelSpec,
    gemm_table: ConfigTable,
    transa: bool,
    transb: bool,
) -> None:
    """KDIMC > 1: K groups take turns of K tiles and add their register tiles at the end. K of
    six tiles and a ragged one leaves K groups without a tile in the last turn, and K of a
    fraction of one tile leaves all but one K group without any; with and without prefetch and
    with either operand read straight from global memory.
    """
    context = cl.Context([cl_device])
    rng = np.random.default_rng(11 + 2 * transa + transb)
    cases = [(4, 1, 1, 1), (2, 0, 1, 1), (4, 1, 1, 0), (2, 1, 0, 1), (4, 0, 0, 1)]
    for index, (kdimc, pf, sa, sb) in enumerate(cases):
        config = first_config(gemm_table, MWG=16, NWG=32, KWG=8, KDIMC=kdimc, PF=pf, SA=sa, SB=sb)
        for k in (8 * 6 + 3, 3):
            workload = gemm_workload(37, 45, k, transa, transb)
            beta = 0.5 if index % 2 else 0.0
            assert_gemm_matches_reference(
                context, gemm_kernel, config, workload, rng, alpha=0.75, beta=beta, pad=1
            )


def test_edge_tiles_move_inside_the_matrix_and_store_only_their_own(
    cl_device: cl.Device, gemm_kernel: KernelSpec, gemm_table: ConfigTable
) -> None:
    """A tile that overhangs M or N moves back inside the matrix (``edge_shift``), computes
    rows or columns of its neighbour again and stores only its own: sizes that vectors divide
    and tiles do not, aligned leading dimensions (so that moved tiles take the vector loads),
    and beta != 0, which a tile that also stored its neighbour's part would apply twice. In
    every layout, with K groups, and with either operand read straight from global memory.
    """
    context = cl.Context([cl_device])
    rng = np.random.default_rng(17)
    cases = [(1, 1, 1, 1), (2, 0, 1, 1), (1, 1, 0, 1), (4, 1, 1, 0)]
    for transa, transb in LAYOUTS:
        workload = gemm_workload(100, 76, 8 * 5 + 4, transa, transb)
        for index, (kdimc, pf, sa, sb) in enumerate(cases):
            config = first_config(
                gemm_table, MWG=32, NWG=32, KWG=8, VWA=4 if sa else 1, VWB=4 if sb else 1,
                VWN=4, KDIMC=kdimc, PF=pf, SA=sa, SB=sb,
            )  # fmt: skip
            assert_gemm_matches_reference(
                context, gemm_kernel, config, workload, rng, alpha=0.75, beta=0.5,
                pad=4 * (index % 2),
            )  # fmt: skip


@pytest.mark.parametrize(("transa", "transb"), LAYOUTS)
def test_asynchronous_copies_keep_two_k_tiles_in_flight(
    cl_device: cl.Device,
    gemm_kernel: KernelSpec,
    device_info: DeviceInfo,
    transa: bool,
    transb: bool,
) -> None:
    """ASYNC: three local buffers in rotation (PF = 2), tiles that keep their layout copied
    straight into them, tiles to transpose through registers into the same rotation, or
    (ASYNC = 2) op(A) copied as it lies and read along k 1, 2 or 4 values at a time. K of several
    tiles and a ragged one, K shorter than the tiles in flight, and one operand read from global
    memory. Off NVIDIA a plain copy stands in for cp.async, so this pins the pipeline's buffers
    and barriers; on NVIDIA, verification pins the copies too.
    """
    limits = {**device_info.limits, "async_copy": 1}
    table = gemm_kernel.space.enumerate(limits)
    context = cl.Context([cl_device])
    rng = np.random.default_rng(13 + 2 * transa + transb)
    cases = [(1, 1, 8), (1, 1, 2), (1, 1, 4), (0, 1, 1), (1, 0, 8), (1, 1, 1)]
    for index, (sa, sb, kunroll) in enumerate(cases):
        config = first_config(
            table, MWG=16, NWG=32, KWG=8, ASYNC=1 + index % 2, PF=2, SA=sa, SB=sb, KUNROLL=kunroll
        )
        for k in (8 * 7 + 3, 5):
            workload = gemm_workload(37, 45, k, transa, transb)
            beta = 0.5 if index % 2 else 0.0
            assert_gemm_matches_reference(
                context, gemm_kernel, config, workload, rng, alpha=0.75, beta=beta, pad=1,
                limits=limits,
            )  # fmt: skip


# Matrix-vector shapes (M == 1 or N == 1) and small batches of rows (1 < M <= 16) in every
# layout, for gemm.cl's GEMV siblings: rows and K that no tile or vector divides, a single
# output, K below one vector, a batch that no MB divides, and wide leading dimensions (pad) that
# force the element-by-element path and strided x and y.
GEMV_SHAPES = [
    (1, 77, 130), (129, 1, 67), (1, 1, 1), (1, 300, 3), (33, 1, 256), (1, 1030, 40),
    (3, 77, 130), (16, 300, 9), (2, 1030, 40), (7, 2, 33),
]  # fmt: skip
GEMV_KERNELS = ("gemv_dot", "gemv_axpy", "gemv_dot_batch", "gemv_axpy_batch")


# gemv_axpy's split of K: K long against the outputs (the kernel's ``requires``), K that no
# slice divides, outputs that no tile divides, and rows of the matrix that vectors do not align.
GEMV_SPLITK_SHAPES = [(1, 77, 1500), (1, 300, 1031), (700, 1, 1100)]
#: The parameter whose largest value the first config of each kernel takes: the widest vectors,
#: and for the split, the most slices.
GEMV_EXTREME = {"gemv_axpy_splitk": "KSPLIT"}


def gemv_cases() -> list[tuple[str, int, int, int, bool, bool]]:
    shapes = {name: GEMV_SHAPES for name in GEMV_KERNELS} | {"gemv_axpy_splitk": GEMV_SPLITK_SHAPES}
    return [
        (name, m, n, k, transa, transb)
        for name, listed in shapes.items()
        for m, n, k in listed
        for transa, transb in LAYOUTS
        if load_kernel(name).takes(gemm_workload(m, n, k, transa, transb)) is None
    ]


def test_every_matrix_vector_layout_has_exactly_one_gemv_kernel() -> None:
    for m, n, k in GEMV_SHAPES:
        for transa, transb in LAYOUTS:
            workload = gemm_workload(m, n, k, transa, transb)
            takers = [name for name in GEMV_KERNELS if load_kernel(name).takes(workload) is None]
            assert len(takers) == 1, (workload, takers)
    for transb in (False, True):
        beyond_a_batch = gemm_workload(17, 2, 8, transb=transb)
        assert all(load_kernel(name).takes(beyond_a_batch) is not None for name in GEMV_KERNELS)


def test_every_gemv_work_group_has_outputs_and_a_pass_of_its_own(device_info: DeviceInfo) -> None:
    """Work-groups past the last tile stream the matrix for nothing (the batch kernels' launches
    once had M times too many); along the second dimension, one per pass of MB x vectors.
    """
    for name, m, n, k, transa, transb in gemv_cases():
        space = load_kernel(name).space
        shape = gemm_workload(m, n, k, transa, transb).shape_vars()
        outputs = n if n > 1 or m == 1 else m
        table = space.enumerate(device_info.limits)
        for config in (table.config(i) for i in range(0, len(table), max(1, len(table) // 25))):
            launch = space.launches(config, shape, device_info.limits)[0]
            sizes = zip(launch.global_size, launch.local_size, strict=True)
            tiles, rows = (whole // group for whole, group in sizes)
            assert (tiles - 1) * config["RT"] < outputs <= tiles * config["RT"], (name, config)
            if "MB" in config:
                assert rows == -(-m // config["MB"]), (name, m, config)
            elif "KSPLIT" not in config:
                assert rows == 1, (name, config)


@pytest.mark.parametrize("name", kernels_of("gemm"))
def test_a_build_holds_only_the_kernels_its_launches_name(
    cl_device: cl.Device, device_info: DeviceInfo, name: str
) -> None:
    """Another entry of the template, built with this config's tiles, costs the compiler as
    much as the one tuned or far more: gemv_dot with a gemv_axpy config's RT 512 and WG1 1
    unrolls 512 rows, and split-K builds that also held `gemm` measured 1.6-2.1 x fewer
    candidates a second on an H100. A build without octune's entry define (a runtime's own)
    gets every gemv entry.
    """
    context = cl.Context([cl_device])
    kernel = load_kernel(name)
    workload = gemm_workload(1, 4096, 4096)
    config = first_config(kernel.space.enumerate(device_info.limits))

    def entries(options: list[str]) -> set[str]:
        program = cl.Program(context, kernel.source).build(options=options)
        return set(program.get_info(cl.program_info.KERNEL_NAMES).split(";"))

    options = kernel.build_options(config, workload)
    assert entries(options) == {step.entry for step in kernel.space.launch_steps}
    if name == "gemv_axpy":
        runtime_options = [o for o in options if not o.startswith("-DOCTUNE_ENTRY_")]
        assert entries(runtime_options) == {"gemv_axpy", "gemv_dot"}


@pytest.mark.parametrize(("name", "m", "n", "k", "transa", "transb"), gemv_cases())
def test_gemv_configs_match_float64_reference(
    cl_device: cl.Device,
    device_info: DeviceInfo,
    name: str,
    m: int,
    n: int,
    k: int,
    transa: bool,
    transb: bool,
) -> None:
    kernel = load_kernel(name)
    # GPU-sized work-groups: PoCL took 43 s to compile a gemv_dot_batch config of 256
    # work-items, 146 s at 1,024 and 13 minutes at its own limit of 4,096.
    largest = min(256, device_info.limits["max_work_group_size"])
    limits = {**device_info.limits, "max_work_group_size": largest}
    table = kernel.space.enumerate(limits)
    values = table.column(GEMV_EXTREME.get(name, "VW"))
    seed = m + 3 * n + 7 * k + 2 * transa + transb
    extreme = np.random.default_rng(seed).choice(np.flatnonzero(values == values.max()))
    configs = [table.config(int(extreme)), *sample_configs(table, 2, seed)]
    context = cl.Context([cl_device])
    rng = np.random.default_rng(seed)
    workload = gemm_workload(m, n, k, transa, transb)
    for index, config in enumerate(configs):
        beta = 0.0 if index % 2 else -0.5
        assert_gemm_matches_reference(
            context, kernel, config, workload, rng, alpha=1.5, beta=beta, pad=(0, 1, 3)[index],
            limits=limits,
        )  # fmt: skip


# Split-K: shapes with few tiles of C and a long K (the kernel's ``requires``), K that no
# slice or K tile divides, so that trailing slices are short or empty.
SPLITK_SHAPES = [(37, 45, 1003), (5, 130, 2900), (64, 1, 777), (1, 9, 1500)]


@pytest.mark.parametrize("name", ["gemm_splitk", "gemm_splitk_serial"])
@pytest.mark.parametrize(("transa", "transb"), LAYOUTS)
def test_split_k_configs_match_float64_reference(
    cl_device: cl.Device, device_info: DeviceInfo, name: str, transa: bool, transb: bool
) -> None:
    kernel = load_kernel(name)
    table = kernel.space.enumerate(device_info.limits)
    seed = 31 + 2 * transa + transb + len(name)
    splits, groups = table.column("KSPLIT"), table.column("KDIMC")
    most = np.random.default_rng(seed).choice(np.flatnonzero(splits == splits.max()))
    grouped = np.random.default_rng(seed).choice(np.flatnonzero(groups == groups.max()))
    configs = [table.config(int(most)), table.config(int(grouped)), *sample_configs(table, 2, seed)]
    context = cl.Context([cl_device])
    rng = np.random.default_rng(seed)
    for index, config in enumerate(configs):
        workload = gemm_workload(*SPLITK_SHAPES[index], transa, transb)
        assert kernel.takes(workload) is None
        beta = 0.0 if index % 2 else -0.5
        assert_gemm_matches_reference(
            context, kernel, config, workload, rng, alpha=1.5, beta=beta, pad=index % 3
        )


@pytest.mark.parametrize(("transa", "transb"), [(False, False), (True, True)])
def test_one_and_two_launch_split_k_add_the_slices_alike(
    cl_device: cl.Device, device_info: DeviceInfo, transa: bool, transb: bool
) -> None:
    """The one-launch kernel's last work-group and gemm_splitk_sum both add the slices in
    their order, whichever work-group finishes last, so C agrees to the bit: with interior and
    edge tiles, and with an N that vectors do not divide.
    """
    serial, two_launch = load_kernel("gemm_splitk_serial"), load_kernel("gemm_splitk")
    table = two_launch.space.enumerate(device_info.limits)
    rows = np.flatnonzero(
        (table.column("MWG") == 32) & (table.column("NWG") == 64) & (table.column("VWN") == 4)
        & (table.column("KSPLIT") == 6) & (table.column("KDIMC") == 2)
    )  # fmt: skip
    assert rows.size
    config = table.config(int(np.random.default_rng(5).choice(rows)))
    serial_config = {name: value for name, value in config.items() if name != "RWG"}
    context = cl.Context([cl_device])
    for m, n, k in [(96, 192, 1100), (70, 130, 1001)]:
        workload = gemm_workload(m, n, k, transa, transb)
        outs = [
            assert_gemm_matches_reference(
                context,
                kernel,
                chosen,
                workload,
                np.random.default_rng(m),
                alpha=1.5,
                beta=-0.5,
                pad=0,
            )
            for kernel, chosen in [(two_launch, config), (serial, serial_config)]
        ]
        assert np.array_equal(outs[0], outs[1]), workload


@pytest.mark.parametrize("name", ["gemm_splitk", "gemm_splitk_serial"])
def test_split_k_is_offered_only_where_c_has_few_tiles_for_its_depth(name: str) -> None:
    kernel = load_kernel(name)
    assert kernel.takes(gemm_workload(256, 256, 8192)) is None
    assert kernel.takes(gemm_workload(128, 3072, 768)) is None  # 96 tiles of 64 x 64
    assert kernel.takes(gemm_workload(1000, 999, 997)) is None  # 256 tiles, 2 waves of them
    assert kernel.takes(gemm_workload(4096, 4096, 4096)) is not None  # 4096 tiles
    assert kernel.takes(gemm_workload(1000, 999, 400)) is not None  # too short for 256
    assert kernel.takes(gemm_workload(4096, 4096, 200)) is not None  # too short to split


@pytest.mark.parametrize("transb", [False, True])
def test_packed_a_is_read_as_a_transposed_a(
    cl_device: cl.Device, device_info: DeviceInfo, transb: bool
) -> None:
    """gemm_packed: A transposed into the workspace by one launch (rows padded to 16 bytes, M
    that no pack tile divides), then read there by the tiled kernel: through registers, with a
    tile in flight, and by copies (the stand-in off NVIDIA); odd lda (pad) and edge tiles.
    """
    kernel = load_kernel("gemm_packed")
    limits = {**device_info.limits, "async_copy": 1}
    table = kernel.space.enumerate(limits)
    assert set(table.column("ASYNC")) == {0, 1}  # ASYNC 2 is ASYNC 1 once A is [k][m]
    context = cl.Context([cl_device])
    rng = np.random.default_rng(41 + transb)
    cases = [(0, 0, 1, 1), (1, 0, 1, 1), (2, 1, 1, 1), (2, 1, 1, 0), (0, 0, 0, 1)]
    for index, (pf, asynchronous, sa, sb) in enumerate(cases):
        config = first_config(table, MWG=16, NWG=32, KWG=8, PF=pf, ASYNC=asynchronous, SA=sa, SB=sb)
        for m, n, k in ((37, 45, 8 * 6 + 3), (70, 33, 5), (128, 64, 200)):
            workload = gemm_workload(m, n, k, False, transb)
            assert_gemm_matches_reference(
                context, kernel, config, workload, rng, alpha=0.75, beta=0.5 * (index % 2),
                pad=index % 3, limits=limits,
            )  # fmt: skip
    assert kernel.takes(gemm_workload(1024, 2048, 512, False, transb)) is None
    assert kernel.takes(gemm_workload(1024, 2048, 512, True, transb)) is not None  # A is [k][m]
    assert kernel.takes(gemm_workload(2048, 1024, 512, False, transb)) is not None  # N too small
    assert kernel.takes(gemm_workload(256, 2048, 256, False, transb)) is not None  # too short


@pytest.mark.parametrize(("transa", "transb"), LAYOUTS)
def test_cpu_panel_configs_match_float64_reference(
    cl_device: cl.Device, device_info: DeviceInfo, transa: bool, transb: bool
) -> None:
    """gemm_panel's packed panels zero-pad past N and its row blocks past M read a valid row
    and store nothing: odd shapes, with the widest blocks and random ones.
    """
    kernel = load_kernel("gemm_panel")
    table = kernel.space.enumerate(device_info.limits)
    seed = 71 + 2 * transa + transb
    widths = table.column("NV") * table.column("VW") * table.column("MR")
    widest = np.random.default_rng(seed).choice(np.flatnonzero(widths == widths.max()))
    configs = [table.config(int(widest)), *sample_configs(table, 3, seed)]
    context = cl.Context([cl_device])
    rng = np.random.default_rng(seed)
    for index, config in enumerate(configs):
        workload = gemm_workload(*ODD_SHAPES[(index + transa) % len(ODD_SHAPES)], transa, transb)
        beta = 0.0 if index % 2 else -0.5
        assert_gemm_matches_reference(
            context, kernel, config, workload, rng, alpha=1.5, beta=beta, pad=index % 3
        )
