"""The dashboard's figures: a session's every candidate, devices compared on the workloads
they share, and a map of how a device's lookups answer shapes around what was tuned. Each is
a plain dict (``octune.core.charts``) that a page hands to plotly.js.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from octune.catalogue.family import Family, WorkloadError
from octune.core.charts import MATCH_COLOURS, STATUS_COLOURS, as_dict, layout
from octune.db.dashboard_views import Candidate, SessionDetail
from octune.db.server_store import BestSummary

if TYPE_CHECKING:  # the module loads XGBoost
    from octune.lookup.predictor import HeldOut

#: Octaves a coverage map spans on each axis, centred on the tuned shape.
COVERAGE_STEPS = (-3, -2, -1, 0, 1, 2, 3)
#: Answer kinds in the order a coverage map's colour scale lists them.
KINDS = ("exact", "nearest", "predicted", "default")


def _config_text(candidate: Candidate) -> str:
    config = "<br>".join(f"{key}={value}" for key, value in candidate.config.items())
    if candidate.status == "ok" and candidate.median_s is not None:
        outcome = f"{candidate.median_s * 1e3:.4g} ms, {candidate.gflops or 0:.1f} GFLOP/s"
    else:
        outcome = f"{candidate.status}: {candidate.message[:120]}"
    return f"{outcome}<br>{config}"


def session_figure(detail: SessionDetail) -> dict[str, Any]:
    """Every candidate against its index in measuring order (GFLOP/s; failures at 0, coloured
    by kind), the best so far as a step line, and the confirmation's re-measurements after the
    search's candidates. Hovering a point shows its config.
    """
    import plotly.graph_objects as go

    figure = go.Figure()
    search = [c for c in detail.candidates if not c.confirm]
    confirm = [c for c in detail.candidates if c.confirm]
    passed = [(i + 1, c) for i, c in enumerate(search) if c.status == "ok" and c.gflops]
    figure.add_scatter(
        x=[i for i, _ in passed], y=[c.gflops for _, c in passed], mode="markers",
        name=f"verified ({len(passed)})", marker={"color": "#457b9d", "size": 6},
        hovertext=[_config_text(c) for _, c in passed], hoverinfo="text",
    )  # fmt: skip
    best, line = 0.0, []
    for c in search:
        best = max(best, c.gflops or 0.0) if c.status == "ok" else best
        line.append(best or None)
    figure.add_scatter(
        x=list(range(1, len(search) + 1)), y=line, mode="lines", name="best so far",
        line={"shape": "hv", "color": "#1d3557", "width": 2}, hoverinfo="skip",
    )  # fmt: skip
    failed: dict[str, list[tuple[int, Candidate]]] = {}
    for i, c in enumerate(search):
        if c.status != "ok":
            failed.setdefault(c.status, []).append((i + 1, c))
    for status, points in sorted(failed.items()):
        figure.add_scatter(
            x=[i for i, _ in points], y=[0] * len(points), mode="markers",
            name=f"{status} ({len(points)})",
            marker={"color": STATUS_COLOURS.get(status, "#999"), "symbol": "x", "size": 8},
            hovertext=[_config_text(c) for _, c in points], hoverinfo="text",
        )  # fmt: skip
    if confirm:
        start = len(search) + 1
        figure.add_scatter(
            x=list(range(start, start + len(confirm))), y=[c.gflops or 0 for c in confirm],
            mode="markers", name=f"confirmation ({len(confirm)})",
            marker={"color": "#e63946", "symbol": "diamond", "size": 9},
            hovertext=[_config_text(c) for c in confirm], hoverinfo="text",
        )  # fmt: skip
    figure.update_layout(
        layout(
            f"Session {detail.row.session_id}: every candidate",
            "candidate, in measuring order",
            "GFLOP/s (failures at 0)",
            xaxis={
                "title": {"text": "candidate, in measuring order"},
                "tickformat": "d",
                **({"dtick": 1} if len(detail.candidates) <= 20 else {}),
            },
        )
    )
    return as_dict(figure)


def devices_figure(
    rows: Sequence[BestSummary], label: Callable[[BestSummary], str]
) -> dict[str, Any] | None:
    """Devices side by side on each workload that two or more have tuned, as a share of each
    device's own fastest measured workload (its measured peak), so that a phone GPU and a
    server GPU read on one scale; hovering shows the GFLOP/s. None when no workload is shared.
    """
    import plotly.graph_objects as go

    peaks: dict[str, float] = {}
    by_workload: dict[str, dict[str, BestSummary]] = {}
    for row in rows:
        peaks[row.device_name] = max(peaks.get(row.device_name, 0.0), row.best_gflops)
        found = by_workload.setdefault(row.workload, {})
        kept = found.get(row.device_name)
        if kept is None or row.best_gflops > kept.best_gflops:
            found[row.device_name] = row  # a workload's fastest kernel answers it
    shared = {key: found for key, found in by_workload.items() if len(found) > 1}
    if not shared:
        return None
    figure = go.Figure()
    for device in sorted(peaks):
        present = [(key, found[device]) for key, found in shared.items() if device in found]
        figure.add_bar(
            x=[label(row) for _, row in present],
            y=[100 * row.best_gflops / peaks[device] for _, row in present],
            name=device,
            hovertext=[f"{row.best_gflops:.1f} GFLOP/s ({row.kernel})" for _, row in present],
        )
    figure.update_layout(
        layout(
            "Devices compared on shared workloads",
            "workload",
            "% of the device's peak",
            barmode="group",
        )
    )
    return as_dict(figure)


def _scaled(base: dict[str, int], keys: tuple[str, ...], octave: int) -> dict[str, int]:
    factor = 2.0**octave
    return {**base, **{key: max(1, round(base[key] * factor)) for key in keys}}


def coverage_figure(
    family: Family,
    base: dict[str, int],
    dtype: str,
    answer: Callable[[dict[str, int]], str],
) -> dict[str, Any] | None:
    """How lookups answer shapes around ``base`` (a tuned shape), each axis a group of keys
    scaled by octaves: exact, nearest, predicted or the default. ``answer``: a shape's match.
    None for a family with fewer than two axes.
    """
    import plotly.graph_objects as go

    axes = family.coverage_keys()
    if len(axes) != 2:
        return None
    xs, ys = axes
    z: list[list[int | None]] = []
    text: list[list[str]] = []
    for y_octave in COVERAGE_STEPS:
        z_row: list[int | None] = []
        text_row: list[str] = []
        for x_octave in COVERAGE_STEPS:
            shape = _scaled(_scaled(base, xs, x_octave), ys, y_octave)
            try:
                family.workload(shape, dtype)
                match = answer(shape)
            except WorkloadError as error:
                z_row.append(None)
                text_row.append(f"impossible: {error}")
                continue
            z_row.append(KINDS.index(match))
            text_row.append(f"{family.describe(shape)}: {match}")
        z.append(z_row)
        text.append(text_row)
    steps = len(KINDS)
    scale = []
    for i, kind in enumerate(KINDS):
        scale += [[i / steps, MATCH_COLOURS[kind]], [(i + 1) / steps, MATCH_COLOURS[kind]]]
    x_values = [_scaled(base, xs, o)[xs[0]] for o in COVERAGE_STEPS]
    y_values = [_scaled(base, ys, o)[ys[0]] for o in COVERAGE_STEPS]
    figure = go.Figure(
        go.Heatmap(
            z=z, x=[str(v) for v in x_values], y=[str(v) for v in y_values], zmin=0,
            zmax=steps - 1, colorscale=scale, hovertext=text, hoverinfo="text", xgap=2, ygap=2,
            colorbar={"tickvals": [i * (steps - 1) / steps + (steps - 1) / steps / 2
                                   for i in range(steps)], "ticktext": list(KINDS)},
        )
    )  # fmt: skip
    figure.update_layout(
        layout(
            f"How {family.name} lookups answer around {family.describe(base)} ({dtype})",
            "=".join(xs),
            "=".join(ys),
            height=420,
        )
    )
    return as_dict(figure)


def model_check_figure(kernel: str, checks: Sequence[HeldOut]) -> dict[str, Any] | None:
    """The cost model's estimate against the measured time of each config at shapes it was
    not fit on (``predictor.held_out_check``), on log axes with the line where they agree;
    the title gives the median factor between them. None without a check.
    """
    import plotly.graph_objects as go

    if not checks:
        return None
    measured = [c.measured_s * 1e3 for c in checks]
    predicted = [c.predicted_s * 1e3 for c in checks]
    factors = sorted(max(m / p, p / m) for m, p in zip(measured, predicted, strict=True))
    median = factors[len(factors) // 2]
    low, high = min(measured + predicted), max(measured + predicted)
    figure = go.Figure()
    figure.add_scatter(
        x=measured, y=predicted, mode="markers", name=f"held-out configs ({len(checks)})",
        marker={"color": "#457b9d", "size": 6, "opacity": 0.7},
        hovertext=[f"shape {c.shape}<br>config {c.config}" for c in checks], hoverinfo="text",
    )  # fmt: skip
    figure.add_scatter(
        x=[low, high], y=[low, high], mode="lines", name="estimate = measurement",
        line={"color": "#999", "dash": "dash"}, hoverinfo="skip",
    )  # fmt: skip
    figure.update_layout(
        layout(
            f"{kernel}: the cost model on shapes it was not fit on (median factor {median:.2f})",
            "measured (ms)",
            "estimated (ms)",
            height=420,
            xaxis={"title": {"text": "measured (ms)"}, "type": "log"},
            yaxis={"title": {"text": "estimated (ms)"}, "type": "log"},
        )
    )
    return as_dict(figure)
