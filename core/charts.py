"""Charts as Plotly figures, for the dashboard's pages and `octune report --html`: built in
Python with plotly, drawn in the browser by plotly.js from the plotly package itself (served
by the config service, or written into a report file), so no page needs a CDN.

A figure reaches a page as a plain dict; the page embeds it with Jinja's ``tojson`` (which
escapes ``<``, ``>`` and ``&``, so stored names cannot close the script element) and draws it
with ``Plotly.newPlot``.
"""

from __future__ import annotations

import json
from importlib import resources
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import plotly.graph_objects as go

#: One colour per answer kind, the same on every page (report tables, bars, coverage maps).
MATCH_COLOURS = {
    "exact": "#2a9d8f",
    "nearest": "#e9c46a",
    "predicted": "#8ab17d",
    "default": "#e76f51",
}

#: Failed candidates' colours by status; anything else grey.
STATUS_COLOURS = {
    "build_error": "#e76f51",
    "launch_error": "#f4a261",
    "wrong_result": "#9b2226",
    "timeout": "#6d597a",
    "crash": "#264653",
}


def plotly_js() -> Traversable:
    """plotly.js as the installed plotly package ships it."""
    return resources.files("plotly") / "package_data" / "plotly.min.js"


def as_dict(figure: go.Figure) -> dict[str, Any]:
    """``figure`` as JSON-ready data (numpy arrays and the like already converted)."""
    return json.loads(figure.to_json())


def layout(title: str, x: str, y: str, height: int = 360, **more: Any) -> dict[str, Any]:
    """The layout every chart shares: a title, both axes named, a compact margin."""
    return {
        "title": {"text": title, "font": {"size": 14}},
        "xaxis": {"title": {"text": x}},
        "yaxis": {"title": {"text": y}},
        "height": height,
        "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
        "legend": {"orientation": "h", "y": -0.2},
        "template": "plotly_white",
        **more,
    }
