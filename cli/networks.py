"""`octune report`: a network's estimated time on a device, layer by layer, from a database."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from octune.cli.labels import fitted_table, layer_label
from octune.cli.options import (
    STDOUT,
    BatchOption,
    DbOption,
    DimOption,
    json_on_stdout,
    open_store,
    write_json,
)
from octune.core.console import console

if TYPE_CHECKING:
    from octune.networks.report import NetworkReport


def report(
    model: Annotated[str, typer.Option("--model", help="an .onnx file or a built-in network name")],
    batch: BatchOption = None,
    dim: DimOption = None,
    device: Annotated[
        str | None,
        typer.Option(
            "--device",
            "-d",
            help="a device stored in the database (fingerprint or name), or one here "
            "(index, fingerprint or name) [default: this machine's first GPU]",
        ),
    ] = None,
    db: DbOption = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="write the report here (- for stdout)")
    ] = None,
    png_out: Annotated[
        Path | None, typer.Option("--png", help="write a bar chart per layer here")
    ] = None,
    html_out: Annotated[
        Path | None, typer.Option("--html", help="write the model's dashboard page here")
    ] = None,
) -> None:
    """Each layer's tuned time, share and match kind, and the network's estimated total: which
    layers to tune next, and how much of the estimate is measured.
    """
    from octune.networks.report import (
        network_report,
        report_device,
        write_html,
        write_png,
    )
    from octune.networks.workloads import parse_dims

    json_on_stdout(json_out)
    dims = parse_dims(dim or [])
    store = open_store(db)
    found = network_report(model, store, report_device(store, device), batch, dims)
    _print(found)
    if json_out is not None:
        write_json(json_out, found.model_dump_json(indent=2))
    for path, write in ((png_out, write_png), (html_out, write_html)):
        if path is not None:
            write(found, path)
            console.print(f"Wrote {path}")
    if json_out is not None and json_out != STDOUT:
        console.print(f"Wrote {json_out}")


#: Under this many candidates measured, a layer's exact answer is flagged as barely tuned.
FEW = 10


def _print(found: NetworkReport) -> None:
    title = f"{found.model} on {found.device_name} ({found.device_fingerprint[:12]})"
    columns = {"layer": True, "launches": False, "kernel": True, "match": True,
               "tried": False, "µs": True, "share": True}  # fmt: skip
    table = fitted_table(console, title, columns, numeric=("launches", "tried", "µs", "share"))
    shown = [column.header for column in table.columns]
    for layer in found.layers:
        time = "?" if layer.total_s is None else f"{layer.total_s * 1e6:,.1f}"
        if layer.estimate == "scaled":
            time += " ~"
        more = f" (+{len(layer.nodes) - 1})" if len(layer.nodes) > 1 else ""
        row = {
            "layer": layer_label(layer.nodes[0]) + more,
            "launches": str(layer.count),
            "tried": "-" if layer.candidates is None else str(layer.candidates),
            "kernel": layer.kernel,
            "match": layer.match,
            "µs": time,
            "share": "?" if layer.share is None else f"{layer.share:.1f} %",
        }
        table.add_row(*(row[column] for column in shown))  # fmt: skip
    console.print(table)
    unknown = f", {found.unknown_layers} without an estimate" if found.unknown_layers else ""
    scaled = any(layer.estimate == "scaled" for layer in found.layers)
    if found.unknown_layers == len(found.layers):
        console.print(
            f"No estimate: none of the {len(found.layers)} layers has a measurement for this "
            f"device in {found.database}: tune some with `octune tune --model {found.model}`"
        )
        return
    console.print(
        f"Estimated total: {found.total_s * 1e3:.3f} ms per forward pass; "
        f"{found.exact_layers} of {len(found.layers)} layers tuned exactly{unknown}"
        + ("; ~ scaled from a measured layer's GFLOP/s" if scaled else "")
    )
    few = [layer for layer in found.layers if (layer.candidates or FEW) < FEW]
    if few:
        names = ", ".join(layer_label(layer.nodes[0]) for layer in few[:3])
        console.print(
            f"{len(few)} layer(s) tuned exactly with under {FEW} candidates ({names}"
            + (", ..." if len(few) > 3 else "")
            + f"): their figures may be far from the best; `octune tune --model {found.model} "
            "--time ...` gives them more"
        )
    if found.left_out:
        console.print(
            "Not in the estimate, memory-bound operators launched beside the layers (`octune "
            f"run` times them): {', '.join(found.left_out)}"
        )
    if found.not_tuned:
        console.print(
            f"Not in the estimate (no kernel of octune's computes them): "
            f"{', '.join(found.not_tuned)}"
        )
