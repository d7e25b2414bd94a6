"""Devices: the check that a device compiles, its cache, the default choice among devices, the
one-line reasons failures are reported with, and the vendor folder for PyPI runtimes.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pyopencl as cl
import pytest

from octune.core.results import one_line_reason
from octune.tuner.device import (
    PROBE_FILE,
    DeviceInfo,
    compile_check,
    compiling_devices,
    list_devices,
    select_device,
)
from octune.tuner.device_names import match_devices
from octune.tuner.opencl_runtimes import (
    INTEL_CPU,
    extra_requirements,
    installed_library,
    loader_icd_files,
    system_driver_hint,
    vendor_folder,
)

OCTUNE = [sys.executable, "-m", "octune"]


def test_the_suite_runs_on_a_device_that_compiles(cl_device: cl.Device) -> None:
    """The device every other test uses passed the check: a suite on a device that cannot
    compile would fail in every kernel test rather than here, once, with the reason.
    """
    assert compile_check(cl_device, recheck=True).ok


def test_the_devices_that_compile_and_those_left_out_make_up_the_machine(
    cl_device: cl.Device,
) -> None:
    """What an agent drives by default: on a Zen 5, Intel's runtime and not PoCL 3.0."""
    devices, left_out = compiling_devices()
    assert cl_device in devices
    assert all(compile_check(device).ok for device in devices)
    assert all(not check.ok and check.reason for _device, check in left_out)
    every = [*devices, *(device for device, _check in left_out)]
    assert sorted(d.int_ptr for d in every) == sorted(d.int_ptr for d in list_devices())


def test_the_check_is_cached_per_fingerprint_until_rechecked(
    cl_device: cl.Device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OCTUNE_CACHE_DIR", str(tmp_path))
    assert compile_check(cl_device).ok
    cached = tmp_path / DeviceInfo.from_cl(cl_device).fingerprint / PROBE_FILE
    assert json.loads(cached.read_text()) == {"ok": True, "reason": None}

    cached.write_text(json.dumps({"ok": False, "reason": "error: stale"}))
    assert compile_check(cl_device).reason == "error: stale"
    assert compile_check(cl_device, recheck=True).ok
    assert json.loads(cached.read_text())["ok"] is True


def test_a_real_build_error_reads_as_the_compilers_one_line(cl_device: cl.Device) -> None:
    context = cl.Context([cl_device])
    source = "__kernel void k(__global float* x) { x[0] = undeclared_octune_name; }"
    with pytest.raises(cl.Error) as raised:
        cl.Program(context, source).build(options=["-DOCTUNE_OPTION=1"])
    reason = one_line_reason(str(raised.value))
    assert "\n" not in reason and reason.startswith("error")  # no source location: see below
    assert "undeclared_octune_name" in reason
    assert "OCTUNE_OPTION" not in reason and " at 0x" not in reason


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (
            "clBuildProgram failed: BUILD_PROGRAM_FAILURE - clBuildProgram failed: "
            "BUILD_PROGRAM_FAILURE\n\nBuild on <pyopencl.Device 'pthread-AMD EPYC' on 'Portable "
            "Computing Language' at 0x55f96a4eff40>:\n\nerror: unknown target CPU 'generic'\n"
            "Device pthread-AMD EPYC failed to build the program\n\n(options: -DMWG=16 -w)",
            "error: unknown target CPU 'generic'",
        ),
        (
            "clEnqueueNDRangeKernel failed: OUT_OF_RESOURCES",
            "clEnqueueNDRangeKernel failed: OUT_OF_RESOURCES",
        ),
        (
            "work-group of 512 exceeds the 256 this kernel allows",
            "work-group of 512 exceeds the 256 this kernel allows",
        ),
        (
            "Build on <x>:\n\nCompilation started\n7:1:2: error: never builds\n  1 | #error",
            "error: never builds",
        ),
        (
            "<kernel>:3:5: error: use of undeclared identifier 'MWG'",
            "error: use of undeclared identifier 'MWG'",
        ),
        (
            "error: /root/.cache/pocl/kcache/tempfile_Bo2XlF.cl:1:26: expected parameter "
            "declarator\n3 errors generated.",
            "error: expected parameter declarator",
        ),
        ("", "(no message)"),
    ],
)
def test_one_line_reason(message: str, reason: str) -> None:
    assert one_line_reason(message) == reason


