"""Where a network spends its time on a device, by what the database knows: each layer's answer
from the server's lookup (``StoreLookup``), its time, and its share of the network's estimate,
so a user sees which layers to tune next and how much of the estimate is measured.

A layer's time, and where it comes from (``estimate`` in the JSON):

``measured``
    an exact answer: the median the tuner measured for this shape.
``lookup``
    a nearest or predicted answer that carries a time (the neighbour's GFLOP/s applied to this
    shape's flops, or the cost model's).
``scaled``
    an answer without a time (a default config): the GFLOP/s of the network's measured layer of
    the same family nearest in flops, applied to this layer's flops. A default config is rarely
    as fast as a tuned one, so this is a lower bound on the layer's time.
``unknown``
    no time and no measured layer of the family to scale from: counted in ``unknown_layers``,
    left out of the total and the shares.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from octune.core.charts import MATCH_COLOURS, as_dict, layout, plotly_js
from octune.core.errors import OctuneError
from octune.db.networks import StoredNetwork
from octune.db.queries import StoredDevice
from octune.db.store import Store
from octune.lookup.data import Query, QueryError
from octune.lookup.tables import StoreLookup, resolve_device
from octune.networks.layers import Layer, own_launches
from octune.networks.workloads import network_model

Estimate = Literal["measured", "lookup", "scaled", "unknown"]


class LayerReport(BaseModel):
    """One distinct layer: its answer and its part of the network's estimated time."""

    nodes: list[str]
    family: str
    shape: dict[str, int]
    dtype: str = "float32"  # what the layer computes in (a quantized model's int8 layers)
    count: int  # launches per forward pass
    flops: int  # per launch
    kernel: str
    match: str
    config: dict[str, int]
    time_s: float | None  # per launch
    total_s: float | None  # time_s x count
    estimate: Estimate
    scaled_from: str | None = None  # the measured layer a ``scaled`` time comes from
    candidates: int | None = None  # configs measured at this shape (an exact answer's)
    share: float | None  # percent of the network's estimated total

    @property
    def label(self) -> str:
        """The first node's name, and how many more share the shape."""
        more = f" (+{len(self.nodes) - 1})" if len(self.nodes) > 1 else ""
        return self.nodes[0] + more


class NetworkReport(BaseModel):
    """A network on a device: its layers, the estimated total and how much of it is measured."""

    model: str
    device_fingerprint: str
    device_name: str
    database: str
    layers: list[LayerReport]
    total_s: float  # over the layers with an estimate
    exact_layers: int
    unknown_layers: int
    not_tuned: list[str]  # operators octune has no kernel for, outside the total
    # Memory-bound operators the runtime launches beside the layers, outside the total too.
    left_out: list[str] = []


def report_device(store: Store, choice: str | None) -> StoredDevice:
    """A device stored in the database (fingerprint or name), else one on this machine (index,
    fingerprint or name): a report may be about a device tuned elsewhere.
    """
    if choice and not choice.isdigit() and store.stored_devices():
        try:
            return resolve_device(store, choice)
        except QueryError:
            pass
    from octune.tuner.device import DeviceInfo, select_device

    return StoredDevice.of(DeviceInfo.from_cl(select_device(choice)))


def network_report(
    model_source: str | Path,
    store: Store,
    device: StoredDevice,
    batch: int | None = None,
    dims: Mapping[str, int] | None = None,
    lookup: StoreLookup | None = None,
) -> NetworkReport:
    """Each distinct layer's answer from ``store`` for ``device``, timed as the module says.
    ``lookup``: a server's own, so its page answers as its lookups do (with its cost model).
    """
    model, layers, untuned = network_model(model_source, batch, dims or {})
    return layers_report(
        str(model_source), layers, untuned, own_launches(model), store, device, lookup
    )


def stored_network_report(
    network: StoredNetwork, store: Store, device: StoredDevice, lookup: StoreLookup | None = None
) -> NetworkReport:
    """The report of a network `tune --model` stored (``Store.save_network``): no file read."""
    layers = [Layer.from_record(record) for record in network.layers]
    return layers_report(
        network.name, layers, network.not_tuned, network.left_out, store, device, lookup
    )


def layers_report(
    name: str,
    layers: Sequence[Layer],
    untuned: Sequence[str],
    left_out: Sequence[str],
    store: Store,
    device: StoredDevice,
    lookup: StoreLookup | None = None,
) -> NetworkReport:
    """Each layer's answer and time, and the network's estimated total."""
    lookup = lookup or StoreLookup(store)
    reports = [_layer_report(layer, lookup, device, store) for layer in layers]
    _scale_missing(reports)
    total = sum(r.total_s for r in reports if r.total_s is not None)
    for entry in reports:
        if entry.total_s is not None and total > 0:
            entry.share = 100 * entry.total_s / total
    return NetworkReport(
        model=name,
        device_fingerprint=device.fingerprint,
        device_name=device.name,
        database=store.url,
        layers=reports,
        total_s=total,
        exact_layers=sum(r.match == "exact" for r in reports),
        unknown_layers=sum(r.estimate == "unknown" for r in reports),
        not_tuned=list(untuned),
        left_out=list(left_out),
    )


