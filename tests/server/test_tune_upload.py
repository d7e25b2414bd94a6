"""`octune tune --upload` sends a real tuning run to `octune serve` over a loopback socket."""

from __future__ import annotations

import json

from helpers.cli_testing import octune
from helpers.server_testing import LiveServer

from octune.server.client import OctuneClient


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
