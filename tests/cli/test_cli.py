"""The `octune` command end to end, run as the installed console script on the real device."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.cli_testing import OCTUNE, assert_one_line_error, octune
from rich.console import Console

from octune.catalogue.registry import KernelSpec
from octune.cli.labels import fitted_table, layer_label
from octune.core.results import Measurement, Status
from octune.db.store import Store
from octune.kernels.gemm import gemm_workload
from octune.tuner.device import DeviceInfo
from octune.tuner.session import CONFIRM_WITHIN


def test_declaring_the_commands_loads_none_of_what_running_them_needs() -> None:
    """`octune --help` must not wait for the database layer, NumPy, ONNX, OpenCL or the
    server: every command imports those when it runs. And the bundle formats the command
    line names are the ones the bundle writer knows.
    """
    heavy = ["sqlalchemy", "alembic", "numpy", "onnx", "pyopencl", "fastapi", "cryptography",
             "xgboost", "yaml"]  # fmt: skip
    probe = f"import sys, octune.cli; print([name for name in {heavy!r} if name in sys.modules])"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]"
    assert octune("--help").returncode == 0

    from octune.cli.bundles import FORMATS
    from octune.firmware.bundle import FORMAT_FILES

    assert tuple(FORMAT_FILES) == FORMATS


@pytest.mark.parametrize(
    ("module", "extra", "args"),
    [
        ("onnx", "networks", ["run", "model.onnx"]),
        ("uvicorn", "service", ["serve"]),
        ("cryptography", "signing", ["keygen", "release"]),
    ],
)
def test_a_command_whose_extra_is_missing_names_the_extra(
    module: str, extra: str, args: list[str], tmp_path: Path
) -> None:
    """The base install leaves networks, the service and signing to extras: without one, the
    commands that need it say which in one line (a module set to None cannot be imported).
    """
    (tmp_path / "model.onnx").write_bytes(b"not read")
    hide = f"import sys; sys.modules[{module!r}] = None; sys.argv = ['octune', *{args!r}]; "
    result = subprocess.run(
        [sys.executable, "-c", hide + "from octune.cli import main; main()"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert_one_line_error(result, f"needs {module}", f"pip install 'octune[{extra}]'")


def test_devices_lists_index_fingerprint_and_limits() -> None:
    result = octune("devices", "--json")
    assert result.returncode == 0, result.stderr
    devices = json.loads(result.stdout)
    assert devices[0]["index"] == 0
    for key in ("fingerprint", "platform_name", "vendor", "name", "driver_version",
                "compute_units", "max_work_group_size", "local_mem_size"):  # fmt: skip
        assert key in devices[0]


def test_tune_then_best_returns_a_verified_config(tmp_path: Path, device_info: DeviceInfo) -> None:
    db = tmp_path / "octune.db"
    shape = ["--m", "40", "--n", "33", "--k", "17", "--transb"]
    # Exhaustive order starts with small tiles, which PoCL compiles quickly; the random
    # strategy is exercised in test_session.py.
    quick = ["--strategy", "exhaustive", "--confirm", "1"]
    tuned = octune("tune", "gemm", *shape, "--budget", "4", *quick, db=db)
    assert tuned.returncode == 0, tuned.stderr + tuned.stdout
    assert "measured 4 configs" in tuned.stdout

    best = octune("best", "gemm", *shape, "--json", db=db)
    assert best.returncode == 0, best.stderr
    payload = json.loads(best.stdout)
    assert payload["gflops"] > 0 and payload["median_s"] > 0
    assert payload["defines"]["TRANSB"] == 1 and payload["defines"]["TRANSA"] == 0
    # The family's kernel written for the device's type answers (gemm_panel on a CPU), beside
    # NumPy on the same processor: a median and the quartiles of many timings.
    assert device_info.device_type != "cpu" or payload["kernel"] == "gemm_panel"
    if device_info.device_type == "cpu":
        low, high = payload["host_numpy_gflops_quartiles"]
        assert 0 < low <= payload["host_numpy_gflops"] <= high
    options = payload["build_options"].split()
    assert all(f"-D{name}={value}" in options for name, value in payload["config"].items())
    for launch in [payload, *payload["then"]]:
        local, size = launch["local_size"], launch["global_size"]
        assert all(g % g_local == 0 for g, g_local in zip(size, local, strict=True))

    # Running the same command again measures new configs only.
    again = octune("tune", "gemm", *shape, "--budget", "2", *quick, db=db)
    assert again.returncode == 0, again.stderr
    assert "measured 2 configs" in again.stdout
    assert "skipped 4 measured before" in again.stdout


def test_best_without_tuning_says_what_to_run(tmp_path: Path) -> None:
    result = octune("best", "gemm", "--m", "8", "--n", "8", "--k", "8", db=tmp_path / "x.db")
    assert_one_line_error(result, "octune tune gemm")


def test_best_when_every_measurement_failed_says_why(
    tmp_path: Path, device_info: DeviceInfo, gemm_kernel: KernelSpec
) -> None:
    """Not "run tune first" after a tune that ran: the count, the status and the reason."""
    db = tmp_path / "failed.db"
    store = Store(f"sqlite:///{db}")
    workload = gemm_workload(17, 8, 8)
    session = store.start_session(
        store.device_id(device_info),
        store.kernel_version_id(
            "gemm", gemm_kernel.sha256, gemm_kernel.source, gemm_kernel.space.source_text
        ),
        store.workload_id(workload.problem, workload.key, workload.shape, workload.dtype),
        strategy="random",
        seed=0,
        settings={},
    )
    for mwg in (16, 32, 64):
        log = "error: unknown target CPU 'generic'"
        message = f"Build on <x at 0x1{mwg}>:\n{log}\n(options: -DMWG={mwg})"
        store.add_measurement(
            session, Measurement({"MWG": mwg}, Status.BUILD_ERROR, message=message)
        )
    store.finish_session(session, "completed")

    result = octune("best", "gemm", "--m", "17", "--n", "8", "--k", "8", db=db)
    assert_one_line_error(
        result,
        "all 3 measured configs failed: build_error: error: unknown target CPU 'generic'",
        "octune devices",
    )
    assert "octune tune" not in result.stderr


@pytest.mark.parametrize(
    ("args", "fragments", "code"),
    [
        (["tune", "gemm", "--m", "0", "--n", "4", "--k", "4"], ["--m 0 is out of range"], 2),
        (
            ["tune", "gemm", "--m", "4", "--n", "4", "--k", "4", "--device", "no-such-gpu"],
            ["no-such-gpu", "octune setup"],
            3,  # no such device
        ),
        (["tune", "gemm", "--m", "4", "--n", "4", "--k", "4", "--device", "99"], ["index 99"], 3),
        (["tune", "gemm", "--m", "4", "--n", "4", "--k", "4", "--time", "soon"], ["soon"], 2),
        (
            ["tune", "gemm", "--m", "4", "--n", "4", "--k", "4", "--strategy", "magic"],
            ["magic", "random"],
            2,
        ),
        (["tune", "gemmm", "--m", "4", "--n", "4", "--k", "4"], ["did you mean 'gemm'"], 2),
        (["tune", "gemm", "--m", "4", "--n", "4", "--k", "4", "--seed", "-1"], ["--seed -1"], 2),
        (["tune", "gemm", "--m", "4", "--n", "4", "--k", "4", "--seed", str(2**64)], ["2^62"], 2),
        # An option tune does not have, not shape keys (which follow a kernel's name only).
        (["tune", "--model", "resnet18", "-q"], ["has no option -q", "octune -q tune"], 2),
        (["tune", "--bogus"], ["has no option --bogus", "octune tune --help"], 2),
    ],
)
def test_bad_input_is_one_line_error(
    tmp_path: Path, args: list[str], fragments: list[str], code: int
) -> None:
    result = octune(*args, db=tmp_path / "bad.db")
    assert_one_line_error(result, *fragments, code=code)
    assert result.stdout == "", "checked before any work starts"


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
    assert_one_line_error(result, "cannot open database", code=4)  # the database


def stored_candidates(db: Path) -> tuple[list[str], list[str]]:
    """Config keys of every search measurement in the database, and the distinct ones."""
    with sqlite3.connect(db) as connection:
        try:
            rows = connection.execute(
                "SELECT m.config_key FROM measurements m JOIN tuning_sessions s "
                "ON m.session_id = s.id WHERE s.strategy != 'confirm'"
            ).fetchall()
        except sqlite3.OperationalError:  # not migrated yet: nothing measured
            rows = []
    keys = [key for (key,) in rows]
    return keys, sorted(set(keys))


def test_sigkilled_session_resumes_to_what_an_uninterrupted_one_measures(tmp_path: Path) -> None:
    # Exhaustive order starts with small tiles, which PoCL compiles quickly.
    args = ["tune", "gemm", "--m", "24", "--n", "20", "--k", "9", "--strategy", "exhaustive",
            "--budget", "10", "--confirm", "0", "--jobs", "0"]  # fmt: skip
    whole = octune(*args, db=tmp_path / "whole.db")
    assert whole.returncode == 0, whole.stderr + whole.stdout

    killed_db = tmp_path / "killed.db"
    # Cold program caches (octune's and PoCL's own): each candidate compiles, so the run is
    # still going when killed (with the first run's programs cached, a fast runtime measured
    # all 10 between polls).
    env = {**os.environ, "OCTUNE_DATABASE_URL": f"sqlite:///{killed_db}",
           "OCTUNE_CACHE_DIR": str(tmp_path / "cold-cache"),
           "POCL_CACHE_DIR": str(tmp_path / "cold-pocl-cache")}  # fmt: skip
    process = subprocess.Popen([*OCTUNE, *args], env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if killed_db.exists() and len(stored_candidates(killed_db)[0]) >= 2:
            break
        time.sleep(0.05)
    assert process.poll() is None, "the session ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    measured_before = len(stored_candidates(killed_db)[0])
    assert 2 <= measured_before < 10

    resumed = octune(*args, "--resume", db=killed_db)
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    assert f"skipped {measured_before} measured before" in resumed.stdout
    keys, distinct = stored_candidates(killed_db)
    assert len(keys) == len(distinct) == 10  # nothing measured twice
    assert distinct == stored_candidates(tmp_path / "whole.db")[1]  # the same configs


def session_rows(db: Path) -> list[tuple[str, str, int]]:
    """(strategy, status, measurements) of every session, in order."""
    with sqlite3.connect(db) as connection:
        return connection.execute(
            "SELECT s.strategy, s.status, COUNT(m.id) FROM tuning_sessions s "
            "LEFT JOIN measurements m ON m.session_id = s.id GROUP BY s.id ORDER BY s.id"
        ).fetchall()


def confirmable(db: Path, top: int = 3) -> int:
    """How many of the first search session's ``top`` configs a confirm re-measures: those
    within CONFIRM_WITHIN of the best.
    """
    with sqlite3.connect(db) as connection:
        times = [t for (t,) in connection.execute(
            "SELECT median_s FROM measurements WHERE session_id = 1 AND status = 'ok' "
            "ORDER BY median_s LIMIT ?", (top,)
        )]  # fmt: skip
    return sum(t <= CONFIRM_WITHIN * times[0] for t in times)


def test_a_confirm_killed_part_way_is_finished_by_resume(tmp_path: Path) -> None:
    """SIGKILL once the confirm session has started: --resume measures no new candidate but
    confirms the top configs the killed one left, and the dead session reads interrupted.
    """
    db = tmp_path / "confirm.db"
    args = ["tune", "gemm", "--m", "24", "--n", "20", "--k", "9", "--strategy", "exhaustive",
            "--budget", "4", "--confirm", "3", "--jobs", "0"]  # fmt: skip
    env = {**os.environ, "OCTUNE_DATABASE_URL": f"sqlite:///{db}"}
    process = subprocess.Popen([*OCTUNE, *args], env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(sqlite3.OperationalError):  # no schema yet
            if db.exists() and any(row[0] == "confirm" for row in session_rows(db)):
                break
        time.sleep(0.01)
    assert process.poll() is None, "the run ended before its confirm could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    (search, killed) = session_rows(db)
    assert search == ("exhaustive", "completed", 4)
    contenders = confirmable(db)
    assert killed[:2] == ("confirm", "running") and killed[2] < contenders

    resumed = octune(*args, "--resume", db=db)
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    assert "measured 0 configs" in resumed.stdout
    rows = session_rows(db)
    assert rows[1] == ("confirm", "interrupted", killed[2])
    assert rows[-1] == ("confirm", "completed", contenders - killed[2])
    best = octune("best", "gemm", "--m", "24", "--n", "20", "--k", "9", "--json", db=db)
    assert best.returncode == 0, best.stderr


def test_workloads_file_shares_the_budget_and_its_summary_matches_the_database(
    tmp_path: Path,
) -> None:
    workloads = tmp_path / "layers.yaml"
    workloads.write_text(
        "workloads:\n"
        "  - {kernel: gemm, m: 17, n: 12, k: 5}\n"
        "  - {kernel: gemm, m: 19, n: 20, k: 7, transa: true}\n"
    )
    db = tmp_path / "many.db"
    summary = tmp_path / "summary.json"
    result = octune("tune", "--workloads", str(workloads), "--budget", "4", "--confirm", "1",
                    "--strategy", "exhaustive", "--jobs", "0",
                    "--summary", str(summary), db=db)  # fmt: skip
    assert result.returncode == 0, result.stderr + result.stdout
    assert "GEMM TN 19x20x7" in result.stdout  # the summary table
    rows = json.loads(summary.read_text())
    assert [row["tried_now"] for row in rows] == [2, 2]
    keys, _ = stored_candidates(db)
    assert sum(row["stored_candidates"] for row in rows) == len(keys) == 4
    shapes = (
        ["--m", "17", "--n", "12", "--k", "5"],
        ["--m", "19", "--n", "20", "--k", "7", "--transa"],
    )
    for row, shape in zip(rows, shapes, strict=True):
        best = octune("best", "gemm", *shape, "--json", db=db)
        assert best.returncode == 0, best.stderr
        assert json.loads(best.stdout)["gflops"] == pytest.approx(row["best_gflops"])


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        ("workloads: [{kernel: gemm, m: 4, n: 4}]", ["workloads.0", "needs --k"]),
        ("workloads: [{kernel: gemm, m: 4, n: 4, k: 4, colour: 1}]", ["colour", "no parameter"]),
        ("workloads: [{kernel: gemm, m: 4, n: 4, k: 4", ["not valid YAML"]),
        ("workloads: []", ["workloads"]),
        ("root:x:0:0:root:/root:/bin/bash", ["the file: input should be a valid dictionary ("]),
        (
            "workloads: [{kernel: gemm, m: 4, n: 4, k: 4}, {kernel: gemm, m: 4, n: 4, k: 4}]",
            ["listed twice"],
        ),
        ("workloads: [{kernel: gemm, m: 0, n: 4, k: 4}]", ["m=0"]),
        (
            "workloads: [{kernel: gemm, m: 4, n: 4, k: 4}]\n# caf\xe9 in Latin-1",
            ["byte 51 is not UTF-8"],
        ),
    ],
)
def test_bad_workloads_file_is_one_line_error(
    tmp_path: Path, content: str, fragments: list[str]
) -> None:
    path = tmp_path / "workloads.yaml"
    path.write_bytes(content.encode("latin-1"))  # as an editor set to Latin-1 saves it
    result = octune("tune", "--workloads", str(path), db=tmp_path / "x.db")
    assert_one_line_error(result, *fragments)


def test_energy_objective_without_a_sensor_is_one_line_error(tmp_path: Path) -> None:
    result = octune("tune", "gemm", "--m", "4", "--n", "4", "--k", "4", "--objective", "energy",
                    db=tmp_path / "x.db")  # fmt: skip
    assert_one_line_error(result, "energy sensor", "--objective time")
    with_flag = octune("tune", "gemm", "--m", "4", "--n", "4", "--k", "4", "--energy",
                       db=tmp_path / "x.db")  # fmt: skip
    assert_one_line_error(with_flag, "--energy needs an energy sensor")


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB file system, filled up: mounting one needs root, which CI runs as."""
    folder = tmp_path / "full"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)],
                             capture_output=True, check=False)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small file system here (it takes root)")
    try:
        with contextlib.suppress(OSError):
            (folder / "filler").write_bytes(b"\0" * 2**21)
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_a_full_disk_stops_tuning_and_records_no_config_as_broken(
    tmp_path: Path, full_disk: Path, device_info: DeviceInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PoCL builds into its cache folder: on a full disk every build fails. That is one line
    naming the disk, not build errors stored against the configs (which a resumed search would
    skip for good).
    """
    if "Portable Computing Language" not in device_info.platform_name:
        pytest.skip("the test device's compiler does not build into POCL_CACHE_DIR")
    monkeypatch.setenv("POCL_CACHE_DIR", str(full_disk / "pocl"))
    db = tmp_path / "octune.db"
    result = octune("tune", "gemm", "--m", "80", "--n", "64", "--k", "64", "--budget", "4", db=db)
    assert_one_line_error(result, f"{full_disk / 'pocl'} has", "MiB free", "--resume")
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT count(*) FROM measurements").fetchone() == (0,)
        assert connection.execute("SELECT status FROM tuning_sessions").fetchall() == [
            ("interrupted",)
        ]


@pytest.mark.parametrize(
    "args",
    [["devices"], ["--help"], ["tune", "--help"], ["serve", "--help"], ["run", "--help"],
     ["token", "--help"], ["jobs", "submit", "--help"], ["export", "--help"]],
    ids=" ".join,
)  # fmt: skip
def test_an_80_column_terminal_sees_every_name_whole(args: list[str]) -> None:
    """Nothing cut to fit ("…"), no line past the edge, every option's name in full."""
    result = octune(*args, columns=80)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines and all(len(line) <= 80 for line in lines), result.stdout
    assert "…" not in result.stdout
    if args == ["serve", "--help"]:
        assert "--require-read-token" in result.stdout
    if args == ["devices"]:
        assert re.search(r"^   fingerprint [0-9a-f]{16}$", result.stdout, re.M)


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("/features/features.3/squeeze/Conv", "features.3/squeeze"),  # TorchScript exporter
        ("/layer1/layer1.0/relu_1/Relu_1", "layer1.0/relu_1"),
        ("features.3.expand1x1", "features.3.expand1x1"),  # octune's own names
        ("node_Conv_12", "node_Conv_12"),
        ("/Conv", "Conv"),
    ],
)
def test_layer_labels_keep_what_tells_layers_apart(name: str, label: str) -> None:
    assert layer_label(name) == label


