"""`octune serve` as a real process on a loopback socket, fed by a real tuning run on the
PoCL device through the upload client, and its dashboard as headless Chromium shows it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from helpers.cli_testing import octune, octune_process
from helpers.server_testing import LiveServer
from sqlalchemy import select

from octune.api.client import ClientError, OctuneClient
from octune.catalogue.registry import load_kernel
from octune.db.models import TuningSession
from octune.db.server_store import ServerStore
from octune.kernels.gemm import FAMILY, gemm_workload

CHROMIUM_ENV = "OCTUNE_TEST_CHROMIUM"
WORKLOAD = gemm_workload(32, 32, 32)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> str:
    """A database written by a real (short) tuning run."""
    url = f"sqlite:///{tmp_path_factory.mktemp('tuner') / 'tuner.db'}"
    result = octune("tune", "gemm", "--m", "32", "--n", "32", "--k", "32", "--budget", "3",
                    "--seed", "1", "--db", url)  # fmt: skip
    assert result.returncode == 0, result.stderr + result.stdout
    return url


@pytest.fixture(scope="module")
def served(tuned, tmp_path_factory):
    """A server on an empty database that received the tuning run by upload."""
    folder = tmp_path_factory.mktemp("server")
    url = f"sqlite:///{folder / 'server.db'}"
    created = octune("token", "create", "--name", "lab-3", "--scope", "trusted", "--db", url)
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert re.fullmatch(r"oct_[A-Za-z0-9_-]{43}", token)
    assert "not shown again" in created.stderr
    server = LiveServer(url, folder / "server.log")
    with ServerStore(tuned) as local, OctuneClient(server.url, token) as client:
        with local._session() as session:
            ids = session.scalars(select(TuningSession.id).order_by(TuningSession.id)).all()
        outcomes = [client.upload_session(local, session_id) for session_id in ids]
    assert all(outcome.added > 0 for outcome in outcomes)
    yield server, token, ids
    server.stop()


def test_tuned_results_answered_over_a_socket(tuned, served, device_info):
    server, token, ids = served
    with ServerStore(tuned) as local, OctuneClient(server.url, token) as client:
        assert client.ready().schema_revision == "0008"
        answer = client.lookup(device_info.name, "gemm", {"m": 32, "n": 32, "k": 32})
        assert answer.match == "exact"
        best = local.best(device_info.fingerprint, answer.kernel, WORKLOAD.key)
        assert best is not None and answer.config == best.config
        assert answer.device_fingerprint == device_info.fingerprint
        source = client.kernel_source(answer.kernel_sha256).template_source
        assert source == load_kernel(answer.kernel).source
        near = client.lookup(device_info.fingerprint, "gemm", {"m": 48, "n": 40, "k": 32})
        assert near.match == "nearest"
        flagged = client.lookup(device_info.name, "gemm", {"m": 32, "n": 32, "k": 32,
                                                           "transa": 1})  # fmt: skip
        assert flagged.match == "nearest" and flagged.defines["TRANSA"] == 1
        (small,) = client.lookup_batch(device_info.fingerprint, "gemm", [{"m": 3, "n": 3,
                                                                          "k": 3}])  # fmt: skip
        assert small.match == "nearest"
        with pytest.raises(ClientError, match=r"server answered 404: unknown device 'nope'"):
            client.lookup("nope", "gemm", {"m": 1, "n": 1, "k": 1})
        again = client.upload_session(local, ids[0])
        assert again.added == 0 and again.already_stored > 0
    with OctuneClient(server.url) as anonymous, pytest.raises(ClientError, match="401"):
        anonymous.upload_session(local, ids[0])


def test_tokens_never_reach_the_log(served):
    server, token, _ = served
    log = server.log.read_text()
    assert "POST /v1/sessions" in log
    assert token not in log
    assert token[4:20] not in log


def test_serve_mistakes_are_one_line(served, tmp_path):
    server, _, _ = served
    for args, fragment, code in (
        (("--port", str(server.port)), f"cannot listen on 127.0.0.1:{server.port}", 2),
        (("--db", "nonsense://x"), "not a valid database URL", 4),  # the database's status
    ):
        result = octune_process(
            "serve", "--db", f"sqlite:///{tmp_path / 'x.db'}", *args, timeout=60
        )
        assert result.returncode == code, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and fragment in lines[0], result.stderr


@pytest.mark.browser
def test_dashboard_in_headless_chromium(served, device_info, tmp_path):
    """The pages as a browser draws them: Plotly's charts present with their axes, every
    session listed (confirmations folded), nothing wider than a 1280-pixel window. The
    screenshots land in $OCTUNE_TEST_ARTIFACTS when it is set (docs/images come from there).
    """
    chromium = os.environ.get(CHROMIUM_ENV)
    if not chromium:
        pytest.skip(f"{CHROMIUM_ENV} is not set (.ci/run installs Debian's chromium and sets it)")
    from playwright.sync_api import sync_playwright

    server, _, ids = served
    shots = Path(os.environ.get("OCTUNE_TEST_ARTIFACTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    flags = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
             "--disable-background-networking", "--disable-component-update"]  # fmt: skip
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=flags)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(server.url + "/")
            assert page.title() == "octune dashboard"
            devices = page.locator("#devices")
            assert device_info.name in devices.inner_text()
            assert device_info.fingerprint in devices.inner_text()
            label = FAMILY.describe(WORKLOAD.shape)
            row = page.locator("#workloads tr", has_text=label)
            assert row.is_visible()
            assert re.search(r"\d+\.\d", row.inner_text())
            sessions = page.locator("#sessions tr.session")
            assert sessions.count() == 1  # the search; its confirmation folded into it
            assert page.evaluate("document.documentElement.scrollWidth") <= 1280
            page.screenshot(path=str(shots / "dashboard.png"), full_page=True)

            sessions.first.locator("a").click()
            page.wait_for_selector("#candidates .scatterlayer .point")
            axes = page.locator("#candidates .xtitle, #candidates .ytitle").all_text_contents()
            assert any(t.startswith("candidate") for t in axes), axes
            assert any(t.startswith("GFLOP/s") for t in axes), axes
            points = page.locator("#candidates .scatterlayer .point").count()
            assert points >= len(ids)  # the search's candidates and the confirmation's
            page.screenshot(path=str(shots / "session.png"), full_page=True)

            page.goto(f"{server.url}/dashboard/devices/{device_info.fingerprint}")
            page.wait_for_selector(".chart .heatmaplayer image, .chart .hm image")
            page.screenshot(path=str(shots / "device.png"), full_page=True)

            page.goto(f"{server.url}/dashboard/models/resnet18?device={device_info.fingerprint}")
            page.wait_for_selector("#layers-chart .barlayer .point")
            assert page.locator("#layers-chart .barlayer .point").count() >= 12
            assert page.evaluate("document.documentElement.scrollWidth") <= 1280
            page.screenshot(path=str(shots / "network.png"), full_page=True)
            assert (shots / "dashboard.png").stat().st_size > 10_000
        finally:
            browser.close()
