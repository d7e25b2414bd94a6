"""OpenCL device discovery, the check that a device can compile, selection by index or name,
and the fingerprint of a device.

A fingerprint covers the platform, the vendor, the device name, the driver version and the
compute units: a driver update is a new fingerprint, because tuned results may not carry over.
A device can be listed yet unable to build anything (PoCL 3.0 on CPUs newer than its LLVM), so
the default choice is the first device whose compiler works, checked once per fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import platformdirs
import pyopencl as cl

from octune.catalogue.limits import device_limits
from octune.core.errors import DeviceError
from octune.core.results import one_line_reason
from octune.tuner.device_names import match_devices
from octune.tuner.opencl_runtimes import register_pip_runtimes
from octune.tuner.programs import default_cache_root

# Before any platform query in this process: the loader reads its vendors once.
register_pip_runtimes(Path(platformdirs.user_cache_dir("octune")) / "icd-vendors")

INSTALL_HINT = (
    "run `octune setup` (it adds a CPU runtime that compiles here), or install your vendor's "
    "OpenCL driver (docs/runtimes.md)"
)
PROBE_SOURCE = """
__kernel void octune_probe(__global float* x) {
    const size_t i = get_global_id(0);
    x[i] = 2.0f * x[i] + 1.0f;
}
"""
PROBE_FILE = "compile-check.json"


@dataclass(frozen=True)
class DeviceInfo:
    platform_name: str
    platform_version: str
    vendor: str
    name: str
    driver_version: str
    compute_units: int
    max_work_group_size: int
    max_work_item_sizes: tuple[int, ...]
    local_mem_size: int
    global_mem_size: int
    device_type: str
    # CL_DEVICE_EXTENSIONS, space-separated: what the ``EXTENSION_LIMITS`` read (cl_khr_fp16).
    # Not part of the fingerprint: the extensions come with the driver, which it names.
    extensions: str = ""

    @property
    def fingerprint(self) -> str:
        identity = {
            "platform": f"{self.platform_name} {self.platform_version}",
            "vendor": self.vendor,
            "device": self.name,
            "driver": self.driver_version,
            "compute_units": self.compute_units,
        }
        text = json.dumps(identity, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def limits(self) -> dict[str, int]:
        """The names a search space's constraints may use to talk about this device."""
        return device_limits(
            max_work_group_size=self.max_work_group_size,
            max_work_item_sizes=self.max_work_item_sizes,
            local_mem_size=self.local_mem_size,
            compute_units=self.compute_units,
            global_mem_size=self.global_mem_size,
            platform_name=self.platform_name,
            extensions=self.extensions,
        )

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "fingerprint": self.fingerprint}

    @classmethod
    def from_cl(cls, device: cl.Device) -> DeviceInfo:
        platform = device.platform
        return cls(
            platform_name=platform.name.strip(),
            platform_version=platform.version.strip(),
            vendor=device.vendor.strip(),
            name=device.name.strip(),
            driver_version=device.driver_version.strip(),
            compute_units=int(device.max_compute_units),
            max_work_group_size=int(device.max_work_group_size),
            max_work_item_sizes=tuple(int(s) for s in device.max_work_item_sizes),
            local_mem_size=int(device.local_mem_size),
            global_mem_size=int(device.global_mem_size),
            device_type=_type_name(device.type),
            extensions=" ".join(sorted(device.extensions.split())),
        )


def _type_name(device_type: int) -> str:
    for flag in ("GPU", "CPU", "ACCELERATOR"):
        if device_type & getattr(cl.device_type, flag):
            return flag.lower()
    return "other"


@dataclass(frozen=True)
class CompileCheck:
    """Whether a trivial kernel builds and computes right on a device, and if not, why."""

    ok: bool
    reason: str | None = None


def compile_check(device: cl.Device, *, recheck: bool = False) -> CompileCheck:
    """The check's result, cached beside the device's program binaries (per fingerprint, so
    a driver update checks again).
    """
    path = default_cache_root() / DeviceInfo.from_cl(device).fingerprint / PROBE_FILE
    if not recheck:
        try:
            return CompileCheck(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            pass
    check = _probe(device)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(check)))
    except OSError:
        pass  # an unwritable cache costs a probe per run, not a wrong answer
    return check


