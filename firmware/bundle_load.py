"""Reading a firmware bundle back, verified before it answers: the manifest within bounds,
every file against its hash and size, the kernel sources against their version hash, the
tables field by field (``table_data``); a SQLite table opened from memory within a bound on
its work. Standard library only, so a device with nothing but Python answers as the service.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from octune.core.problem import kernel_version_sha256
from octune.firmware.bundle import (
    FILE_NAME,
    FORMAT_FILES,
    MANIFEST,
    MANIFEST_LIMIT,
    SCHEMA_VERSION,
    SIGNATURE,
    BundleError,
    octune_version,
)
from octune.firmware.table_data import ENTRY_COLUMNS, source_files, table_from_data
from octune.lookup.data import (
    Answer,
    LookupTable,
    Predictor,
    Query,
    QueryError,
    TableError,
)
from octune.lookup.semantics import KernelIndex, best_answer


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the bundle at ``path``, its schema version checked."""
    manifest_path = path / MANIFEST
    if not path.is_dir():
        raise BundleError(f"{path} is not a bundle directory: pass the --out of `octune export`")
    try:
        manifest = json.loads(_read_bounded(manifest_path, MANIFEST_LIMIT))
    except FileNotFoundError:
        raise BundleError(
            f"{path} is not an octune bundle: it has no {MANIFEST}; export it again"
        ) from None
    except OSError as error:
        raise BundleError(f"cannot read {manifest_path}: {error.strerror or error}") from None
    except (ValueError, RecursionError):
        raise BundleError(
            f"{manifest_path} is not valid JSON (truncated or edited?); export the bundle again"
        ) from None
    schema = manifest.get("octune_bundle") if isinstance(manifest, dict) else None
    if type(schema) is not int:
        raise BundleError(f"{manifest_path} is not an octune bundle manifest")
    if schema > SCHEMA_VERSION:
        reads_with = manifest.get("reads_with")
        needed = reads_with if isinstance(reads_with, str) else "a newer octune"
        raise BundleError(
            f"bundle {path} has schema version {schema}, newer than octune {octune_version()} "
            f"reads (up to {SCHEMA_VERSION}); it is read by {needed}: upgrade octune"
        )
    if (
        manifest.get("format") not in FORMAT_FILES
        or not isinstance(manifest.get("files"), dict)
        or not isinstance(manifest.get("device"), dict)
    ):
        raise BundleError(f"{manifest_path} lacks a known format, the device or the file list")
    return manifest


