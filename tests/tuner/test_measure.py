"""Measurement classifies every candidate: ok, build_error, wrong_result, never a crash."""

from __future__ import annotations

import dataclasses
import math

import pyopencl as cl
import pytest

from octune.catalogue.family import OperandMemo
from octune.catalogue.registry import KernelSpec, load_kernel
from octune.catalogue.space import ConfigTable
from octune.core.results import Status
from octune.kernels.gemm import gemm_workload
from octune.tuner.device import DeviceInfo
from octune.tuner.measure import DeviceRunner, RunnerChain, fastest_fifth

WORKLOAD = gemm_workload(45, 37, 29)


def small_config(table: ConfigTable, **fixed: int) -> dict[str, int]:
    """The first legal config with the given values: small tiles build fast on a CPU."""
    for config in table.configs():
        if all(config[name] == value for name, value in fixed.items()):
            return config
    raise AssertionError(f"no legal config with {fixed}")


def variant(kernel: KernelSpec, old: str, new: str) -> KernelSpec:
    """A test-only copy of the template with one deliberate change."""
    assert old in kernel.source
    return dataclasses.replace(kernel, source=kernel.source.replace(old, new))


def test_correct_config_is_ok_with_timings(
    cl_device: cl.Device, gemm_kernel: KernelSpec, gemm_table: ConfigTable
) -> None:
    runner = DeviceRunner(cl_device, gemm_kernel, WORKLOAD, seed=1, repeats=4)
    result = runner.measure(small_config(gemm_table, MWG=16, NWG=16, SA=1, SB=1))
    assert result.status is Status.OK, result.message
    assert len(result.times_s) >= 3 and all(t > 0 for t in result.times_s)
    assert result.gflops is not None and result.gflops > 0
    assert result.max_error is not None and result.max_error < 1


def test_the_fastest_fifth_is_about_the_tenth_percentile() -> None:
    runs = [float(t) for t in range(100, 0, -1)]
    assert fastest_fifth(runs, samples=10, least=3) == [float(t) for t in range(1, 20, 2)]
    assert fastest_fifth([3.0, 1.0, 2.0], samples=10, least=3) == [1.0, 2.0, 3.0]


def test_a_cpu_device_keeps_the_fastest_fifth_of_its_runs(
    cl_device: cl.Device, gemm_kernel: KernelSpec, gemm_table: ConfigTable
) -> None:
    """Other work on the machine only adds time, in phases longer than a run: a CPU device
    runs five runs a sample at least and keeps the fastest fifth, in order.
    """
    if DeviceInfo.from_cl(cl_device).device_type != "cpu":
        pytest.skip("the CPU protocol")
    runner = DeviceRunner(cl_device, gemm_kernel, WORKLOAD, seed=1, repeats=4)
    result = runner.measure(small_config(gemm_table, MWG=16, NWG=16, SA=1, SB=1))
    assert result.status is Status.OK, result.message
    assert len(result.times_s) == 4 and list(result.times_s) == sorted(result.times_s)
    # The other four fifths each took at least as long as the slowest sample kept.
    assert result.extra["device_s"] >= 4 * sum(result.times_s)


def test_back_to_back_bursts_give_seconds_per_run(
    cl_device: cl.Device, gemm_kernel: KernelSpec, gemm_table: ConfigTable
) -> None:
    runner = DeviceRunner(cl_device, gemm_kernel, WORKLOAD, seed=1, repeats=3, back_to_back=4)
    result = runner.measure(small_config(gemm_table, MWG=16, NWG=16, SA=1, SB=1))
    assert result.status is Status.OK, result.message
    # Four runs per burst: per run, not per burst, and not faster than the device can go.
    assert 0 < result.extra["back_to_back_s"] < 4 * max(result.times_s)
    # The host's clock in a queue without profiling: a time, which other processes on the host
    # can stretch (so no upper bound here).
    assert 0 < result.extra["back_to_back_unprofiled_s"] < math.inf