def _probe(device: cl.Device) -> CompileCheck:
    values = np.arange(64, dtype=np.float32)
    result = np.empty_like(values)
    try:
        context = cl.Context([device])
        queue = cl.CommandQueue(context)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cl.CompilerWarning)  # a build log is no failure
            program = cl.Program(context, PROBE_SOURCE).build()
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
        buffer = cl.Buffer(context, flags, hostbuf=values)
        program.octune_probe(queue, values.shape, None, buffer)
        cl.enqueue_copy(queue, result, buffer)
    except cl.Error as error:
        return CompileCheck(False, one_line_reason(str(error)))
    if not np.array_equal(result, 2 * values + 1):
        return CompileCheck(False, "a trivial kernel built but computed wrong values")
    return CompileCheck(True)


def describe(device: cl.Device) -> str:
    return f"{device.name.strip()} ({device.platform.name.strip()})"


def require_compiling(device: cl.Device) -> None:
    check = compile_check(device)
    if not check.ok:
        raise DeviceError(
            f"{describe(device)} cannot compile a kernel: {check.reason}: {INSTALL_HINT}"
        )


def list_devices() -> list[cl.Device]:
    """Every device of every platform, in a stable order: the order that indices refer to."""
    try:
        platforms = cl.get_platforms()
    except cl.Error:  # the ICD loader reports "no platforms" as an error
        platforms = []
    devices = [device for platform in platforms for device in platform.get_devices()]
    if not devices:
        raise DeviceError(f"no OpenCL device found: {INSTALL_HINT}")
    return devices


def select_device(choice: str | None = None) -> cl.Device:
    """Pick a device by index (as `octune devices` numbers them), fingerprint or name
    (`match_devices`).

    Without a choice, the first GPU that compiles, else the first device that compiles: a GPU
    is what a user tuning a machine means, and a device that cannot build is no choice at all.
    """
    devices = list_devices()
    if choice is None or choice == "":
        return _default_device(devices)
    if choice.isdigit():
        index = int(choice)
        if index >= len(devices):
            raise DeviceError(
                f"no OpenCL device with index {index}: there are {len(devices)} "
                "(see `octune devices`)"
            )
        return devices[index]
    matches = match_devices(
        choice,
        devices,
        fingerprint=lambda d: DeviceInfo.from_cl(d).fingerprint,
        names=lambda d: (d.name.strip(), f"{d.platform.name.strip()} {d.name.strip()}"),
    )
    if not matches:
        names = ", ".join(f"{i}: {describe(d)}" for i, d in enumerate(devices))
        raise DeviceError(
            f"no OpenCL device matches '{choice}' (have {names}); "
            f"pass an index, a fingerprint or a name, or {INSTALL_HINT}"
        )
    if len(matches) > 1:
        names = ", ".join(f"{devices.index(d)}: {describe(d)}" for d in matches)
        raise DeviceError(f"'{choice}' matches several devices ({names}); pass an index instead")
    return matches[0]


def compiling_devices() -> tuple[list[cl.Device], list[tuple[cl.Device, CompileCheck]]]:
    """Every device that compiles, in ``list_devices`` order, and those that cannot with why;
    a DeviceError naming each reason where none compiles (PoCL 3.0 alone on a Zen 5).
    """
    devices, left_out = [], []
    for device in list_devices():
        check = compile_check(device)
        if check.ok:
            devices.append(device)
        else:
            left_out.append((device, check))
    if not devices:
        raise none_compiles(left_out, INSTALL_HINT)
    return devices, left_out


def _default_device(devices: list[cl.Device]) -> cl.Device:
    checked = []
    for device in sorted(devices, key=lambda d: not d.type & cl.device_type.GPU):
        check = compile_check(device)
        if check.ok:
            return device
        checked.append((device, check))
    raise none_compiles(checked, INSTALL_HINT)


def none_compiles(checked: list[tuple[cl.Device, CompileCheck]], fix: str) -> DeviceError:
    """The one line for a machine where no device compiles: each device's reason, and `fix`."""
    why = "; ".join(f"{describe(device)}: {check.reason}" for device, check in checked)
    return DeviceError(
        f"no OpenCL device here can compile a kernel ({why or 'no device found'}): {fix}"
    )
