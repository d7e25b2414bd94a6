"""Low precision end to end on the test device: float16 and int8 GEMM kernels tuned, verified
by format (float16 within its bound, int8 exact), stored, answered only for their own dtype by
the store's lookup, a bundle and the C header; a wrong low-precision result is rejected."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers.cli_testing import assert_one_line_error, octune

from octune.catalogue.limits import extension_limits
from octune.catalogue.precision import requantize, tolerance
from octune.catalogue.registry import kernel_from_texts, load_kernel
from octune.db.store import Store
from octune.firmware.export import export_bundle
from octune.kernels.gemm import FAMILY, gemm_query
from octune.lookup.data import QueryError
from octune.lookup.tables import StoreLookup
from octune.tuner.campaign import extension_notes, tasks_for
from octune.tuner.device import DeviceInfo
from octune.tuner.session import Budget, Settings, run_session

SHAPE = ["--m", "48", "--n", "40", "--k", "72"]
C_PROGRAM = r"""
#include <stdio.h>
#include "octune_lookup.h"
int main(void) {
    struct octune_config cfg;
    int int8 = octune_gemm_int8_lookup(48, 40, 72, 0, 0, &cfg);
    printf("int8 %d %s\n", int8, int8 ? cfg.kernel : "-");
    int nearest = octune_gemm_int8_lookup(50, 40, 70, 0, 0, &cfg);
    printf("near %d %s\n", nearest, nearest ? cfg.kernel : "-");
    int f16 = octune_gemm_float16_lookup(48, 40, 72, 0, 0, &cfg);
    printf("float16 %d %s\n", f16, f16 ? cfg.kernel : "-");
    return 0;
}
"""


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One database with the same shape tuned in int8 and in float16 through the CLI."""
    db = tmp_path_factory.mktemp("precision") / "tuned.db"
    for dtype in ("int8", "float16"):
        result = octune("tune", "gemm", *SHAPE, "--dtype", dtype, "--budget", "3",
                        "--confirm", "0", "--seed", "2", db=db)  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
    return db


def test_each_dtype_is_answered_by_its_own_kernels_only(tuned: Path) -> None:
    with Store(f"sqlite:///{tuned}") as store:
        lookup = StoreLookup(store)
        (device,) = store.stored_devices()
        int8 = lookup.lookup(device, gemm_query(48, 40, 72, dtype="int8"))
        half = lookup.lookup(device, gemm_query(48, 40, 72, dtype="float16"))
        single = lookup.lookup(device, gemm_query(48, 40, 72))
        with pytest.raises(QueryError, match="computes int8, not float32"):
            lookup.lookup(device, replace(gemm_query(48, 40, 72), kernel="gemm_int8"))
    assert (int8.match, int8.kernel, int8.dtype) == ("exact", "gemm_int8", "int8")
    assert "-DOCTUNE_INT8=1" in int8.build_options
    assert (half.match, half.kernel) == ("exact", "gemm_panel_float16")
    assert "-DOCTUNE_FLOAT16=1" in half.build_options
    assert single.match == "default" and single.kernel not in ("gemm_int8", "gemm_panel_float16")


def test_bundles_and_the_c_header_key_answers_by_dtype(tuned: Path, tmp_path: Path) -> None:
    with Store(f"sqlite:///{tuned}") as store:
        (device,) = store.stored_devices()
        _, tables = export_bundle(store, device.fingerprint, None, "c-header", tmp_path,
                                  dtypes=["int8"])  # fmt: skip
        assert [table.dtype for table in tables] == ["int8"]
    (tmp_path / "main.c").write_text(C_PROGRAM.replace(
        "    int f16 = octune_gemm_float16_lookup(48, 40, 72, 0, 0, &cfg);\n"
        '    printf("float16 %d %s\\n", f16, f16 ? cfg.kernel : "-");\n', ""))  # fmt: skip
    program = tmp_path / "lookup"
    gcc = ["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1"]
    subprocess.run([*gcc, "-I", str(tmp_path), "-o", str(program), str(tmp_path / "main.c")],
                   check=True, capture_output=True, text=True, timeout=120)  # fmt: skip
    lines = subprocess.run([program], capture_output=True, text=True, timeout=60).stdout
    assert lines.splitlines() == ["int8 1 gemm_int8", "near 2 gemm_int8"]  # exact, nearest

    json_dir = tmp_path / "json"
    exported = octune("export", "--device", device.fingerprint, "--out", str(json_dir),
                      "--no-model", db=tuned)  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    answer = octune("lookup", str(json_dir), "gemm", *SHAPE, "--dtype", "float16")
    assert answer.returncode == 0, answer.stderr
    assert '"kernel": "gemm_panel_float16"' in answer.stdout and '"exact"' in answer.stdout
    assert_one_line_error(octune("lookup", str(json_dir), "gemm", *SHAPE, "--dtype", "half"),
                          "float32, float16, int8")  # fmt: skip
    nothing = octune("export", "--device", device.fingerprint, "--out", str(tmp_path / "none"),
                     "--dtype", "float32", db=tuned)  # fmt: skip
    assert_one_line_error(nothing, "no kernel of dtype float32 is tuned")