def octune(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OCTUNE_CACHE_DIR": str(cache), "COLUMNS": "300"}
    return subprocess.run([*OCTUNE, *args], capture_output=True, text=True, env=env, timeout=120)


def test_no_device_that_compiles_is_one_line_naming_each_reason(tmp_path: Path) -> None:
    """Every device's cached check says it fails, as PoCL 3.0's does on a Zen 5: tuning stops
    before it starts, with each device's reason and the fix, and `devices` shows the same.
    """
    for device in list_devices():
        path = tmp_path / DeviceInfo.from_cl(device).fingerprint / PROBE_FILE
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"ok": False, "reason": "error: octune-test CPU 'generic'"}))
    tuned = octune("tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--budget", "2",
                   "--db", f"sqlite:///{tmp_path / 'x.db'}", cache=tmp_path)  # fmt: skip
    assert tuned.returncode == 3 and "Traceback" not in tuned.stderr  # no device
    lines = tuned.stderr.strip().splitlines()
    assert len(lines) == 1, tuned.stderr
    assert lines[0].startswith("error: no OpenCL device here can compile a kernel")
    assert "octune-test CPU 'generic'" in lines[0] and "octune setup" in lines[0]

    # An agent drives every device that compiles: with none, it stops in the same one line.
    agent = octune("agent", "--server", "http://127.0.0.1:9", "--exit-when-idle", cache=tmp_path)
    assert agent.returncode == 3 and "Traceback" not in agent.stderr
    assert agent.stderr.strip().startswith("error: no OpenCL device here can compile a kernel")

    listed = octune("devices", "--json", cache=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [row["compiles"] for row in rows] == [False] * len(rows)
    assert {row["compile_error"] for row in rows} == {"error: octune-test CPU 'generic'"}

    # `setup` rechecks rather than trusting the cache, and finds the real device compiles.
    setup = octune("setup", "--no-install", cache=tmp_path)
    assert setup.returncode == 0, setup.stderr
    assert "Ready" in setup.stdout
    # ... and says how fast each CPU runtime runs the reference GEMM (a verified run), or why
    # it cannot (PoCL 3.0 on a Zen 5, beside Intel's runtime).
    for index, device in enumerate(list_devices()):
        if device.type & cl.device_type.CPU:
            rate = r"GEMM 512³ at [\d,.]+ GFLOP/s|cannot compile: .+"
            assert re.search(rf"^{index}: .* ({rate})$", setup.stdout, re.M), setup.stdout
    assert re.search(r"^\d+: .* GEMM 512³ at [\d,.]+ GFLOP/s$", setup.stdout, re.M)


def test_an_explicit_device_that_cannot_compile_is_refused(
    cl_device: cl.Device, tmp_path: Path
) -> None:
    info = DeviceInfo.from_cl(cl_device)
    path = tmp_path / info.fingerprint / PROBE_FILE
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"ok": False, "reason": "error: octune-test"}))
    index = str(list_devices().index(select_device()))
    tuned = octune("tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--device", index,
                   "--db", f"sqlite:///{tmp_path / 'x.db'}", cache=tmp_path)  # fmt: skip
    assert tuned.returncode == 3, tuned.stderr
    assert tuned.stderr.count("\n") == 1
    assert f"{info.name} ({info.platform_name}) cannot compile a kernel: error: octune-test" in (
        tuned.stderr
    )


