"""The dashboard's pages in process: the figures each page embeds (Plotly's JSON, read back
from the page as the browser reads it), the confirmation folded into its search, devices
compared, the coverage map, and signing in with a token when reads need one.
"""

from __future__ import annotations

import json
import re

import pytest
from helpers.server_testing import Seeder, make_client

from octune.core.results import CONFIRM_STRATEGY
from octune.kernels.gemm import FAMILY, gemm_workload
from octune.server.auth import COOKIE

W64 = gemm_workload(64, 64, 64)
W128 = gemm_workload(128, 128, 128)


def figures(page: str) -> dict[str, dict]:
    """Each chart's figure, as base.html's script hands it to Plotly.newPlot."""
    found = re.findall(
        r'<script type="application/json" data-chart="([^"]+)">(.*?)</script>', page, re.S
    )
    return {chart: json.loads(data) for chart, data in found}


def test_a_session_page_draws_every_candidate_and_its_confirmation(client, seeder):
    search = seeder.session(W64, [5, 7, 9], failed=2, milliseconds=[0.5, 2.0, 3.0])
    confirm = seeder.session(W64, [5], milliseconds=[1.0], strategy=CONFIRM_STRATEGY)
    page = client.get(f"/dashboard/sessions/{search}")
    assert page.status_code == 200, page.text
    assert f"Session {search}: {FAMILY.describe(W64.shape)}" in page.text
    (figure,) = figures(page.text).values()
    traces = {trace["name"]: trace for trace in figure["data"]}
    verified = traces["verified (3)"]
    assert verified["x"] == [1, 2, 3]
    assert verified["y"][0] == pytest.approx(W64.flops / 0.5e-3 / 1e9)
    assert "MWG=" in verified["hovertext"][0]  # hovering shows the config
    assert traces["build_error (2)"]["x"] == [4, 5] and traces["build_error (2)"]["y"] == [0, 0]
    assert traces["confirmation (1)"]["x"] == [6]
    line = traces["best so far"]
    assert line["line"]["shape"] == "hv" and line["y"][-1] == verified["y"][0]
    assert figure["layout"]["xaxis"]["title"]["text"].startswith("candidate")
    assert figure["layout"]["yaxis"]["title"]["text"].startswith("GFLOP/s")
    # The confirmation's own id shows the search it confirms.
    assert client.get(f"/dashboard/sessions/{confirm}").text == page.text
    missing = client.get("/dashboard/sessions/999")
    assert missing.status_code == 404 and "no session 999" in missing.json()["message"]


def test_devices_are_compared_on_the_workloads_they_share(client, store, seeder, other_device):
    seeder.session(W64, [5], milliseconds=[1.0])
    seeder.session(W128, [5], milliseconds=[1.0])
    other = Seeder(store, other_device, seeder.kernel, seeder.table)
    other.session(W64, [5], milliseconds=[0.25])
    figure = figures(client.get("/").text)["devices-compared"]
    bars = {trace["name"]: trace for trace in figure["data"]}
    assert set(bars) == {seeder.device.name, other_device.name}
    # Only the shared workload, as a share of each device's own peak.
    assert bars[other_device.name]["y"] == [pytest.approx(100.0)]
    peak = W128.flops / 1e-3  # the first device's fastest workload
    assert bars[seeder.device.name]["y"] == [pytest.approx(100 * (W64.flops / 1e-3) / peak)]
    assert figure["layout"]["yaxis"]["title"]["text"] == "% of the device's peak"


def test_one_device_compares_with_nothing(client, seeder):
    seeder.session(W64, [5])
    assert "devices-compared" not in figures(client.get("/").text)


def test_a_device_page_maps_how_lookups_answer_around_the_tuned_shape(client, seeder):
    seeder.session(W64, [5])
    fp = seeder.device.fingerprint
    page = client.get(f"/dashboard/devices/{fp}")
    assert page.status_code == 200, page.text
    figure = figures(page.text)["coverage-gemm-float32"]
    (heatmap,) = figure["data"]
    z = heatmap["z"]
    middle = len(z) // 2
    assert z[middle][middle] == 0  # exact at the tuned shape
    assert "exact" in heatmap["hovertext"][middle][middle]
    assert {value for row in z for value in row} - {0} <= {1, 2, 3}
    assert 1 in {value for row in z for value in row}  # its neighbours answer nearest
    assert client.get("/dashboard/devices/0123456789abcdef").status_code == 404