def test_a_fitted_table_leaves_out_what_a_narrow_terminal_cannot_show() -> None:
    columns = {"layer": True, "op": False, "kernel": True, "share": True}
    for width, shown in ((80, ["layer", "kernel", "share"]), (120, list(columns))):
        console = Console(width=width, file=io.StringIO())
        table = fitted_table(console, "t", columns)
        assert [column.header for column in table.columns] == shown
        table.add_row(*(["features.12.expand3x3_long_name"] + ["x"] * (len(shown) - 1)))
        console.print(table)
        assert "features.12.expand3x3_long_name" in console.file.getvalue()


def test_the_shell_completes_commands() -> None:
    """Completion as bash asks for it (``octune --install-completion`` installs the script)."""
    env = {**os.environ, "COMP_WORDS": "octune tu", "COMP_CWORD": "1",
           "_OCTUNE_COMPLETE": "complete_bash"}  # fmt: skip
    result = subprocess.run(OCTUNE, capture_output=True, text=True, env=env, timeout=60)
    assert result.stdout.split() == ["tune"], result.stderr


def test_a_named_kernels_shape_options_are_listed_checked_and_completed() -> None:
    """Shape keys follow the kernel's name; once it is named, `--help` lists its family's keys
    with their ranges, the shell completes them, and a value out of range is one line.
    """
    shown = octune("tune", "conv2d_direct", "--help", columns=100)
    assert shown.returncode == 0
    keys = shown.stdout[shown.stdout.index("conv2d shape options:") :]
    assert "--groups" in keys and "(integer 1..1048576, default 1)" in keys
    assert "--transa" not in keys
    assert "gemm: --m --n --k [--transa] [--transb]" in octune("best", "--help").stdout
    env = {**os.environ, "COMP_WORDS": "octune tune gemm --m 8 --tr", "COMP_CWORD": "5",
           "_OCTUNE_COMPLETE": "complete_bash"}  # fmt: skip
    completed = subprocess.run(OCTUNE, capture_output=True, text=True, env=env, timeout=60)
    assert completed.stdout.split() == ["--transa", "--transb"], completed.stderr
    assert_one_line_error(
        octune("tune", "gemm", "--m", "0", "--n", "8", "--k", "8"),
        "--m 0 is out of range: rows of op(A) and C (integer 1..1048576",
    )
    assert_one_line_error(octune("tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--transb",
                                 "2"), "--transb 2 is out of range")  # fmt: skip