def test_config_that_cannot_build_is_a_build_error(
    cl_device: cl.Device, gemm_kernel: KernelSpec, gemm_table: ConfigTable
) -> None:
    broken = variant(
        gemm_kernel, "#define MWI", "#if MWG == 16\n#error unsupported tile\n#endif\n#define MWI"
    )
    runner = DeviceRunner(cl_device, broken, WORKLOAD, seed=1)
    result = runner.measure(small_config(gemm_table, MWG=16))
    assert result.status is Status.BUILD_ERROR
    assert "unsupported tile" in result.message
    assert runner.measure(small_config(gemm_table, MWG=32, NWG=16)).status is Status.OK


@pytest.mark.parametrize(
    ("old", "new", "what"),
    [
        # Off by a hair in every element: caught by the tolerance, not only by NaN.
        (
            "acc[i][j] = a[i] * b[j] + acc[i][j];",
            "acc[i][j] = (a[i] * b[j] + acc[i][j]) * 1.001f;",
            "scaled",
        ),
        # One column at the matrix edge left unwritten: caught by the NaN poison.
        ("if (n >= n_shift && n < n_left) {", "if (n >= n_shift && n < n_left - 1) {", "unwritten"),
        # The last K element ignored.
        ("const int k_left = K - k0;", "const int k_left = K - k0 - 1;", "short K"),
    ],
)
def test_wrong_kernel_variant_is_rejected(
    cl_device: cl.Device,
    gemm_kernel: KernelSpec,
    gemm_table: ConfigTable,
    old: str,
    new: str,
    what: str,
) -> None:
    wrong = variant(gemm_kernel, old, new)
    runner = DeviceRunner(cl_device, wrong, WORKLOAD, seed=2)
    result = runner.measure(small_config(gemm_table, MWG=16, NWG=16, SA=0, SB=0))
    assert result.status is Status.WRONG_RESULT, what
    assert result.max_error is not None and result.max_error >= 1
    assert result.gflops is None


def test_same_config_is_built_once(
    cl_device: cl.Device, gemm_kernel: KernelSpec, gemm_table: ConfigTable
) -> None:
    runner = DeviceRunner(cl_device, gemm_kernel, WORKLOAD, seed=3, repeats=3)
    config = small_config(gemm_table, MWG=16, NWG=16)
    options = gemm_kernel.build_options(config, WORKLOAD)
    assert runner.build(options) is runner.build(options)


def test_a_result_must_hold_after_the_timed_runs_too(
    cl_device: cl.Device, gemm_kernel: KernelSpec, gemm_table: ConfigTable
) -> None:
    """A race between work-groups can go right on the first run and wrong on later ones (as
    one-launch split-K did on NVIDIA): a kernel that is right once, then corrupts its own
    input, is caught by the second check after the timed runs.
    """
    body = "    gemm_tile(M, N, K, alpha, beta, A, lda, B, ldb, C, ldc, tiles EPILOGUE_PASS);\n}"
    corrupting = variant(gemm_kernel, body, body[:-1] + "    barrier(CLK_GLOBAL_MEM_FENCE);\n"
                         "    if (get_local_id(0) + get_local_id(1) + get_local_id(2) == 0)\n"
                         "        ((__global float*)A)[0] += 1.0f;\n}")  # fmt: skip
    workload = gemm_workload(16, 16, 16)  # one work-group: nothing reads A after the change
    config = small_config(gemm_table, MWG=16, NWG=16, KDIMC=1)
    honest = DeviceRunner(cl_device, gemm_kernel, workload, seed=2)
    assert honest.measure(config).status is Status.OK
    result = DeviceRunner(cl_device, corrupting, workload, seed=2).measure(config)
    assert result.status is Status.WRONG_RESULT
    assert result.message.startswith("right on its first run, then off the float64 reference")


