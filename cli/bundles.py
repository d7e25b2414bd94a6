"""`octune export`, `octune import`, `octune lookup` and `octune keygen`: firmware bundles, signed
or not, from the command line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from octune.cli.options import (
    DbOption,
    DtypeOption,
    JsonOption,
    PublicKey,
    checked_dtype,
    open_store,
)
from octune.cli.shape_options import ShapeCommand, ShapeKey, parse_shape
from octune.core.console import console
from octune.core.errors import OctuneError

# Signing loads `cryptography` (with its native library) only when a command signs or keys.
SIGNING_KEY_ENV_VAR = "OCTUNE_BUNDLE_SIGNING_KEY"


#: The formats ``firmware.bundle.FORMAT_FILES`` writes, named here so that declaring the
#: command loads no bundle code.
FORMATS = ("json", "sqlite", "c-header")


def keygen(
    path: Annotated[Path, typer.Argument(help="where to write the private key; PATH.pub too")],
) -> None:
    """Create an Ed25519 key pair for signing bundles (the private key readable by you only)."""
    from octune.firmware.signing import create_key

    public = create_key(path)
    console.print(
        f"Wrote the private key {path} (keep it secret; sign with `octune export --sign-key "
        f"{path}`) and the public key {public} (ship it; verify with --public-key {public})"
    )


def export(
    device: Annotated[
        str,
        typer.Option(
            "--device", "-d", help="fingerprint, its prefix, or name substring of a stored device"
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="bundle directory (created)")],
    kernels: Annotated[
        str | None, typer.Option("--kernels", help="comma-separated [default: all tuned]")
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", help=f"bundle format: {', '.join(FORMATS)}")
    ] = "json",
    db: DbOption = None,
    dtype: Annotated[
        list[str] | None,
        typer.Option(help="export the kernels of this element type only; repeatable"),
    ] = None,
    model: Annotated[
        bool, typer.Option(help="add the cost model's answers for shapes far from all tuned")
    ] = True,
    sign_key: Annotated[
        str | None,
        typer.Option(
            envvar=SIGNING_KEY_ENV_VAR,
            show_envvar=False,
            help=f"Ed25519 private key (PEM file or text; ${SIGNING_KEY_ENV_VAR}) to sign with",
        ),
    ] = None,
    prefix: Annotated[
        str,
        typer.Option(
            help="what the C header's names start with instead of octune (octune_gemm_lookup, "
            "OCTUNE_MATCH_EXACT...): two devices' headers in one firmware"
        ),
    ] = "octune",
    as_json: JsonOption = False,
) -> None:
    """Write one device's best configs, fallback tables and kernel sources as a bundle."""
    from octune.firmware.bundle import MANIFEST, SIGNATURE
    from octune.firmware.export import export_bundle

    if fmt not in FORMATS:
        raise OctuneError(f"unknown --format '{fmt}': use one of {', '.join(FORMATS)}")
    from octune.firmware.cheader import PREFIX

    if not PREFIX.fullmatch(prefix):
        raise OctuneError(
            f"--prefix {prefix!r} cannot start C names: use lower-case letters, digits and _, "
            "starting with a letter, e.g. --prefix mali"
        )
    if prefix != "octune" and fmt != "c-header":
        raise OctuneError("--prefix names the C header's functions: add --format c-header")
    names = [name.strip() for name in kernels.split(",") if name.strip()] if kernels else None
    answers = None
    if model:
        from octune.lookup.predictor import ModelAnswers  # loads XGBoost: only where it is used

        answers = ModelAnswers()
    with open_store(db) as store:
        dtypes = [checked_dtype(value) for value in dtype] if dtype else None
        manifest, tables = export_bundle(store, device, names, fmt, out, answers, dtypes, prefix)
    if sign_key is not None:
        from octune.firmware.signing import sign_manifest

        sign_manifest(out / MANIFEST, out / SIGNATURE, sign_key)
    size = sum(record["bytes"] for record in manifest["files"].values())
    if as_json:
        exported = {
            "device": manifest["device"],
            "out": str(out),
            "format": fmt,
            "files": len(manifest["files"]),
            "bytes": size,
            "signed": sign_key is not None,
            "kernels": [
                {"kernel": t.kernel, "sha256": t.sha256, "workloads": len(t.tuned),
                 "model_answers": len(t.predictions)}
                for t in tables
            ],
        }  # fmt: skip
        print(json.dumps(exported, indent=2))
        return
    what = ", ".join(
        f"{t.kernel} {t.sha256[:12]} ({len(t.tuned)} workloads, {len(t.predictions)} model answers)"
        for t in tables
    )
    console.print(
        f"Exported {what} for {manifest['device']['name']} ({manifest['device']['fingerprint']}) "
        f"to {out} as {fmt}: {len(manifest['files'])} files, {size:,} bytes"
        + (", signed" if sign_key is not None else "")
    )


def import_(
    bundle: Annotated[Path, typer.Argument(help="bundle directory written by `octune export`")],
    db: DbOption = None,
    public_key: PublicKey = None,
    as_json: JsonOption = False,
) -> None:
    """Merge a bundle's tuned configs into a database; importing twice stores once."""
    from octune.firmware.export import import_bundle

    with open_store(db) as store:
        report = import_bundle(store, bundle, public_key)
        url = store.url
    if as_json:
        imported = {"device_fingerprint": report.device_fingerprint, "database": url,
                    "imported": report.imported, "already_stored": report.skipped}  # fmt: skip
        print(json.dumps(imported, indent=2))
        return
    console.print(
        f"Imported {report.imported} measurements for device {report.device_fingerprint} "
        f"into {url}; {report.skipped} were already stored"
    )


class LookupCommand(ShapeCommand):
    kernel_argument = "kernel"


def lookup(
    ctx: typer.Context,
    bundle: Annotated[Path, typer.Argument(help="bundle directory (json or sqlite format)")],
    kernel: Annotated[
        str, typer.Argument(help="a family (its fastest kernel answers), e.g. gemm, or a kernel")
    ],
    dtype: DtypeOption = "float32",
    public_key: PublicKey = None,
) -> None:
    """Answer a lookup offline from a bundle, as the config service would (JSON). The shape
    follows the kernel's name as options, e.g. `gemm --m 64 --n 64 --k 64 --transb`.
    """
    from octune.firmware.bundle_load import in_service, load_bundle
    from octune.lookup.data import Query

    loaded = in_service(load_bundle(bundle, public_key))
    problems = {t.kernel: t.problem for t in loaded.tables.values()}
    problems.update({t.problem.name: t.problem for t in loaded.tables.values()})
    problem = problems.get(kernel)
    if problem is None:
        raise OctuneError(
            f"bundle {bundle} has no kernel or family '{kernel}'; it has "
            f"{', '.join(sorted(problems)) or 'none'}"
        )
    # The bundle's keys: it may answer a kernel this octune does not ship.
    ranges = zip(problem.keys, problem.ranges, strict=True)
    shape = parse_shape(kernel, [ShapeKey(key, low, high) for key, (low, high) in ranges], ctx.args)
    answer = loaded.lookup(Query(kernel, shape, checked_dtype(dtype)))
    print(json.dumps(answer.to_dict(), indent=2))