def test_quiet_prints_only_json_and_errors(tmp_path: Path) -> None:
    db = tmp_path / "quiet.db"
    shape = ("--m", "8", "--n", "8", "--k", "8")
    tuned = octune("--quiet", "tune", "gemm", *shape, "--budget", "2", db=db)
    assert (tuned.returncode, tuned.stdout) == (0, ""), tuned.stderr
    best = octune("-q", "best", "gemm", *shape, "--json", db=db)
    assert json.loads(best.stdout)["gflops"] > 0
    missing = octune("-q", "best", "gemm", "--m", "9", "--n", "8", "--k", "8", db=db)
    assert missing.returncode == 2 and missing.stderr.startswith("error: ")
    assert "measured 2 configs" in octune("tune", "gemm", *shape, "--budget", "2", db=db).stdout


def test_json_to_stdout_is_the_whole_stdout(tmp_path: Path) -> None:
    """``--summary -`` (and ``--json -`` of run and report): stdout is the JSON alone."""
    db = tmp_path / "summary.db"
    tuned = octune("tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--budget", "2",
                   "--summary", "-", db=db)  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr
    (row,) = json.loads(tuned.stdout)
    assert row["tried_now"] == 2
    report = octune("report", "--model", "squeezenet1.1", "--json", "-", db=db)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["model"] == "squeezenet1.1"


