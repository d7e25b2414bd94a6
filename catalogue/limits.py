"""The device limits a search space may name, and how a device's figures become them: here,
not in ``tuner.device``, so that loading a space, a lookup table or a bundle needs no OpenCL
driver, and so that a live device and a stored one give the same values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

#: The device limits a space may name: the keys of ``device_limits``.
LIMIT_NAMES: tuple[str, ...] = (
    "max_work_group_size",
    "max_work_item_size_0",
    "max_work_item_size_1",
    "max_work_item_size_2",
    "local_mem_size",
    "compute_units",
    "max_buffer_bytes",
    "async_copy",
    "fp16",
)

#: Device limits that say whether the device reports an OpenCL extension (1) or not (0): a
#: space constrains its variants with them (``HALF <= fp16``), and the tuner names the missing
#: extension in one line where a variant is left out (``missing_extensions``).
EXTENSION_LIMITS: dict[str, str] = {"fp16": "cl_khr_fp16"}


def device_limits(
    *,
    max_work_group_size: int,
    max_work_item_sizes: Sequence[int],
    local_mem_size: int,
    compute_units: int,
    global_mem_size: int,
    platform_name: str,
    extensions: str = "",
) -> dict[str, int]:
    """The values of LIMIT_NAMES for a device, from what its driver reports (a live device) or
    what the database keeps of it (the same figures, so both agree on which configs are legal).
    """
    sizes = (*max_work_item_sizes, 1, 1, 1)[:3]
    return {
        "max_work_group_size": max_work_group_size,
        "max_work_item_size_0": sizes[0],
        "max_work_item_size_1": sizes[1],
        "max_work_item_size_2": sizes[2],
        "local_mem_size": local_mem_size,
        "compute_units": compute_units,
        "max_buffer_bytes": max_buffer_bytes(global_mem_size),
        "async_copy": async_copy(platform_name),
        **extension_limits(extensions),
    }


def max_buffer_bytes(global_mem_size: int) -> int:
    """The largest buffer every OpenCL 1.2 device with this much memory lets one allocate
    (CL_DEVICE_MAX_MEM_ALLOC_SIZE is at least a quarter of it, and at least 128 MiB). Stored
    devices keep their memory size, not that cap, so the tuner, lookups, bundles and the C
    header all bound a workspace by this one figure and agree on which configs can run.
    """
    return max(global_mem_size // 4, 128 << 20)


def async_copy(platform_name: str) -> int:
    """1 where kernels may copy global to local memory asynchronously (cp.async): under NVIDIA's
    OpenCL. Its devices before compute capability 8.0 fail to build such configs, which the
    tuner records as build errors like any other.
    """
    return int(platform_name.startswith("NVIDIA"))


def extension_limits(extensions: str) -> dict[str, int]:
    """``EXTENSION_LIMITS``' values for a device's extension string (CL_DEVICE_EXTENSIONS, as
    the database keeps it: a device stored before octune kept it reports none).
    """
    reported = set(extensions.split())
    return {name: int(extension in reported) for name, extension in EXTENSION_LIMITS.items()}


def missing_extensions(names: Iterable[str], limits: Mapping[str, int]) -> list[str]:
    """The extensions, of those a space's expressions ``names``, that the device lacks."""
    return [
        extension
        for name, extension in EXTENSION_LIMITS.items()
        if name in names and not limits.get(name, 0)
    ]
