"""The `octune` command end to end, run as the installed console script on the real device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

OCTUNE = [sys.executable, "-c", "from octune.tuner.cli import main; main()"]


def octune(*args: str, db: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("OCTUNE_DATABASE_URL", None)
    if db is not None:
        env["OCTUNE_DATABASE_URL"] = f"sqlite:///{db}"
    return subprocess.run([*OCTUNE, *args], capture_output=True, text=True, env=env, timeout=600)


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, result.stderr + result.stdout
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_devices_lists_index_fingerprint_and_limits() -> None:
    result = octune("devices", "--json")
    assert result.returncode == 0, result.stderr
    devices = json.loads(result.stdout)
    assert devices[0]["index"] == 0
    for key in ("fingerprint", "platform_name", "vendor", "name", "driver_version",
                "compute_units", "max_work_group_size", "local_mem_size"):  # fmt: skip
        assert key in devices[0]


def test_tune_then_best_returns_a_verified_config(tmp_path: Path) -> None:
    db = tmp_path / "octune.db"
    shape = ["--m", "40", "--n", "33", "--k", "17", "--transb"]
    tuned = octune("tune", "gemm", *shape, "--budget", "4", "--seed", "3", "--device", "0", db=db)
    assert tuned.returncode == 0, tuned.stderr + tuned.stdout
    assert "measured 4 configs" in tuned.stdout

    best = octune("best", "gemm", *shape, "--device", "0", "--json", db=db)
    assert best.returncode == 0, best.stderr
    payload = json.loads(best.stdout)
    assert payload["gflops"] > 0 and payload["median_s"] > 0
    assert payload["defines"]["TRANSB"] == 1 and payload["defines"]["TRANSA"] == 0
    assert f"-DMWG={payload['config']['MWG']}" in payload["build_options"]
    local = payload["local_size"]
    assert local == [payload["config"]["NDIMC"], payload["config"]["MDIMC"]]
    assert payload["global_size"][0] % local[0] == 0

    # Running the same command again measures new configs only.
    again = octune("tune", "gemm", *shape, "--budget", "2", "--seed", "3", "--device", "0", db=db)
    assert again.returncode == 0, again.stderr
    assert "skipped 4 measured before" in again.stdout


def test_best_without_tuning_says_what_to_run(tmp_path: Path) -> None:
    result = octune("best", "gemm", "--m", "8", "--n", "8", "--k", "8", db=tmp_path / "x.db")
    assert_one_line_error(result, "octune tune gemm")


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["tune", "gemm", "--m", "0", "--n", "4", "--k", "4"], ["M=0"]),
        (
            ["tune", "gemm", "--m", "4", "--n", "4", "--k", "4", "--device", "no-such-gpu"],
            ["no-such-gpu", "pocl"],
        ),
        (["tune", "gemm", "--m", "4", "--n", "4", "--k", "4", "--device", "99"], ["index 99"]),
        (["tune", "gemm", "--m", "4", "--n", "4", "--k", "4", "--time", "soon"], ["soon"]),
        (
            ["tune", "gemm", "--m", "4", "--n", "4", "--k", "4", "--strategy", "magic"],
            ["magic", "random"],
        ),
        (["tune", "gemmm", "--m", "4", "--n", "4", "--k", "4"], ["did you mean 'gemm'"]),
    ],
)
def test_bad_input_is_one_line_error(tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    assert_one_line_error(octune(*args, db=tmp_path / "bad.db"), *fragments)


def test_unwritable_database_is_one_line_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = octune(
        "tune",
        "gemm",
        "--m",
        "4",
        "--n",
        "4",
        "--k",
        "4",
        "--budget",
        "1",
        db=blocker / "sub" / "x.db",
    )
    assert_one_line_error(result, "cannot open database")