def test_verbose_logs_each_candidate_to_stderr(tmp_path: Path) -> None:
    shape = ("--m", "8", "--n", "8", "--k", "8")
    tuned = octune("--verbose", "tune", "gemm", *shape, "--budget", "2", "--summary", "-",
                   db=tmp_path / "verbose.db")  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr
    (row,) = json.loads(tuned.stdout)  # the logs leave stdout to the JSON
    candidates = re.findall(r"session 1: (\S+=\d+(?: \S+=\d+)*) -> ", tuned.stderr)
    assert len(candidates) == row["tried_now"] == 2, tuned.stderr
    assert_one_line_error(octune("-q", "-v", "devices"), "--quiet or --verbose")
    quiet = octune("tune", "gemm", *shape, "--budget", "1", db=tmp_path / "verbose.db")
    assert "->" not in quiet.stderr  # logging is back to warnings only


def test_python_dash_m_octune_is_the_command() -> None:
    result = subprocess.run([sys.executable, "-m", "octune", "--version"], capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0 and re.fullmatch(r"octune \S+\n", result.stdout), result.stderr


def test_export_import_and_setup_report_json(tmp_path: Path, device_info: DeviceInfo) -> None:
    db = tmp_path / "tuned.db"
    tuned = octune("tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--budget", "2", db=db)
    assert tuned.returncode == 0, tuned.stderr
    out = tmp_path / "bundle"
    exported = octune("export", "-d", device_info.fingerprint, "--out", str(out), "--no-model",
                      "--json", db=db)  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    summary = json.loads(exported.stdout)
    assert summary["device"]["fingerprint"] == device_info.fingerprint
    files = [p for p in out.rglob("*") if p.is_file() and p.name != "manifest.json"]
    assert summary["files"] == len(files)  # the manifest lists the others
    assert [k["workloads"] for k in summary["kernels"]] == [1] and not summary["signed"]
    imported = octune("import", str(out), "--json", db=tmp_path / "other.db")
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["imported"] > 0
    again = json.loads(octune("import", str(out), "--json", db=tmp_path / "other.db").stdout)
    assert again["imported"] == 0 and again["already_stored"] > 0
    ready = octune("setup", "--no-install", "--json")
    assert ready.returncode == 0, ready.stderr
    report = json.loads(ready.stdout)
    assert report["devices"][report["chosen"]]["compiles"] is True
