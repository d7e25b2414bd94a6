"""`octune tune --upload` sends a real tuning run to `octune serve` over a loopback socket."""

from __future__ import annotations

import json

from helpers.cli_testing import octune
from helpers.server_testing import LiveServer

from octune.api.client import OctuneClient


def test_tune_uploads_its_sessions_and_the_server_answers_with_them(tmp_path, device_info):
    server_url = f"sqlite:///{tmp_path / 'server.db'}"
    created = octune("token", "create", "--name", "tuner", "--scope", "trusted", "--db", server_url)
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    server = LiveServer(server_url, tmp_path / "server.log")
    try:
        shape = ["--m", "17", "--n", "12", "--k", "8"]
        tuned = octune("tune", "gemm", *shape, "--budget", "2", "--strategy", "exhaustive",
                       "--confirm", "1", "--db", f"sqlite:///{tmp_path / 'l.db'}",
                       "--upload", server.url, "--token", token)  # fmt: skip
        assert tuned.returncode == 0, tuned.stderr + tuned.stdout
        assert tuned.stdout.count("Uploaded session") == 2  # the search and its confirmation
        local_best = octune("best", "gemm", *shape, "--json",
                            "--db", f"sqlite:///{tmp_path / 'l.db'}")  # fmt: skip
        assert local_best.returncode == 0, local_best.stderr
        with OctuneClient(server.url) as client:
            answer = client.lookup(device_info.fingerprint, "gemm", {"m": 17, "n": 12, "k": 8})
        assert answer.match == "exact"
        assert answer.config == json.loads(local_best.stdout)["config"]
        assert token not in tuned.stdout + tuned.stderr
    finally:
        server.stop()


def test_upload_without_a_token_is_one_line_error(tmp_path):
    result = octune("tune", "gemm", "--m", "4", "--n", "4", "--k", "4", "--upload",
                    "http://127.0.0.1:9", "--db", f"sqlite:///{tmp_path / 'x.db'}")  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: --upload needs a write token: pass --token or set OCTUNE_TOKEN"
    )


def _tiny_model(path) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((16, 8), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="proj")], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 8])], [weight],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_a_network_tuned_elsewhere_has_its_page_on_the_server(tmp_path, device_info):
    """`tune --model FILE --upload` sends the network's layers too: the server's dashboard
    shows the network, from its layers, without the file.
    """
    server_url = f"sqlite:///{tmp_path / 'server.db'}"
    token = octune("token", "create", "--name", "tuner", "--scope", "trusted",
                   "--db", server_url).stdout.strip()  # fmt: skip
    _tiny_model(tmp_path / "tiny.onnx")
    server = LiveServer(server_url, tmp_path / "server.log")
    try:
        tuned = octune("tune", "--model", str(tmp_path / "tiny.onnx"), "--budget", "2",
                       "--confirm", "1", "--db", f"sqlite:///{tmp_path / 'l.db'}",
                       "--upload", server.url, "--token", token)  # fmt: skip
        assert tuned.returncode == 0, tuned.stderr + tuned.stdout
        assert "Sending the network" not in tuned.stdout
        import httpx

        home = httpx.get(server.url + "/").text
        assert "tiny.onnx" in home
        page = httpx.get(f"{server.url}/dashboard/networks/1",
                         params={"device": device_info.fingerprint})  # fmt: skip
        assert page.status_code == 200 and "1 of 1 distinct layers tuned exactly" in page.text
    finally:
        server.stop()
