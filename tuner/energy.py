"""Energy sensors: NVML on NVIDIA GPUs, RAPL on x86 CPUs, where the system lets us read them.

Both expose a cumulative energy counter; a measurement reads it before and after a burst of
back-to-back runs and divides by the number of runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import pyopencl as cl

RAPL_ROOT = Path("/sys/class/powercap")


class EnergySensor(Protocol):
    name: str

    def joules(self) -> float:
        """A cumulative counter: only differences between two reads mean anything."""
        ...


class NvmlSensor:
    name = "nvml"

    def __init__(self, handle: object) -> None:
        import pynvml

        self._nvml = pynvml
        self._handle = handle

    def joules(self) -> float:
        return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) / 1e3  # mJ


class RaplSensor:
    """Package energy of an Intel CPU; the counter wraps at max_energy_range_uj."""

    name = "rapl"

    def __init__(self, zone: Path) -> None:
        self._counter = zone / "energy_uj"
        self._range = int((zone / "max_energy_range_uj").read_text())
        self._last = self._raw()
        self._wraps = 0

    def _raw(self) -> int:
        return int(self._counter.read_text())

    def joules(self) -> float:
        raw = self._raw()
        if raw < self._last:
            self._wraps += 1
        self._last = raw
        return (raw + self._wraps * self._range) / 1e6


def _nvml_sensor(device: cl.Device) -> NvmlSensor | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            bus = int(device.pci_bus_id_nv)
            slot = int(device.pci_slot_id_nv)
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(f"00000000:{bus:02X}:{slot >> 3:02X}.0")
        except Exception:  # no cl_nv_device_attribute_query, or a bus id NVML does not know
            if pynvml.nvmlDeviceGetCount() != 1:
                return None  # cannot tell which GPU this OpenCL device is
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        sensor = NvmlSensor(handle)
        sensor.joules()
        return sensor
    except Exception:  # no library, no driver, no permission, no energy counter: no sensor
        return None


def _rapl_sensor() -> RaplSensor | None:
    for zone in sorted(RAPL_ROOT.glob("intel-rapl:[0-9]")):
        try:
            return RaplSensor(zone)
        except (OSError, ValueError):
            continue
    return None


def sensor_for(device: cl.Device) -> EnergySensor | None:
    """The energy sensor that covers this device, or None where none can be read."""
    if device.type & cl.device_type.GPU and "nvidia" in device.vendor.lower():
        return _nvml_sensor(device)
    if device.type & cl.device_type.CPU:
        return _rapl_sensor()  # Linux exposes AMD's package energy as intel-rapl zones too
    return None