def test_vendor_folder_keeps_the_loaders_entries_and_is_named_by_content(tmp_path: Path) -> None:
    system = tmp_path / "vendors"
    system.mkdir()
    (system / "nvidia.icd").write_text("libnvidia-opencl.so.1\n")
    (system / "README").write_text("not an icd")
    assert loader_icd_files(str(system)) == {"nvidia.icd": "libnvidia-opencl.so.1\n"}
    assert loader_icd_files(str(system / "nvidia.icd")) == {"nvidia.icd": "libnvidia-opencl.so.1\n"}
    assert loader_icd_files("libmali.so") == {"user-library.icd": "libmali.so\n"}

    entries = {**loader_icd_files(str(system)), "octune-intel-cpu.icd": "/x/libintelocl.so\n"}
    folder = vendor_folder(entries, tmp_path / "made")
    assert {p.name: p.read_text() for p in folder.iterdir()} == entries
    assert vendor_folder(dict(entries), tmp_path / "made") == folder
    other = vendor_folder({"a.icd": "liba.so\n"}, tmp_path / "made")
    assert other != folder and [p.name for p in other.iterdir()] == ["a.icd"]
    assert not [p for p in (tmp_path / "made").iterdir() if p.name.startswith(".new-")]


def test_the_intel_extra_names_both_runtime_distributions_where_published() -> None:
    requirements = extra_requirements("intel-cpu")
    names = {requirement.split(">")[0].split("=")[0] for requirement in requirements}
    published = platform.machine() == "x86_64" and sys.platform == "linux"  # Intel's wheels
    assert names == ({"intel-opencl-rt", "intel-cmplr-lib-rt"} if published else set())
    assert extra_requirements("no-such-extra") == []


def test_where_pypi_has_no_runtime_setup_names_the_systems() -> None:
    """On an ARM or RISC-V board `octune setup` never offers Intel's x86-only runtime: it
    names the distribution's PoCL and the GPU vendors' drivers.
    """
    for machine in ("aarch64", "armv7l", "riscv64"):
        assert "apt install pocl-opencl-icd" in system_driver_hint(machine)
        assert "libmali" in system_driver_hint(machine)
    assert "pocl" not in system_driver_hint("x86_64")


def test_an_installed_intel_runtime_is_what_the_loader_reads(cl_device: cl.Device) -> None:
    """Where `octune setup` installed Intel's runtime, the loader lists its device: the folder
    octune registered names the library pip put in this environment.
    """
    library = installed_library(INTEL_CPU)
    registered = Path(os.environ.get("OCL_ICD_VENDORS", "/nowhere")) / "octune-intel-cpu.icd"
    if library is None:
        assert not registered.exists()
        return
    assert registered.read_text().strip() == str(library)
    assert "Intel(R) OpenCL" in {device.platform.name.strip() for device in list_devices()}


@dataclass(frozen=True)
class Named:
    fingerprint: str
    name: str


NAMED = [
    Named("677c4ca1092f9fd5", "pthread-AMD EPYC"),
    Named("19c5ad5b8b2efb30", "AMD EPYC"),
    Named("abcd000000000000", "NVIDIA GeForce RTX 4090 D"),
    Named("abce000000000000", "NVIDIA GeForce RTX 4090"),
]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("AMD EPYC", ["AMD EPYC"]),  # exact beats the substring of "pthread-AMD EPYC"
        ("amd epyc", ["AMD EPYC"]),
        ("NVIDIA GeForce RTX 4090", ["NVIDIA GeForce RTX 4090"]),
        ("19c5ad5b8b2efb30", ["AMD EPYC"]),
        ("677c", ["pthread-AMD EPYC"]),  # a fingerprint prefix beats a name substring
        ("pthread", ["pthread-AMD EPYC"]),
        ("EPYC", ["pthread-AMD EPYC", "AMD EPYC"]),  # ambiguous: the caller lists both
        ("RTX 4090", ["NVIDIA GeForce RTX 4090 D", "NVIDIA GeForce RTX 4090"]),
        ("abc", []),  # too short to be a prefix, in no name
        ("Mali", []),
    ],
)
def test_exact_names_win_over_prefixes_and_substrings(choice: str, expected: list[str]) -> None:
    found = match_devices(choice, NAMED, lambda d: d.fingerprint, lambda d: (d.name,))
    assert [d.name for d in found] == expected
