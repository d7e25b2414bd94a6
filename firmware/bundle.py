"""Firmware bundles: one device's lookup tables in a directory, written by ``octune export`` and
read (``bundle_load``) with the standard library only, so a device with nothing but Python
answers lookups exactly as the config service does (both go through ``octune.lookup.semantics``).

A bundle directory holds::

    manifest.json          schema version, octune version, device, creation time,
                           SHA-256 and size of every other file
    lookup.json            the tables (format json), or
    lookup.sqlite          the same tables as SQLite (format sqlite), or
    octune_lookup.h        a self-contained C99 header (format c-header, for C runtimes),
                           beside the tables it was written from as lookup.json
    kernels/NAME-HASH.cl   each kernel version's template source ...
    kernels/NAME-HASH.yaml ... and search space, whose hash names the version

This module is the layout and its writing (``write_bundle``); the tables as plain data are
``table_data``, and reading a bundle back, verified before it answers, ``bundle_load``:
the three stages of a bundle, each small enough to read whole.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from octune.core.errors import OctuneError
from octune.core.problem import kernel_version_sha256
from octune.firmware import cheader
from octune.firmware.table_data import source_files, table_to_data
from octune.lookup.data import (
    LookupTable,
)

#: Bumped when a reader of the previous version could misread a new bundle.
SCHEMA_VERSION = 1
#: The first octune release that reads each schema version.
READS_WITH = {1: "0.1.0"}
MANIFEST = "manifest.json"
#: A manifest lists a few files with their sizes and hashes: past this it is not one.
MANIFEST_LIMIT = 1 << 20
SIGNATURE = "manifest.sig"  # optional: octune.firmware.signing
FORMAT_FILES = {"json": "lookup.json", "sqlite": "lookup.sqlite", "c-header": "octune_lookup.h"}
FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(/[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?")
_SQLITE_SCHEMA = """
CREATE TABLE kernels (id INTEGER PRIMARY KEY, name TEXT NOT NULL, sha256 TEXT NOT NULL,
                      spec TEXT NOT NULL);
CREATE TABLE configs (kernel_id INTEGER NOT NULL REFERENCES kernels(id), position INTEGER NOT NULL,
                      config_values TEXT NOT NULL, PRIMARY KEY (kernel_id, position));
CREATE TABLE entries (kernel_id INTEGER NOT NULL REFERENCES kernels(id),
                      kind TEXT NOT NULL CHECK (kind IN ('tuned', 'predictions')),
                      shape TEXT NOT NULL, dtype TEXT NOT NULL, config INTEGER NOT NULL,
                      time_s REAL NOT NULL, spread_s REAL NOT NULL, gflops REAL NOT NULL,
                      workload_key TEXT NOT NULL);
"""


class BundleError(OctuneError):
    """A bundle that cannot be written or must not be trusted; the message names the file."""


def octune_version() -> str:
    try:
        return version("octune")
    except PackageNotFoundError:
        return "unknown"


def _json_bytes(data: object, indent: int | None = None) -> bytes:
    separators = (",", ":") if indent is None else (",", ": ")
    return (json.dumps(data, indent=indent, separators=separators) + "\n").encode()


def _sqlite_bytes(tables: Sequence[LookupTable]) -> bytes:
    connection = sqlite3.connect(":memory:")
    try:
        connection.executescript(_SQLITE_SCHEMA)
        for kernel_id, table in enumerate(tables, start=1):
            data = table_to_data(table)
            configs, tuned, predictions = (data.pop(k) for k in ("configs", "tuned", "predictions"))
            connection.execute(
                "INSERT INTO kernels VALUES (?, ?, ?, ?)",
                (kernel_id, table.kernel, table.sha256, json.dumps(data)),
            )
            connection.executemany(
                "INSERT INTO configs VALUES (?, ?, ?)",
                [(kernel_id, i, json.dumps(c)) for i, c in enumerate(configs)],
            )
            for kind, block in (("tuned", tuned), ("predictions", predictions)):
                connection.executemany(
                    "INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(kernel_id, kind, json.dumps(row[0]), *row[1:]) for row in block["rows"]],
                )
        connection.commit()
        return connection.serialize()
    finally:
        connection.close()


def write_bundle(
    out: Path,
    fmt: str,
    device: Mapping[str, Any],
    tables: Sequence[LookupTable],
    sources: Mapping[str, tuple[str, str]],
    prefix: str = "octune",
) -> dict[str, Any]:
    """Write a bundle into ``out`` (created if needed) and return its manifest.

    ``sources`` maps each kernel sha256 to its (template, space) texts; ``prefix`` starts
    the C header's names (``cheader.prefixed``).
    The manifest is written last: a bundle interrupted half-way has none and cannot load.
    """
    if fmt not in FORMAT_FILES:
        raise BundleError(f"unknown bundle format '{fmt}': use {', '.join(FORMAT_FILES)}")
    manifest: dict[str, Any] = {
        "octune_bundle": SCHEMA_VERSION,
        "reads_with": f"octune>={READS_WITH[SCHEMA_VERSION]}",
        "octune_version": octune_version(),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "format": fmt,
        "device": dict(device),
        "kernels": [],
        "files": {},
    }
    files: dict[str, bytes] = {}
    for table in tables:
        template_name, space_name = source_files(table)
        template, space = sources[table.sha256]
        if kernel_version_sha256(template, space) != table.sha256:
            raise BundleError(f"the sources given for {table.kernel} do not hash to its sha256")
        files[template_name], files[space_name] = template.encode(), space.encode()
        manifest["kernels"].append(
            {
                "name": table.kernel,
                "sha256": table.sha256,
                "tuned": len(table.tuned),
                "predictions": len(table.predictions),
            }
        )
    if fmt == "json":
        files[FORMAT_FILES[fmt]] = _json_bytes({"kernels": [table_to_data(t) for t in tables]})
    elif fmt == "sqlite":
        files[FORMAT_FILES[fmt]] = _sqlite_bytes(tables)
    else:  # the header, and its tables as JSON: `octune lookup` shows what it answers
        header = cheader.render(device, tables, sources, manifest, prefix)
        files[FORMAT_FILES[fmt]] = header.encode()
        files[FORMAT_FILES["json"]] = _json_bytes({"kernels": [table_to_data(t) for t in tables]})
    try:
        out.mkdir(parents=True, exist_ok=True)
        # A re-export in another format; an old signature is of another manifest.
        for stale in (MANIFEST, SIGNATURE, *FORMAT_FILES.values()):
            (out / stale).unlink(missing_ok=True)
        for name, content in files.items():
            path = out / name
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(content)
            manifest["files"][name] = {
                "sha256": hashlib.sha256(content).hexdigest(),
                "bytes": len(content),
            }
        (out / MANIFEST).write_bytes(_json_bytes(manifest, indent=2))
    except OSError as error:
        raise BundleError(
            f"cannot write bundle to {out}: {error.strerror or error}; pass a writable --out"
        ) from error
    return manifest
