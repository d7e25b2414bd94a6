"""A conv layer end to end: `octune tune conv2d` measures every kernel that takes it on the
real device, `best` and the service answer with the fastest (kernel, config), an untuned layer
gets the nearest tuned layer's config, and the dashboard says which kernel answers.
"""

from __future__ import annotations

import json
import math

from helpers.cli_testing import octune
from helpers.server_testing import make_client

from octune.db.server_store import ServerStore

LAYER = {"n": 1, "c": 8, "h": 9, "w": 9, "k": 8, "r": 3, "s": 3, "pad": 1}
ARGS = [f"--{key}={value}" for key, value in LAYER.items()]


def test_a_conv_layer_is_tuned_looked_up_and_shown_with_its_fastest_kernel(tmp_path, device_info):
    db = tmp_path / "octune.db"
    url = f"sqlite:///{db}"
    takers = ("conv2d_direct", "conv2d_igemm", "conv2d_winograd", "conv2d_panel")
    tuned = octune("tune", "conv2d", *ARGS, "--budget", "8", "--confirm", "0", "--all-kernels",
                   "--db", url)  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr + tuned.stdout
    for kernel in takers:  # every kernel that takes a 3x3 stride-1 layer, for any device
        assert f"with {kernel}:" in tuned.stdout

    best = octune("best", "conv2d", *ARGS, "--json", "--db", url)
    assert best.returncode == 0, best.stderr
    payload = json.loads(best.stdout)
    assert payload["kernel"] in takers
    assert "-DR=3" in payload["build_options"] and "-DPAD=1" in payload["build_options"]

    with ServerStore(url) as store, make_client(store) as client:
        query = {"device": device_info.fingerprint, "kernel": "conv2d", **LAYER}
        answer = client.get("/v1/lookup", params=query).json()
        assert answer["match"] == "exact"
        assert answer["kernel"] == payload["kernel"]
        assert answer["config"] == payload["config"]
        assert math.isclose(answer["time_s"], payload["median_s"])

        untuned = {**LAYER, "h": 11, "w": 12, "k": 12}
        response = client.post(
            "/v1/lookup/batch",
            json={"kernel": "conv2d", "device": device_info.fingerprint,
                  "workloads": [LAYER, untuned]},
        )  # fmt: skip
        assert response.status_code == 200, response.text
        exact, near = response.json()["answers"]
        assert exact["match"] == "exact"
        assert near["match"] in ("nearest", "predicted")
        assert near["shape"]["k"] == 12 and near["global_size"]

        bad = client.get("/v1/lookup", params={**query, "groups": 3})
        assert bad.status_code == 422
        assert "conv2d c must be divisible by groups" in bad.json()["message"]

        page = client.get("/").text
        assert f"<td>{payload['kernel']}</td>" in page  # the "answered by" column