def _layer_report(
    layer: Layer, lookup: StoreLookup, device: StoredDevice, store: Store
) -> LayerReport:
    answer = lookup.lookup(device, Query(layer.family, dict(layer.shape), layer.dtype))
    time_s = answer.time_s
    estimate: Estimate = "unknown"
    candidates = None
    if time_s is not None:
        estimate = "measured" if answer.match == "exact" else "lookup"
    if answer.match == "exact" and answer.source is not None:
        best = store.best(device.fingerprint, answer.kernel, answer.source["workload_key"],
                          answer.kernel_sha256)  # fmt: skip
        candidates = None if best is None else best.measured
    return LayerReport(
        nodes=list(layer.nodes),
        family=layer.family,
        shape=dict(layer.shape),
        dtype=layer.dtype,
        count=layer.count,
        flops=layer.workload().flops,
        kernel=answer.kernel,
        match=answer.match,
        config=dict(answer.config),
        time_s=time_s,
        total_s=None if time_s is None else time_s * layer.count,
        estimate=estimate,
        candidates=candidates,
        share=None,
    )


def _scale_missing(reports: Sequence[LayerReport]) -> None:
    """Time the layers without one from the measured layer of their family and dtype nearest in
    flops.
    """
    measured = [r for r in reports if r.estimate == "measured" and r.time_s]
    for entry in reports:
        donors = [r for r in measured if (r.family, r.dtype) == (entry.family, entry.dtype)]
        if entry.estimate != "unknown" or not donors or entry.flops <= 0:
            continue
        donor = min(donors, key=lambda r: abs(math.log(max(r.flops, 1) / entry.flops)))
        assert donor.time_s is not None
        entry.time_s = donor.time_s * entry.flops / max(donor.flops, 1)
        entry.total_s = entry.time_s * entry.count
        entry.estimate = "scaled"
        entry.scaled_from = donor.label


def write_png(report: NetworkReport, path: Path) -> None:
    """A horizontal bar per layer (its time in the network, µs), coloured by match kind."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        raise OctuneError("--png needs matplotlib: pip install matplotlib") from None
    layers = report.layers
    figure, axes = plt.subplots(figsize=(9, 1.5 + 0.3 * len(layers)))
    times = [(r.total_s or 0.0) * 1e6 for r in layers]
    colours = [MATCH_COLOURS.get(r.match, "#999999") for r in layers]
    hatches = ["//" if r.estimate in ("scaled", "unknown") else "" for r in layers]
    bars = axes.barh(range(len(layers)), times, color=colours)
    for bar, hatch in zip(bars, hatches, strict=True):
        bar.set_hatch(hatch)
    axes.set_yticks(range(len(layers)), [r.label for r in layers], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("time per forward pass (µs); hatched: scaled or unknown")
    axes.set_title(
        f"{report.model} on {report.device_name}: {report.total_s * 1e3:.3f} ms estimated"
    )
    kinds = sorted({r.match for r in layers}, key=list(MATCH_COLOURS).index)
    axes.legend(handles=[Patch(color=MATCH_COLOURS[k], label=k) for k in kinds])
    figure.tight_layout()
    try:
        figure.savefig(path, format="png", dpi=100)
    except OSError as error:
        raise OctuneError(f"cannot write {path}: {error.strerror}") from None
    finally:
        plt.close(figure)


def layer_figure(report: NetworkReport) -> dict[str, Any]:
    """Each layer's time in a forward pass as a horizontal bar, longest first, coloured by
    match kind; hatched where the time is scaled from another layer.
    """
    import plotly.graph_objects as go

    layers = sorted(report.layers, key=lambda r: -(r.total_s or 0.0))
    figure = go.Figure()
    for kind, colour in MATCH_COLOURS.items():
        chosen = [r for r in layers if r.match == kind]
        if not chosen:
            continue
        figure.add_bar(
            y=[r.label for r in chosen], x=[(r.total_s or 0.0) * 1e6 for r in chosen],
            orientation="h", name=kind,
            marker={"color": colour, "pattern": {"shape": [
                "/" if r.estimate in ("scaled", "unknown") else "" for r in chosen]}},
            hovertext=[f"{r.family} {r.kernel}: {(r.total_s or 0) * 1e6:.1f} µs, "
                       f"{r.share or 0:.1f} % ({r.estimate})" for r in chosen],
        )  # fmt: skip
    figure.update_layout(
        layout(
            f"{report.model} on {report.device_name}: {report.total_s * 1e3:.3f} ms estimated",
            "time per forward pass (µs); hatched: scaled or unknown",
            "",
            height=120 + 22 * len(layers),
            yaxis={"categoryorder": "array", "categoryarray": [r.label for r in layers][::-1]},
        )
    )
    return as_dict(figure)


def render_html(report: NetworkReport, *, standalone: bool = True) -> str:
    """The report as a page: standalone, one file with plotly.js inside it (a report opens
    anywhere, offline); else the dashboard's page, which loads it from the server.
    """
    import jinja2

    folder = resources.files("octune.server") / "templates"
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), autoescape=True)
    template = environment.get_template("network_report.html")
    inline = plotly_js().read_text(encoding="utf-8") if standalone else None
    return template.render(
        report=report, figure=layer_figure(report), match_colours=MATCH_COLOURS,
        standalone=standalone, plotly_inline=inline, describe=_describe,
    )  # fmt: skip


def _describe(layer: LayerReport) -> str:
    """A layer's shape as its family writes it (``conv2d 64→128 3x3 56x56 s2 p1``)."""
    from octune.catalogue.registry import describe_shape

    return describe_shape(layer.family, layer.shape, str(layer.shape))


def write_html(report: NetworkReport, path: Path) -> None:
    """The dashboard page of the model, as one file."""
    _write(path, render_html(report))


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        raise OctuneError(f"cannot write {path}: {error.strerror}") from None
