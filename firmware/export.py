"""Bundles to and from the database: ``octune export`` writes one device's lookup tables,
``octune import`` merges a bundle into a database (a team server's, say) idempotently.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from octune.core.errors import OctuneError, SpaceError
from octune.core.results import Measurement, Status, config_key
from octune.db.store import Store
from octune.firmware.bundle import BundleError, write_bundle
from octune.firmware.bundle_load import Bundle, load_bundle
from octune.lookup.data import LookupTable
from octune.lookup.tables import TableModel, build_table, resolve_device, stored_device_limits

if TYPE_CHECKING:  # importing it loads pyopencl, which export does not need
    from octune.tuner.device import DeviceInfo

IMPORT_STRATEGY = "import"


def export_bundle(
    store: Store,
    device_choice: str,
    kernels: Sequence[str] | None,
    fmt: str,
    out: Path,
    model: TableModel | None = None,
    dtypes: Sequence[str] | None = None,
    prefix: str = "octune",
) -> tuple[dict[str, Any], list[LookupTable]]:
    """Write the bundle of one stored device; every tuned kernel unless ``kernels`` names some,
    of the ``dtypes`` given (default: all); a C header's names start with ``prefix``.
    Each kernel is exported at the version last tuned on the device that is not retired, as
    lookups answer, with ``model``'s answers for far shapes (the server's ``ModelAnswers``, so
    both agree).
    """
    from octune.catalogue.registry import retired_versions

    device = resolve_device(store, device_choice)
    tuned = store.tuned_kernel_names(device.fingerprint)
    names = list(kernels) if kernels else tuned
    if not names:
        raise OctuneError(
            f"nothing is tuned on {device.name} ({device.fingerprint}) in {store.url}: "
            "run `octune tune` on that device first"
        )
    tables, sources = [], {}
    for name in names:
        retired = retired_versions(name)
        stored = store.lookup_kernel(device.fingerprint, name, skip=retired)
        if stored is None:
            latest = store.lookup_kernel(device.fingerprint, name)
            if latest is None:
                raise OctuneError(
                    f"kernel '{name}' is not tuned on {device.name} in {store.url}; tuned there: "
                    f"{', '.join(tuned) or 'nothing'} (pass them with --kernels a,b)"
                )
            others = ",".join(n for n in tuned if n != name)
            raise OctuneError(
                f"kernel '{name}' is tuned on {device.name} in {store.url} only in retired "
                f"versions ({retired[latest.sha256]})"
                + (f"; or leave it out with --kernels {others}" if others else "")
            )
        table = build_table(store, device, name, stored.sha256, model=model)
        if dtypes is None or table.dtype in dtypes:
            tables.append(table)
            sources[stored.sha256] = (stored.template_source, stored.space_source)
    if not tables:
        raise OctuneError(
            f"no kernel of dtype {', '.join(dtypes or ())} is tuned on {device.name} in "
            f"{store.url}: tune one with `octune tune ... --dtype`, or leave out --dtype"
        )
    record = {**asdict(device), "limits": stored_device_limits(device)}
    return write_bundle(out, fmt, record, tables, sources, prefix), tables


@dataclass(frozen=True)
class ImportReport:
    device_fingerprint: str
    imported: int  # measurements written
    skipped: int  # entries whose config was already stored for that workload


def import_bundle(store: Store, path: Path, public_key: str | None = None) -> ImportReport:
    """Merge a verified bundle's tuned entries into ``store``: one session per workload, one
    passing measurement per entry. An entry whose config is already stored for the device,
    kernel version and workload is skipped, so importing twice stores once. With a public key,
    only a bundle it signed is read; every config must be one its kernel version's space
    allows on the device, or nothing is stored.
    """
    from octune.catalogue.registry import families

    bundle = load_bundle(path, public_key)
    _check_configs(bundle)
    info = _device_info(bundle)
    device_id = store.device_id(info)
    imported = skipped = 0
    made = f"{bundle.manifest['created_at']} by octune {bundle.manifest['octune_version']}"
    for table in bundle.tables.values():
        template, space = bundle.sources[table.kernel]
        kernel_id = store.kernel_version_id(table.kernel, table.sha256, template, space)
        family = families().get(table.problem.name)
        if family is None:
            raise BundleError(
                f"bundle {path}: this octune does not know the family {table.problem.name}: "
                "add its kernel folder with --kernel-dir"
            )
        for entry in table.tuned:
            shape = dict(zip(table.problem.keys, entry.shape, strict=True))
            workload = family.workload(shape, entry.dtype)
            workload_id = store.workload_id(
                workload.problem, workload.key, workload.shape, workload.dtype
            )
            config = table.entry_config(entry.config)
            if config_key(config) in store.measured_config_keys(device_id, kernel_id, workload_id):
                skipped += 1
                continue
            # One session per device, kernel version and workload holds every import into it,
            # so importers racing on the same bundle find the same session and config.
            identity = f"{info.fingerprint}|{table.sha256}|{workload.key}".encode()
            origin = f"{IMPORT_STRATEGY}:{hashlib.sha256(identity).hexdigest()[:40]}"
            session = store.origin_session(
                origin, device_id, kernel_id, workload_id, IMPORT_STRATEGY, {}
            )
            stored = store.add_measurement(
                session,
                Measurement(
                    config=config,
                    status=Status.OK,
                    times_s=(entry.time_s,),
                    flops=workload.flops,
                    message=f"imported from a bundle of {entry.workload_key} made {made}",
                    extra={"bundle_spread_s": entry.spread_s},
                ),
            )
            imported += stored
            skipped += not stored
    return ImportReport(info.fingerprint, imported, skipped)


def _check_configs(bundle: Bundle) -> None:
    """Checksums can be recomputed by whoever edits a table: refuse configs the kernel
    version's own space would never have proposed on the bundle's device.
    """
    from octune.catalogue.registry import kernel_from_texts

    limits = bundle.device.get("limits", {})
    for table in bundle.tables.values():
        space = kernel_from_texts(table.kernel, *bundle.sources[table.kernel]).space
        for entry in table.tuned:
            try:
                space.check(table.entry_config(entry.config), limits)
            except SpaceError as error:
                raise BundleError(
                    f"bundle {bundle.path}: the config of {table.kernel} {entry.workload_key} is "
                    f"not one its space allows on the device ({error}); the bundle was edited: "
                    "nothing was imported"
                ) from None


def _device_info(bundle: Bundle) -> DeviceInfo:
    """The bundle's device as a DeviceInfo; its fingerprint must be the one recorded."""
    from octune.tuner.device import DeviceInfo

    device = bundle.device
    try:
        limits = device["limits"]
        info = DeviceInfo(
            platform_name=str(device["platform_name"]),
            platform_version=str(device["platform_version"]),
            vendor=str(device["vendor"]),
            name=str(device["name"]),
            driver_version=str(device["driver_version"]),
            compute_units=int(device["compute_units"]),
            max_work_group_size=int(device["max_work_group_size"]),
            max_work_item_sizes=tuple(int(limits[f"max_work_item_size_{i}"]) for i in range(3)),
            local_mem_size=int(device["local_mem_size"]),
            global_mem_size=int(device["global_mem_size"]),
            device_type=str(device["device_type"]),
            extensions=str(device.get("extensions", "")),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise BundleError(f"bundle {bundle.path}: the manifest's device lacks {error}") from None
    if info.fingerprint != device.get("fingerprint"):
        raise BundleError(
            f"bundle {bundle.path}: the manifest's device does not match its fingerprint "
            f"{device.get('fingerprint')}: the manifest was edited; export again"
        )
    return info