def test_kernel_that_leaves_its_counters_dirty_is_rejected(cl_device: cl.Device) -> None:
    """One-launch split-K must leave its zeroed counters at zero: the next run relies on it."""
    serial = load_kernel("gemm_splitk_serial")
    workload = gemm_workload(37, 45, 1003)
    config = small_config(serial.space.enumerate(DeviceInfo.from_cl(cl_device).limits),
                          MWG=16, NWG=16, KSPLIT=3)  # fmt: skip
    assert DeviceRunner(cl_device, serial, workload, seed=4).measure(config).status is Status.OK
    forgetful = variant(serial, "if (tid == 0) atomic_xchg(counter, 0);", "")
    result = DeviceRunner(cl_device, forgetful, workload, seed=4).measure(config)
    assert result.status is Status.WRONG_RESULT
    assert "zeroed workspace elements non-zero" in result.message


def test_a_memo_binds_a_workloads_inputs_once_for_its_kernels(
    cl_device: cl.Device, gemm_kernel: KernelSpec, gemm_table: ConfigTable
) -> None:
    """Kernels of one workload on one seed share the host operands and reference (and the
    OpenCL context handed on); another seed draws its own; each runner still checks and
    rejects what is wrong.
    """
    memo = OperandMemo(size=2)
    first = DeviceRunner(cl_device, gemm_kernel, WORKLOAD, seed=5, memo=memo)
    wrong = variant(gemm_kernel, "const int k_left = K - k0;", "const int k_left = K - k0 - 1;")
    second = DeviceRunner(cl_device, wrong, WORKLOAD, seed=5, memo=memo, context=first.context)
    assert second.data.expected is first.data.expected  # type: ignore[attr-defined]
    assert second.context is first.context
    config = small_config(gemm_table, MWG=16, NWG=16, SA=0, SB=0)
    assert first.measure(config).status is Status.OK
    assert second.measure(config).status is Status.WRONG_RESULT

    fresh = DeviceRunner(cl_device, gemm_kernel, WORKLOAD, seed=6, memo=memo)
    assert fresh.data.expected is not first.data.expected  # type: ignore[attr-defined]
    assert not (fresh.data.expected == first.data.expected).all()  # type: ignore[attr-defined]
    assert fresh.measure(config).status is Status.OK
    other = gemm_workload(33, 17, 9)  # a third key: the memo keeps two, the oldest goes
    DeviceRunner(cl_device, gemm_kernel, other, seed=5, memo=memo)
    again = DeviceRunner(cl_device, gemm_kernel, WORKLOAD, seed=5, memo=memo)
    assert again.data.expected is not first.data.expected  # type: ignore[attr-defined]
    assert (again.data.expected == first.data.expected).all()  # type: ignore[attr-defined]


def test_a_chains_runners_hand_on_the_context_each_last_held(
    cl_device: cl.Device, gemm_kernel: KernelSpec, gemm_table: ConfigTable
) -> None:
    """The next runner of a chain takes the context its last runner holds when it is made: the
    fresh one that runner opened after a failed launch, not the one it was given.
    """
    chain = RunnerChain(OperandMemo(size=1))
    first = chain.runner(cl_device, gemm_kernel, WORKLOAD, seed=5)
    second = chain.runner(cl_device, gemm_kernel, WORKLOAD, seed=5)
    assert second.context is first.context
    assert second.data.expected is first.data.expected  # type: ignore[attr-defined]
    given = second.context
    second._open()  # as measure() does after a failed launch
    third = chain.runner(cl_device, gemm_kernel, WORKLOAD, seed=5, repeats=3)
    assert third.context is second.context and third.context is not given
    assert chain.last is third
    assert third.measure(small_config(gemm_table, MWG=16, NWG=16)).status is Status.OK


def test_without_a_seed_a_memo_keeps_one_for_the_runners_life(
    cl_device: cl.Device, gemm_kernel: KernelSpec
) -> None:
    """A re-open after a failed launch binds the same inputs again, from the memo."""
    runner = DeviceRunner(cl_device, gemm_kernel, WORKLOAD, memo=OperandMemo())
    assert runner.seed is not None
    expected = runner.data.expected  # type: ignore[attr-defined]
    runner._open()
    assert runner.data.expected is expected  # type: ignore[attr-defined]
    assert DeviceRunner(cl_device, gemm_kernel, WORKLOAD).seed is None