def test_a_browser_signs_in_with_a_read_token(store, seeder, read_token, write_token):
    seeder.session(W64, [5])
    with make_client(store, require_read_token=True) as client:
        html = {"Accept": "text/html"}
        page = client.get("/", headers=html, follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"] == "/login?next=%2F"
        assert client.get("/").status_code == 401  # an API client still gets the JSON 401
        form = client.get("/login")
        assert form.status_code == 200 and 'name="token"' in form.text
        wrong = client.post("/login", data={"token": "oct_wrong", "next": "/"})
        assert wrong.status_code == 401 and "Unknown token" in wrong.text
        signed = client.post("/login", data={"token": read_token, "next": "//evil.example/"},
                             follow_redirects=False)  # fmt: skip
        assert signed.status_code == 303 and signed.headers["location"] == "/"
        cookie = signed.headers["set-cookie"]
        assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
        assert client.get("/", headers=html).status_code == 200
        assert client.get("/v1/devices").status_code == 200  # reads take the cookie
        # Writes never do: a page on another site could make the browser send it.
        client.cookies.set(COOKIE, write_token)
        upload = client.post("/v1/jobs/1/cancel")
        assert upload.status_code == 401
        out = client.post("/logout", follow_redirects=False)
        assert out.status_code == 303 and COOKIE in out.headers["set-cookie"]


def test_a_network_tuned_from_a_file_has_its_page_without_the_file(client, store, seeder):
    """What `tune --model FILE` keeps (its layers) is enough for the network's page; the
    fc layer tuned answers exact, the others not.
    """
    from octune.networks.workloads import network_model, network_record

    model, layers, untuned = network_model("resnet18", None, {})
    record = network_record("/models/resnet18-v1.onnx", None, model, layers, untuned)
    network_id = store.save_network(**record)
    assert store.save_network(**record) == network_id  # the same network read again
    seeder.session(gemm_workload(1, 1000, 512, transb=True), [5])
    fp = seeder.device.fingerprint
    home = client.get("/").text
    assert f'href="/dashboard/networks/{network_id}?device={fp}"' in home
    assert "resnet18-v1.onnx" in home and "/models/resnet18-v1" not in home  # a name only
    page = client.get(f"/dashboard/networks/{network_id}", params={"device": fp})
    assert page.status_code == 200, page.text
    assert "<h1>resnet18-v1.onnx on" in page.text
    assert "1 of 12 distinct layers tuned exactly" in page.text
    (chart,) = figures(page.text).values()
    assert sum(len(trace["y"]) for trace in chart["data"]) == 12
    assert client.get("/dashboard/networks/99", params={"device": fp}).status_code == 404


def test_a_device_page_checks_the_cost_model_on_shapes_it_did_not_learn(client, seeder):
    fp = seeder.device.fingerprint
    seeder.session(W64, [5])
    assert "no-model-check" in client.get(f"/dashboard/devices/{fp}").text  # too little
    for size in (32, 128, 256):
        seeder.session(gemm_workload(size, size, size), [2, 3, 4, 5, 6, 7, 8])
    page = client.get(f"/dashboard/devices/{fp}")
    figure = figures(page.text)["model-gemm"]
    held, agree = figure["data"]
    assert agree["name"] == "estimate = measurement"
    # Shapes in key order (32, 64, 128, 256): the fourth, 256³, held out; its 7 configs.
    assert held["name"] == "held-out configs (7)" and len(held["x"]) == 7
    assert all(x > 0 and y > 0 for x, y in zip(held["x"], held["y"], strict=True))
    assert figure["layout"]["xaxis"]["type"] == "log"
    assert "median factor" in figure["layout"]["title"]["text"]
