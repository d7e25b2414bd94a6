"""`octune report`: a network's estimated time from a database tuned for real on this device."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers.cli_testing import assert_one_line_error, octune

from octune.catalogue.registry import families
from octune.db.store import Store
from octune.networks.report import network_report, report_device

# Two real squeezenet1.1 layers (`octune workloads from-onnx squeezenet1.1`), tuned with the 1x1
# kernel only, so the 3x3 layers get the direct kernel's default and a time scaled from these.
TUNED = {
    "features.3.squeeze": ["--c", "64", "--h", "55", "--w", "55", "--k", "16"],
    "classifier.1": ["--c", "512", "--h", "13", "--w", "13", "--k", "1000"],
}


@pytest.fixture(scope="module")
def tuned_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with the two layers tuned for real, with a tiny budget."""
    db = tmp_path_factory.mktemp("report") / "octune.db"
    for shape in TUNED.values():
        args = ["--n", "1", *shape, "--r", "1", "--s", "1", "--budget", "2", "--confirm", "0"]
        tuned = octune("tune", "conv2d_1x1", *args, db=db)
        assert tuned.returncode == 0, tuned.stderr + tuned.stdout
    return db


def test_report_shows_tuned_layers_and_writes_json_png_html(tuned_db: Path, tmp_path: Path) -> None:
    out = {kind: tmp_path / f"report.{kind}" for kind in ("json", "png", "html")}
    result = octune(
        "report", "--model", "squeezenet1.1", "--db", f"sqlite:///{tuned_db}",
        *(arg for kind, path in out.items() for arg in (f"--{kind}", str(path))),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr + result.stdout
    assert "Estimated total" in result.stdout and "2 of 18 layers tuned exactly" in result.stdout
    # Two candidates a layer is flagged as barely tuned.
    assert "2 layer(s) tuned exactly with under 10 candidates" in " ".join(result.stdout.split())
    # What the estimate leaves out is named: the pools and concats run beside the layers.
    assert "MaxPool x3" in result.stdout and "Concat x8" in result.stdout

    report = json.loads(out["json"].read_text())
    layers = {layer["nodes"][0]: layer for layer in report["layers"]}
    with Store(f"sqlite:///{tuned_db}") as store:
        fingerprint = report["device_fingerprint"]
        for name in TUNED:
            layer = layers[name]
            assert layer["match"] == "exact" and layer["estimate"] == "measured"
            best = store.best(fingerprint, "conv2d_1x1", _key(layer["shape"]))
            assert best is not None and layer["time_s"] == pytest.approx(best.median_s)
            assert layer["candidates"] == best.measured == 2
    others = [layer for name, layer in layers.items() if name not in TUNED]
    assert {layer["match"] for layer in others} <= {"nearest", "default"}
    assert {"nearest", "default"} <= {layer["match"] for layer in others}
    for layer in others:
        if layer["match"] == "default":  # no time of its own: scaled from a measured layer
            assert layer["estimate"] == "scaled" and layer["scaled_from"] in TUNED
    assert report["exact_layers"] == 2 and report["unknown_layers"] == 0
    assert sum(layer["share"] for layer in report["layers"]) == pytest.approx(100)
    assert report["total_s"] == pytest.approx(sum(layer["total_s"] for layer in layers.values()))

    assert out["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = out["html"].read_text()
    assert "squeezenet1.1" in page and "classifier.1" in page and "exact" in page
    # One file that opens anywhere, offline: plotly.js inside it, the chart's data beside it.
    assert "<script src=" not in page and "Plotly.newPlot" in page
    chart = re.search(r'data-chart="layers-chart">(.*?)</script>', page, re.S)
    assert chart is not None
    bars = [x for trace in json.loads(chart.group(1))["data"] for x in trace["x"]]
    assert len(bars) == len(report["layers"])
    assert max(bars) == pytest.approx(max(layer["total_s"] for layer in layers.values()) * 1e6)


def _key(shape: dict[str, int]) -> str:
    """The stored workload key of a conv2d shape, as the tuner writes it."""
    return families()["conv2d"].workload(shape).key


def test_report_of_an_untuned_device_counts_every_layer_unknown(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'empty.db'}") as store:
        found = network_report("squeezenet1.1", store, report_device(store, None))
    assert {layer.match for layer in found.layers} == {"default"}
    assert found.unknown_layers == len(found.layers) and found.exact_layers == 0
    assert found.total_s == 0 and all(layer.share is None for layer in found.layers)


def test_report_of_a_bad_model_is_one_line(tmp_path: Path) -> None:
    result = octune("report", "--model", "no_such_net", db=tmp_path / "octune.db")
    assert_one_line_error(result, "no_such_net")
