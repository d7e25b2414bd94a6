"""OpenCL device discovery, selection by index or name, and the fingerprint of a device.

A fingerprint covers the platform, the vendor, the device name, the driver version and the
compute units: a driver update is a new fingerprint, because tuned results may not carry over.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

import pyopencl as cl

from octune.tuner.errors import DeviceError

INSTALL_HINT = "install an OpenCL driver, e.g. `pip install pocl-binary-distribution` for the CPU"


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
        sizes = (*self.max_work_item_sizes, 1, 1, 1)[:3]
        return {
            "max_work_group_size": self.max_work_group_size,
            "max_work_item_size_0": sizes[0],
            "max_work_item_size_1": sizes[1],
            "max_work_item_size_2": sizes[2],
            "local_mem_size": self.local_mem_size,
            "compute_units": self.compute_units,
        }

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
        )


def _type_name(device_type: int) -> str:
    for flag in ("GPU", "CPU", "ACCELERATOR"):
        if device_type & getattr(cl.device_type, flag):
            return flag.lower()
    return "other"


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
    """Pick a device by index (as `octune devices` numbers them) or by a name substring.

    Without a choice, prefer the first GPU: that is what a user tuning a machine means.
    """
    devices = list_devices()
    if choice is None or choice == "":
        gpus = [d for d in devices if d.type & cl.device_type.GPU]
        return (gpus or devices)[0]
    if choice.isdigit():
        index = int(choice)
        if index >= len(devices):
            raise DeviceError(
                f"no OpenCL device with index {index}: there are {len(devices)} "
                "(see `octune devices`)"
            )
        return devices[index]
    needle = choice.lower()
    matches = [d for d in devices if needle in f"{d.platform.name} {d.name}".lower()]
    if not matches:
        names = ", ".join(f"{i}: {d.name.strip()}" for i, d in enumerate(devices))
        raise DeviceError(
            f"no OpenCL device matches '{choice}' (have {names}); "
            f"pass an index or a name substring, or {INSTALL_HINT}"
        )
    if len(matches) > 1:
        names = ", ".join(f"{devices.index(d)}: {d.name.strip()}" for d in matches)
        raise DeviceError(f"'{choice}' matches several devices ({names}); pass an index instead")
    return matches[0]