def _read_bounded(file: Path, limit: int) -> bytes:
    """At most ``limit`` + 1 bytes of a regular file (one more than allowed tells a grown file
    from a whole one); a link to a device or a pipe (``/dev/zero``) is refused before it is
    read, and opened without blocking.
    """
    descriptor = os.open(file, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise BundleError(f"{file} is not a regular file: export the bundle again")
        return handle.read(limit + 1)


def read_verified(path: Path, manifest: Mapping[str, Any], name: str) -> bytes:
    """One bundle file's bytes, refused unless they match the manifest's size and SHA-256."""
    record = manifest["files"].get(name)
    if (
        not isinstance(record, dict)
        or not isinstance(record.get("sha256"), str)
        or type(record.get("bytes")) is not int
    ):
        raise BundleError(f"bundle {path}: the manifest does not list {name}; export it again")
    if not FILE_NAME.fullmatch(name) or ".." in name:
        raise BundleError(f"bundle {path}: the manifest names an unsafe path {name!r}")
    try:
        content = _read_bounded(path / name, record["bytes"])
    except FileNotFoundError:
        raise BundleError(f"bundle {path} is missing {name}; copy the whole directory") from None
    except OSError as error:
        raise BundleError(f"cannot read {path / name}: {error.strerror or error}") from None
    expected = record["bytes"]
    if len(content) < expected:
        raise BundleError(
            f"bundle file {name} is truncated: {len(content)} of {expected} bytes; "
            "copy it again or export again"
        )
    if len(content) > expected:
        raise BundleError(
            f"bundle file {name} has {len(content)} bytes, the manifest says {expected}: it was "
            "modified after export; export again"
        )
    if hashlib.sha256(content).hexdigest() != record["sha256"]:
        raise BundleError(
            f"bundle file {name} does not match its SHA-256 in the manifest: it was modified "
            "or corrupted after export; export again"
        )
    return content


#: The objects a bundle's SQLite file holds (``_write_sqlite``): tables only. A view (or a
#: trigger) runs SQL of the file's author when read: a recursive one held a lookup forever.
SQLITE_TABLES = {"kernels", "configs", "entries"}
#: SQLite virtual-machine steps a bundle may take to read, per byte of the file: reading one
#: as exported takes a few; the bound ends any query that would run away.
SQLITE_STEPS_PER_BYTE, SQLITE_MIN_STEPS, SQLITE_STEP_CHECK = 200, 10**7, 10_000


def _tables_from_sqlite(content: bytes) -> list[dict[str, Any]]:
    connection = sqlite3.connect(":memory:")
    budget = [max(SQLITE_MIN_STEPS, SQLITE_STEPS_PER_BYTE * len(content)) // SQLITE_STEP_CHECK]

    def spent() -> int:  # nonzero: SQLite interrupts the query
        budget[0] -= 1
        return budget[0] < 0

    connection.set_progress_handler(spent, SQLITE_STEP_CHECK)
    try:
        connection.deserialize(content)
        objects = connection.execute(
            "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
        ).fetchall()
        odd = [
            f"{kind} {name}"
            for kind, name in objects
            if kind != "index" and (kind != "table" or name not in SQLITE_TABLES)
        ]
        if odd:
            raise ValueError(f"it holds {', '.join(odd)[:200]}, which octune never writes")
        kernels = connection.execute("SELECT id, spec FROM kernels ORDER BY id").fetchall()
        out = []
        for kernel_id, spec in kernels:
            data = json.loads(spec)
            data["configs"] = [
                json.loads(values)
                for (values,) in connection.execute(
                    "SELECT config_values FROM configs WHERE kernel_id = ? ORDER BY position",
                    (kernel_id,),
                )
            ]
            for kind in ("tuned", "predictions"):
                rows = connection.execute(
                    "SELECT shape, dtype, config, time_s, spread_s, gflops, workload_key "
                    "FROM entries WHERE kernel_id = ? AND kind = ? ORDER BY rowid",
                    (kernel_id, kind),
                )
                data[kind] = {
                    "columns": ENTRY_COLUMNS,
                    "rows": [[json.loads(row[0]), *row[1:]] for row in rows],
                }
            out.append(data)
        return out
    except sqlite3.OperationalError:
        if budget[0] < 0:
            raise ValueError("reading it ran past its bound, as a runaway query does") from None
        raise
    finally:
        connection.close()


@dataclass(frozen=True)
class Bundle:
    """A loaded, verified bundle: its manifest, tables, kernel sources, and lookups."""

    path: Path
    manifest: dict[str, Any]
    tables: dict[str, LookupTable]
    sources: dict[str, tuple[str, str]]  # kernel name -> (template, space)
    indexes: dict[str, KernelIndex]  # the tables lookups answer from
    retired: dict[str, str] = field(default_factory=dict)  # kernel -> why, by ``in_service``

    @property
    def device(self) -> dict[str, Any]:
        return dict(self.manifest["device"])

    def lookup(self, query: Query, predictor: Predictor | None = None) -> Answer:
        """A kernel's answer; for a family's name, its fastest kernel's (``best_answer``)."""
        family = [i for i in self.indexes.values() if i.table.problem.name == query.kernel]
        if family:
            return best_answer(family, query, predictor)
        index = self.indexes.get(query.kernel)
        if query.kernel in self.retired:
            raise QueryError(
                f"bundle {self.path} carries a retired version of {query.kernel} "
                f"({self.retired[query.kernel]}), then export again"
            )
        if index is None:
            raise QueryError(
                f"bundle {self.path} has no kernel '{query.kernel}'; it has "
                f"{', '.join(sorted(self.indexes)) or 'none'}"
            )
        return index.lookup(query, predictor)


def load_bundle(path: str | Path, public_key: str | None = None) -> Bundle:
    """Verify and load a bundle (a c-header bundle: the tables its header was written from,
    kept beside it); with a public key (a PEM file's path, or PEM), only if the key verifies
    its signature.
    """
    path = Path(path)
    manifest = read_manifest(path)
    if public_key is not None:
        from octune.firmware.signing import verify_manifest  # cryptography: only when asked

        verify_manifest(path / MANIFEST, path / SIGNATURE, public_key, path)
    fmt = manifest["format"]
    if fmt == "c-header":  # its tables beside it, as JSON: what the header answers
        if FORMAT_FILES["json"] not in manifest["files"]:
            raise BundleError(
                f"bundle {path} is a C header written before octune kept its tables beside it; "
                "export it again, or export --format json or sqlite to look up from Python"
            )
        fmt = "json"
    content = read_verified(path, manifest, FORMAT_FILES[fmt])
    what = f"bundle file {path / FORMAT_FILES[fmt]}"
    try:
        datas = json.loads(content)["kernels"] if fmt == "json" else _tables_from_sqlite(content)
        tables = [table_from_data(data) for data in datas]
        indexes = {table.kernel: KernelIndex(table) for table in tables}
    except (
        KeyError,
        TypeError,
        ValueError,
        IndexError,
        RecursionError,
        TableError,
        sqlite3.Error,
    ) as error:
        detail = f"missing field {error}" if isinstance(error, KeyError) else str(error)
        raise BundleError(f"{what} is malformed ({detail}); export the bundle again") from None
    sources = {}
    for table in tables:
        template_name, space_name = source_files(table)
        try:
            template = read_verified(path, manifest, template_name).decode()
            space = read_verified(path, manifest, space_name).decode()
        except UnicodeDecodeError:
            raise BundleError(f"bundle {path}: kernel sources are not UTF-8 text") from None
        if kernel_version_sha256(template, space) != table.sha256:
            raise BundleError(
                f"bundle {path}: the {table.kernel} sources do not hash to the kernel version "
                f"{table.sha256[:16]} the table was tuned with; export again"
            )
        if table.device_fingerprint != manifest["device"].get("fingerprint"):
            raise BundleError(f"bundle {path}: {table.kernel} was tuned on another device")
        sources[table.kernel] = (template, space)
    return Bundle(path, manifest, {t.kernel: t for t in tables}, sources, indexes)


def in_service(bundle: Bundle) -> Bundle:
    """The bundle without the tables of kernel versions that the installed kernels retire
    (exported before they were found wrong), so its other kernels answer. Kept apart from
    ``load_bundle``, which needs only the standard library: this reads the installed kernels.
    """
    from octune.catalogue.registry import retired_versions

    retired = {
        t.kernel: why
        for t in bundle.tables.values()
        if (why := retired_versions(t.kernel).get(t.sha256)) is not None
    }
    kept = {name: index for name, index in bundle.indexes.items() if name not in retired}
    return replace(bundle, indexes=kept, retired=retired)
