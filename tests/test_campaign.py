"""Which of a family's kernels a device tunes (``for_device``)."""

from __future__ import annotations

import pytest

from octune.tuner.campaign import for_device, tasks_for

GEMM = {"m": 256, "n": 256, "k": 256}
CONV = {"n": 1, "c": 64, "h": 56, "w": 56, "k": 64, "r": 3, "s": 3, "pad": 1}
NHWC = {**CONV, "nhwc": 1}


def test_a_cpu_tunes_the_family_kernels_written_for_cpus_with_the_whole_weight() -> None:
    tasks = tasks_for("gemm", GEMM, weight=2.0)
    kept, left_out = for_device(tasks, "cpu")
    assert [(t.kernel.name, t.weight) for t in kept] == [("gemm_panel", 2.0)]
    assert set(left_out) == {t.kernel.name for t in tasks} - {"gemm_panel"}


def test_a_gpu_leaves_out_the_kernels_written_for_cpus() -> None:
    tasks = tasks_for("gemm", GEMM, weight=2.0)
    kept, left_out = for_device(tasks, "gpu")
    assert left_out == ["gemm_panel"]
    assert len(kept) == len(tasks) - 1
    assert sum(t.weight for t in kept) == pytest.approx(2.0)


def test_a_kernel_named_on_its_own_is_kept_on_any_device() -> None:
    named = tasks_for("gemm_panel", GEMM)
    assert for_device(named, "gpu") == (named, [])


def test_each_workload_keeps_the_kernels_that_suit_it_best() -> None:
    """conv2d_panel (written for CPUs) takes NCHW layers only: an NHWC layer of the same run
    keeps every kernel written for any device.
    """
    nchw, nhwc = tasks_for("conv2d", CONV), tasks_for("conv2d", NHWC)
    kept, left_out = for_device([*nchw, *nhwc], "cpu")
    assert [t.kernel.name for t in kept if t.workload == nchw[0].workload] == ["conv2d_panel"]
    assert [t for t in kept if t.workload == nhwc[0].workload] == nhwc
    assert set(left_out) == {t.kernel.name for t in nchw} - {"conv2d_panel"}
