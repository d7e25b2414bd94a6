"""Firmware bundles: one device's lookup tables in a directory, written by ``octune export`` and
read here with the standard library only, so a device with nothing but Python answers lookups
exactly as the config service does (both go through ``octune.lookup.semantics``).

A bundle directory holds::

    manifest.json          schema version, octune version, device, creation time,
                           SHA-256 and size of every other file
    lookup.json            the tables (format json), or
    lookup.sqlite          the same tables as SQLite (format sqlite), or
    octune_lookup.h        a self-contained C99 header (format c-header, for C runtimes),
                           beside the tables it was written from as lookup.json
    kernels/NAME-HASH.cl   each kernel version's template source ...
    kernels/NAME-HASH.yaml ... and search space, whose hash names the version

Loading checks everything before answering: every file against the manifest (a truncated
file, an edited table or a checksum mismatch is refused, naming the file), the kernel sources
against the kernel version hash, and the tables' structure. Files are read once and parsed
from the bytes that were hashed, and the SQLite table is opened from memory, so a bundle is
never written to by reading it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from octune.core.errors import OctuneError
from octune.core.precision import check_dtype
from octune.core.problem import Problem, kernel_version_sha256
from octune.firmware import cheader
from octune.lookup.data import (
    Answer,
    Entry,
    FollowUp,
    LookupTable,
    Predictor,
    Query,
    QueryError,
    TableError,
)
from octune.lookup.semantics import KernelIndex, best_answer

#: Bumped when a reader of the previous version could misread a new bundle.
SCHEMA_VERSION = 1
#: The first octune release that reads each schema version.
READS_WITH = {1: "0.1.0"}
MANIFEST = "manifest.json"
#: A manifest lists a few files with their sizes and hashes: past this it is not one.
MANIFEST_LIMIT = 1 << 20
SIGNATURE = "manifest.sig"  # optional: octune.firmware.signing
FORMAT_FILES = {"json": "lookup.json", "sqlite": "lookup.sqlite", "c-header": "octune_lookup.h"}
ENTRY_COLUMNS = ["shape", "dtype", "config", "time_s", "spread_s", "gflops", "workload_key"]
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(/[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?")
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


def source_files(table: LookupTable) -> tuple[str, str]:
    """Where a kernel version's template and space live inside a bundle."""
    stem = f"kernels/{table.kernel}-{table.sha256[:16]}"
    return f"{stem}.cl", f"{stem}.yaml"


# --- tables as plain data ---------------------------------------------------------------------


def table_to_data(table: LookupTable) -> dict[str, Any]:
    """A table as JSON-able data; configs are listed once and entries refer to them."""
    configs: dict[tuple[int, ...], int] = {}
    for entry in (*table.tuned, *table.predictions):
        configs.setdefault(entry.config, len(configs))

    def rows(entries: Sequence[Entry]) -> dict[str, Any]:
        return {
            "columns": ENTRY_COLUMNS,
            "rows": [
                [list(e.shape), e.dtype, configs[e.config], e.time_s, e.spread_s, e.gflops,
                 e.workload_key]
                for e in entries
            ],
        }  # fmt: skip

    template, space = source_files(table)
    return {
        "kernel": table.kernel,
        "sha256": table.sha256,
        "entry": table.entry,
        "device_fingerprint": table.device_fingerprint,
        "problem": {
            "name": table.problem.name,
            "sizes": list(table.problem.sizes),
            "flags": list(table.problem.flags),
            "shape_vars": table.problem.shape_vars,
            "flag_defines": table.problem.flag_defines,
            "dtypes": list(table.problem.dtypes),
            "max_size": table.problem.max_size,
            "flops": table.problem.flops,
            "ranges": [list(r) for r in table.problem.ranges],
            "derived": [list(d) for d in table.problem.derived],
            "rules": [list(r) for r in table.problem.rules],
            "extents": list(table.problem.extents),
            "max_elements": table.problem.max_elements,
            "defaults": [list(d) for d in table.problem.defaults],
        },
        "requires": list(table.requires),
        "dtype": table.dtype,
        "fit": table.fit,
        "parameters": list(table.parameters),
        "launch": {"global": list(table.launch_global), "local": list(table.launch_local)},
        "workspace": table.workspace,
        "then": [
            {
                "entry": step.entry,
                "global": list(step.launch_global),
                "local": list(step.launch_local),
            }
            for step in table.then
        ],
        "limits": table.limits,
        "default_config": list(table.default_config),
        "extra_build_options": list(table.extra_build_options),
        "sources": {"template": template, "space": space},
        "configs": [list(config) for config in configs],
        "tuned": rows(table.tuned),
        "predictions": rows(table.predictions),
    }