def test_a_wrong_int8_result_is_rejected_and_recorded(
    tmp_path: Path, device_info: DeviceInfo
) -> None:
    """gemm_int8 with its zero-point correction left out: every config measured is recorded as
    a wrong result, none becomes best.
    """
    kernel = load_kernel("gemm_int8")
    broken_source = kernel.source.replace("offset -= a_zero * column_sums[v];", "")
    assert broken_source != kernel.source
    broken = kernel_from_texts("gemm_int8", broken_source, kernel.space.source_text)
    workload = FAMILY.workload({"m": 20, "n": 24, "k": 40}, "int8")
    with Store(f"sqlite:///{tmp_path / 'wrong.db'}") as store:
        report = run_session(
            store, device_info, broken, workload, broken.space.enumerate(device_info.limits),
            strategy="exhaustive", budget=Budget(candidates=2),
            settings=Settings(jobs=0, confirm=0, cache_root=str(tmp_path / "cache")),
        )  # fmt: skip
        measured = store.session_measurements(report.session_id)
        best = store.best(device_info.fingerprint, "gemm_int8", workload.key, broken.sha256)
    assert [m.status for m in measured] == ["wrong_result", "wrong_result"]
    assert best is None


def test_float16_tolerance_follows_the_format_and_the_reduction_length() -> None:
    magnitude = np.ones(3)
    single, half = tolerance(64, magnitude), tolerance(64, magnitude, "float16")
    assert half[0] / single[0] == pytest.approx(2.0**13)  # eps 2^-10 against 2^-23
    assert tolerance(256, magnitude, "float16")[0] == pytest.approx(2 * half[0])  # sqrt(K)


def test_requantisation_rounds_half_to_even_and_saturates() -> None:
    sums = np.array([5, 7, -1000, 1000, 3], dtype=np.int64)
    scale = np.array([0.5, 0.5, 1.0, 1.0, 0.5], dtype=np.float32)
    assert requantize(sums, scale, 10).tolist() == [12, 14, 0, 255, 12]  # 2.5 -> 2, 3.5 -> 4


def test_half_arithmetic_needs_cl_khr_fp16_and_its_absence_is_one_line() -> None:
    assert extension_limits("cl_khr_fp64 cl_khr_fp16") == {"fp16": 1}
    assert extension_limits("") == {"fp16": 0}
    tasks = tasks_for("gemm_panel_float16", {"m": 8, "n": 8, "k": 8}, "float16")
    limits = {"fp16": 0}
    (note,) = extension_notes(tasks, "Some CPU (PoCL)", limits)
    assert note == (
        "Some CPU (PoCL) has no cl_khr_fp16: gemm_panel_float16 tunes its float16 storage "
        "with float arithmetic only"
    )
    assert extension_notes(tasks, "Some CPU", {"fp16": 1}) == []
    space = tasks[0].kernel.space
    base = load_kernel("gemm_panel").space.enumerate(_cpu_limits(1))
    assert {c["HALF"] for c in space.enumerate(_cpu_limits(0)).configs()} == {0}
    assert len(space.enumerate(_cpu_limits(1))) == 2 * len(base)


def test_a_workload_of_a_dtype_no_kernel_computes_is_one_line() -> None:
    with pytest.raises(Exception, match="kernel gemm_panel computes float32, not int8"):
        tasks_for("gemm_panel", {"m": 8, "n": 8, "k": 8}, "int8")
    result = octune("tune", "gemm", *SHAPE, "--dtype", "bfloat16")
    assert_one_line_error(result, "--dtype: dtype must be one of float32, float16, int8")


def _cpu_limits(fp16: int) -> dict[str, int]:
    info = DeviceInfo("P", "1", "V", "cpu", "1", 2, 4096, (4096, 4096, 4096), 1 << 15, 1 << 34,
                      "cpu", "cl_khr_fp16" if fp16 else "")  # fmt: skip
    return info.limits


def test_half_arithmetic_verifies_where_the_device_has_cl_khr_fp16(
    cl_device, device_info: DeviceInfo
) -> None:
    """CI installs Intel's CPU runtime beside PoCL, so the test device has cl_khr_fp16 on every
    x86-64 machine and the half-arithmetic configs are built, run and verified for real.
    """
    from octune.tuner.measure import DeviceRunner

    if not device_info.limits["fp16"]:
        pytest.skip(f"{device_info.name} has no cl_khr_fp16 (install the intel-cpu extra)")
    kernel = load_kernel("gemm_panel_float16")
    table = kernel.space.enumerate(device_info.limits)
    half = [table.config(i) for i in range(len(table)) if table.config(i)["HALF"] == 1]
    workload = FAMILY.workload({"m": 37, "n": 45, "k": 300, "transa": 1}, "float16")
    runner = DeviceRunner(cl_device, kernel, workload, seed=5, repeats=1, min_repeats=1)
    for config in half[:: len(half) // 3][:3]:
        measurement = runner.measure(config)
        assert measurement.ok, (config, measurement.message)
        assert measurement.max_error is not None and measurement.max_error < 1.0


def test_a_network_tunes_in_float16_layer_by_layer(tmp_path: Path) -> None:
    """Every Conv and Gemm of a network has a float16 kernel (conv2d_igemm_float16 takes any
    convolution), so `tune --model --dtype float16` tunes the network's layers in float16.
    """
    db = tmp_path / "net.db"
    result = octune("tune", "--model", "squeezenet1.1", "--batch", "1", "--dtype", "float16",
                    "--budget", "4", "--confirm", "0", "--seed", "1", db=db)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    with Store(f"sqlite:///{db}") as store:
        (device,) = store.stored_devices()
        kernels = store.tuned_kernel_names(device.fingerprint)
    assert kernels and all(name.endswith("_float16") for name in kernels)


def test_the_rest_schema_offers_exactly_octunes_dtypes() -> None:
    from typing import get_args

    from octune.api.schemas import ShapeFields
    from octune.core.precision import DTYPES

    assert get_args(ShapeFields.model_fields["dtype"].annotation) == DTYPES
