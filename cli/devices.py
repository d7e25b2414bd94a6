"""`octune devices` and `octune setup`: which OpenCL devices this machine has, whether each can
compile, and a CPU runtime that can where none does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from octune.cli.options import JsonOption
from octune.core.console import console
from octune.core.errors import DeviceError

if TYPE_CHECKING:
    import pyopencl as cl

    from octune.tuner.device import CompileCheck


RecheckOption = Annotated[
    bool, typer.Option("--recheck", help="build the trivial kernel again, ignoring the cache")
]


def devices(
    as_json: JsonOption = False,
    recheck: RecheckOption = False,
) -> None:
    """List every OpenCL device with its index, fingerprint, limits and whether it compiles."""
    from octune.tuner.device import compile_check, list_devices

    checked = [(device, compile_check(device, recheck=recheck)) for device in list_devices()]
    if as_json:
        print(json.dumps(_rows(checked), indent=2))
        return
    _print_table(checked)


def _rows(checked: list[tuple[cl.Device, CompileCheck]]) -> list[dict[str, object]]:
    from octune.tuner.device import DeviceInfo

    return [
        {"index": i, **DeviceInfo.from_cl(device).to_dict(), "compiles": check.ok,
         "compile_error": check.reason}
        for i, (device, check) in enumerate(checked)
    ]  # fmt: skip


#: The GEMM `setup` runs on each CPU runtime: octune's CPU kernel with one config that suits
#: any x86-64 vector width (6 x 16 floats of C per work-item: BLIS's AVX2 block).
REFERENCE_KERNEL = "gemm_panel"
REFERENCE_CONFIG = {"MR": 6, "VW": 8, "NV": 2, "KU": 4, "LN": 1, "LM": 8}
REFERENCE_SIZE = 512
#: How much faster another CPU runtime must run the reference for `setup` to recommend it.
RECOMMEND_RATIO = 1.5


def reference_gflops(device: cl.Device) -> float | None:
    """GFLOP/s of the reference GEMM on ``device``, verified as every measurement is; None
    where it fails.
    """
    from octune.catalogue.registry import load_kernel
    from octune.kernels.gemm import gemm_workload
    from octune.tuner.measure import DeviceRunner

    workload = gemm_workload(REFERENCE_SIZE, REFERENCE_SIZE, REFERENCE_SIZE)
    runner = DeviceRunner(device, load_kernel(REFERENCE_KERNEL), workload, seed=0)
    measurement = runner.measure(REFERENCE_CONFIG)
    return measurement.gflops if measurement.ok else None


def _compare_cpu_runtimes(
    cpus: list[cl.Device], devices: list[cl.Device], chosen: cl.Device
) -> tuple[dict[int, float | None], int | None]:
    """Each CPU runtime's speed on the reference GEMM (by device index), and the faster one
    where it is much faster than the one `octune tune` picks (a recommendation: nothing is
    installed or changed).
    """
    from octune.tuner.device import describe

    rates = {devices.index(d): reference_gflops(d) for d in cpus}
    size = REFERENCE_SIZE
    for index, rate in rates.items():
        speed = f"{rate:,.1f} GFLOP/s" if rate else "failed"
        console.print(f"{index}: {describe(devices[index])}: GEMM {size}³ at {speed}")
    chosen_rate = rates.get(devices.index(chosen))
    fastest = max(rates, key=lambda i: rates[i] or 0.0)
    best = rates[fastest]
    if chosen_rate is not None and best and best >= RECOMMEND_RATIO * chosen_rate:
        console.print(
            f"Device {fastest} runs it {best / chosen_rate:.1f} x faster than the default "
            f"device: tune and run it with `--device {fastest}`."
        )
        return rates, fastest
    return rates, None


#: Below this many columns `devices` prints a block of lines per device instead of a table.
TABLE_COLUMNS = 120


def _print_table(checked: list[tuple[cl.Device, CompileCheck]]) -> None:
    from octune.tuner.device import DeviceInfo, describe

    infos = [DeviceInfo.from_cl(device) for device, _ in checked]
    if console.width < TABLE_COLUMNS:  # a narrow terminal: nothing cut, nothing wrapped apart
        for index, (info, (_, check)) in enumerate(zip(infos, checked, strict=True)):
            compiles = "compiles" if check.ok else "[red]does not compile[/]"
            console.print(f"[bold]{index}[/]  {info.name} ({info.device_type}), {compiles}")
            console.print(f"   {info.platform_name}, driver {info.driver_version}", highlight=False)
            console.print(
                f"   {info.compute_units} CUs, work-groups up to {info.max_work_group_size}, "
                f"{info.local_mem_size // 1024} KiB local memory",
                highlight=False,
            )
            console.print(f"   fingerprint {info.fingerprint}", highlight=False)
    else:
        table = Table(title="OpenCL devices")
        for column in ("#", "device", "platform", "driver", "CUs", "max WG", "local mem"):
            table.add_column(column)
        table.add_column("fingerprint", no_wrap=True)  # what --device and exports take: never cut
        table.add_column("compiles", no_wrap=True)
        for index, (info, (_, check)) in enumerate(zip(infos, checked, strict=True)):
            table.add_row(
                str(index),
                f"{info.name} ({info.device_type})",
                info.platform_name,
                info.driver_version,
                str(info.compute_units),
                str(info.max_work_group_size),
                f"{info.local_mem_size // 1024} KiB",
                info.fingerprint,
                "yes" if check.ok else "[red]no[/]",
            )
        console.print(table)
    for index, (device, check) in enumerate(checked):
        if not check.ok:
            console.print(f"{index}: {describe(device)} cannot compile: {check.reason}")


def setup(
    install: Annotated[
        bool,
        typer.Option(help="install a CPU runtime from PyPI when no device here compiles"),
    ] = True,
    as_json: JsonOption = False,
) -> None:
    """Make sure some OpenCL device here compiles: check each, and only where none does,
    install Intel's CPU runtime from PyPI (about 800 MB) into this environment.
    """
    import pyopencl as cl

    from octune.tuner.device import (
        compile_check,
        describe,
        list_devices,
        none_compiles,
        select_device,
    )
    from octune.tuner.opencl_runtimes import (
        PIP_RUNTIMES,
        extra_requirements,
        installed_library,
        system_driver_hint,
    )

    if as_json:
        console.quiet = True  # stdout is the JSON alone; pip's output goes to stderr
    try:
        checked = [(device, compile_check(device, recheck=True)) for device in list_devices()]
    except DeviceError:
        checked = []  # no platform at all: a runtime from PyPI is the fix as well
    if checked:
        _print_table(checked)
    if any(check.ok for _, check in checked):
        chosen = select_device()
        cpus = [d for d, check in checked if check.ok and d.type & cl.device_type.CPU]
        devices = [d for d, _ in checked]
        rates, recommended = {}, None
        if len(cpus) > 1 or chosen in cpus:
            rates, recommended = _compare_cpu_runtimes(cpus, devices, chosen)
        console.print(f"Ready: `octune tune` will use {describe(chosen)}.")
        if as_json:
            ready = {"devices": _rows(checked), "chosen": devices.index(chosen),
                     "reference_gflops": rates, "recommended": recommended}  # fmt: skip
            print(json.dumps(ready, indent=2))
        return
    # Runtimes not installed yet that PyPI has for this machine (Intel's: x86-64 Linux only).
    missing = [
        runtime
        for runtime in PIP_RUNTIMES
        if installed_library(runtime) is None and extra_requirements(runtime.extra)
    ]
    if not install or not missing:
        raise none_compiles(
            checked,
            f"install {missing[0].label} with `pip install 'octune[{missing[0].extra}]'`"
            if missing
            else system_driver_hint(),
        )
    for runtime in missing:
        requirements = extra_requirements(runtime.extra)
        console.print(
            f"No device here compiles: installing {runtime.label} ({', '.join(requirements)})"
        )
        pip = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", *requirements],
            stdout=sys.stderr if as_json else None,
        )
        if pip.returncode != 0:
            raise DeviceError(
                f"pip could not install {runtime.label}: install it with "
                f"`pip install 'octune[{runtime.extra}]'` and run `octune setup` again"
            )
    # The ICD loader has read its vendors in this process already: check in a fresh one.
    again = subprocess.run(
        [sys.executable, "-m", "octune", "setup", "--no-install", *(["--json"] if as_json else [])]
    )
    raise typer.Exit(again.returncode)