def _ints(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise ValueError(f"{what} must be a list of integers")
    return tuple(value)


def _strings(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of strings")
    return tuple(value)


def _mapping(value: object, kind: type, what: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and type(v) is kind for k, v in value.items()
    ):
        raise ValueError(f"{what} must map names to {kind.__name__}s")
    return dict(value)


def _number(value: object, what: str) -> float:
    if type(value) not in (int, float) or not value == value:  # NaN never equals itself
        raise ValueError(f"{what} must be a number")
    return float(value)  # type: ignore[arg-type]


def _follow_ups(value: object) -> tuple[FollowUp, ...]:
    if not isinstance(value, list) or not all(isinstance(step, dict) for step in value):
        raise ValueError("then must be a list of launches")
    return tuple(
        FollowUp(
            _text(step["entry"], "then.entry"),
            _strings(step["global"], "then.global"),
            _strings(step["local"], "then.local"),
        )
        for step in value
    )


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string")
    return value


# What octune itself passes a compiler besides the defines: -w, -cl-... switches, -D NAME=int.
# A table asking for anything else (an include path, a plugin to load) was not written by it.
_BUILD_OPTION = re.compile(r"-w|-cl-[a-z0-9-]+|-D[A-Za-z_][A-Za-z0-9_]*(=-?[0-9]+)?")


def _build_options(value: object) -> tuple[str, ...]:
    options = _strings(value, "extra_build_options")
    for option in options:
        if not _BUILD_OPTION.fullmatch(option):
            raise ValueError(f"extra_build_options holds {option!r}, not an option octune writes")
    return options


def table_from_data(data: Mapping[str, Any]) -> LookupTable:
    """Inverse of ``table_to_data``, checking every field's type (ValueError says which)."""
    kernel = _text(data["kernel"], "kernel")
    problem = _problem(data["problem"])
    configs = [_ints(c, f"{kernel} configs") for c in data["configs"]]

    def entries(kind: str) -> tuple[Entry, ...]:
        block = data[kind]
        if block["columns"] != ENTRY_COLUMNS:
            raise ValueError(f"{kind} columns must be {ENTRY_COLUMNS}")
        out = []
        for row in block["rows"]:
            shape, dtype, config, time_s, spread_s, gflops, key = row
            if type(config) is not int or not 0 <= config < len(configs):
                raise ValueError(f"{kind} row {key!r} refers to config {config!r}, not listed")
            out.append(
                Entry(
                    shape=_ints(shape, f"{kind} shape"),
                    dtype=_text(dtype, f"{kind} dtype"),
                    config=configs[config],
                    time_s=_number(time_s, f"{kind} time_s"),
                    spread_s=_number(spread_s, f"{kind} spread_s"),
                    gflops=_number(gflops, f"{kind} gflops"),
                    workload_key=_text(key, f"{kind} workload_key"),
                )
            )
        return tuple(out)

    return LookupTable(
        kernel=kernel,
        sha256=_text(data["sha256"], "sha256"),
        entry=_text(data["entry"], "entry"),
        device_fingerprint=_text(data["device_fingerprint"], "device_fingerprint"),
        problem=problem,
        parameters=_strings(data["parameters"], "parameters"),
        launch_global=_strings(data["launch"]["global"], "launch.global"),
        launch_local=_strings(data["launch"]["local"], "launch.local"),
        limits=_mapping(data["limits"], int, "limits"),
        default_config=_ints(data["default_config"], "default_config"),
        extra_build_options=_build_options(data["extra_build_options"]),
        tuned=entries("tuned"),
        predictions=entries("predictions"),
        requires=_strings(data.get("requires", []), "requires"),
        workspace=None if data.get("workspace") is None else _text(data["workspace"], "workspace"),
        then=_follow_ups(data.get("then", [])),
        fit=_fit(data.get("fit", 1)),  # bundles before 2026-11-28: every kernel for any device
        dtype=_dtype(data.get("dtype", "float32")),  # bundles before 2026-11-29: float32 only
    )


def _dtype(value: object) -> str:
    return check_dtype(_text(value, "dtype"))


def _fit(value: object) -> int:
    if type(value) is not int or value not in (0, 1, 2):
        raise ValueError(f"fit must be 0, 1 or 2, not {value!r}")
    return value


def _problem(data: Mapping[str, Any]) -> Problem:
    """A table's problem; bundles written before kernel families were plug-ins (GEMM only)
    carry ``flops_per_point`` and operands as key lists: read as the expressions they mean.
    """
    sizes = _strings(data["sizes"], "problem.sizes")
    flags = _strings(data["flags"], "problem.flags")
    shape_vars = _mapping(data["shape_vars"], str, "problem.shape_vars")
    max_size = int(_number(data["max_size"], "problem.max_size"))
    var_of = {key: var for var, key in shape_vars.items()}
    if "flops" in data:
        flops = _text(data["flops"], "problem.flops")
        ranges = tuple(_ints(r, "problem.ranges") for r in data["ranges"])
        extents = _strings(data["extents"], "problem.extents")
    else:
        per_point = int(_number(data["flops_per_point"], "problem.flops_per_point"))
        flops = " * ".join([str(per_point), *(var_of[key] for key in sizes)])
        data = {**data, "defaults": [[flag, 0] for flag in flags]}
        ranges = (*((1, max_size) for _ in sizes), *((0, 1) for _ in flags))
        extents = tuple(
            " * ".join(var_of[key] for key in _strings(operand, "problem.operands"))
            for operand in data.get("operands", [])
        )
    if len(ranges) != len(sizes) + len(flags) or any(len(r) != 2 for r in ranges):
        raise ValueError("problem.ranges must give (low, high) for every size and flag")
    return Problem(
        name=_text(data["name"], "problem.name"),
        sizes=sizes,
        flags=flags,
        shape_vars=shape_vars,
        flag_defines=_mapping(data["flag_defines"], str, "problem.flag_defines"),
        dtypes=_strings(data["dtypes"], "problem.dtypes"),
        max_size=max_size,
        flops=flops,
        ranges=tuple((low, high) for low, high in ranges),
        derived=tuple(_pair(d, "problem.derived") for d in data.get("derived", [])),
        rules=tuple(_pair(r, "problem.rules") for r in data.get("rules", [])),
        extents=extents,
        max_elements=int(_number(data.get("max_elements", 0), "problem.max_elements")),
        defaults=tuple(
            (_text(key, "problem.defaults"), int(_number(value, "problem.defaults")))
            for key, value in (_pair_any(d) for d in data.get("defaults", []))
        ),
    )


def _pair_any(value: object) -> tuple[object, object]:
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError("problem.defaults entries must be [key, value] pairs")
    return value[0], value[1]


def _pair(value: object, what: str) -> tuple[str, str]:
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError(f"{what} entries must be [name or expression, text] pairs")
    first, second = _strings(value, what)
    return first, second


# --- writing ----------------------------------------------------------------------------------


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


# --- reading ----------------------------------------------------------------------------------


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
    if not _FILE_NAME.fullmatch(name) or ".." in name:
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
