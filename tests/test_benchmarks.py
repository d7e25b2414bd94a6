"""The benchmarks that run on a CPU, run small: a benchmark that stops working is noticed in CI,
not by the next person who needs its figures (benchmarks/service_db.py once stopped at a
device-limits change, and service_load.py's figures could not be made again).
"""

from __future__ import annotations

import ast
import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from octune.db.store import Store
from octune.networks.graph import GraphBuilder
from octune.runtime.attention import ATTENTION_PLANS

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.mark.slow
def test_the_service_database_benchmark_builds_its_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'service.db'}"
    ran = subprocess.run([sys.executable, str(BENCHMARKS / "service_db.py"), url,
                          "--workloads", "3", "--per-session", "5"],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    with Store(url) as store:
        assert len(store.stored_devices()) == 4
        assert store.measurement_stamp() > 0


def _scripts() -> list[Path]:
    """Every benchmark with a command line; those importing PyTorch at the top run only on
    the GPU machine, which has it (``benchmarks/device_run.sh``).
    """
    found = []
    for path in sorted(BENCHMARKS.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        imported = {
            alias.name.split(".")[0]
            for node in tree.body
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in (
                node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
            )
        }
        if "main" in names and "torch" not in imported:
            found.append(path)
    return found


def _run(*args: str | Path, timeout: float = 600) -> str:
    ran = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                         timeout=timeout, cwd=BENCHMARKS.parent)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return ran.stdout


# Each script's `--help`, all in one process (one import of numpy, pyopencl and octune for
# all of them, where a process each took a minute): its printed usage, or its error's last line.
_HELP_ALL = """
import contextlib, io, json, os, runpy, sys
found = {}
sys.path.insert(0, os.path.dirname(sys.argv[1]))  # the scripts' own folder, as python SCRIPT has
for path in sys.argv[1:]:
    sys.argv, out = [path, "--help"], io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
    except SystemExit as stop:
        found[path] = out.getvalue() if stop.code in (0, None) else f"exit {stop.code}"
    except BaseException as error:
        found[path] = f"{type(error).__name__}: {error}"
    else:
        found[path] = "no exit: " + out.getvalue()[-200:]
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def helps() -> dict[str, str]:
    scripts = [str(path) for path in _scripts()]
    lines = _run("-c", _HELP_ALL, *scripts).splitlines()
    return json.loads(lines[-1])


@pytest.mark.slow
@pytest.mark.parametrize("script", _scripts(), ids=lambda path: path.name)
def test_every_benchmark_starts(helps: dict[str, str], script: Path) -> None:
    """Its imports and options still stand (a renamed module or option breaks it here)."""
    assert "usage:" in helps[str(script)], helps[str(script)]


def test_the_list_of_benchmarks_is_most_of_them() -> None:
    assert len(_scripts()) >= 40


@pytest.mark.slow
def test_small_cpu_runs_of_the_benchmarks_that_need_no_gpu(tmp_path: Path) -> None:
    """Enumeration, a replay over a recorded space, the ranks of a recorded cross-batch run."""
    assert "legal configs" in _run(BENCHMARKS / "enumerate_space.py")
    replayed = _run(BENCHMARKS / "replay.py", BENCHMARKS / "data" / "synthetic_a.json.gz",
                    "--seeds", "2", "--budget", "20", "--only", "random", "model")  # fmt: skip
    assert "| model |" in replayed and "| random |" in replayed
    data = BENCHMARKS / "data" / "h200_cross_batch"
    ranks = _run(BENCHMARKS / "cross_batch.py", "--ranks", data / "call_a.json", "--base-dir",
                 data, "--dir", tmp_path, "--out", tmp_path / "unused.json")  # fmt: skip
    assert "resnet50 batch 16: ranks [" in ranks
    # Item 3's kept databases read back as what call 3 re-ran on the H200 (within 3 %).
    kept = BENCHMARKS / "data" / "h200_session26"
    dbs = ["call1_estimated_300s", "call2_measured_300s", "call3_estimated_150s",
           "call3_measured_150s"]  # fmt: skip
    spent = _run(BENCHMARKS / "budget_weights.py", "spent", "--net", "resnet50", "--batch", "32",
                 "--dbs", *[kept / f"{db}.db.gz" for db in dbs])  # fmt: skip
    sums = [float(ms) for ms in spent.splitlines()[-1].strip("| ").split("|")[-4:]]
    rerun = json.loads((kept / "call3_weights.json").read_text())["runs"][:4]
    assert [run["db"] for run in rerun] == [f"{db.split('_', 1)[1]}.db" for db in dbs]
    assert sums == pytest.approx([run["network_ms"] for run in rerun], rel=0.03)
    # Nsight Compute's raw page of session 27's conv picks, matched to what the run launched,
    # gives the table the H200 printed from it.
    kept = BENCHMARKS / "data" / "h200_session27"
    raw, sequence = kept / "call3_raw_conv.csv.gz", kept / "call3_sequence_conv.json"
    table = _run(BENCHMARKS / "vendor_profile.py", "report", "--raw", raw, "--sequence", sequence)
    assert table == (kept / "call3_report_conv.md").read_text()
    assert table.count("| octune |") == table.count("| vendor |") == 12
    # At batch 16 the raw page gave durations in ms: each pick's time under the profiler is its
    # time by launch_cost.py's PTX-graph clock, in a run of its own, within a factor of 2.
    raw, sequence = kept / "call6_raw_conv16.csv.gz", kept / "call6_sequence_conv16.json"
    table = _run(BENCHMARKS / "vendor_profile.py", "report", "--raw", raw, "--sequence", sequence)
    rows = [[cell.strip() for cell in line.split("|")] for line in table.splitlines()]
    profiled = {cells[1]: float(cells[5]) for cells in rows if cells[3:4] == ["octune"]}
    clocks = json.loads(gzip.decompress((kept / "call6_clocks_conv16.json.gz").read_bytes()))
    graph = {row["label"]: row["ptx_graph_s"] * 1e6 for row in clocks["rows"]}
    assert profiled.keys() == graph.keys() and len(graph) == 12
    assert all(0.5 < profiled[label] / graph[label] < 2 for label in graph), (profiled, graph)


def _kept(folder: str, kernel: str, batches: tuple[int, ...], call: str = "") -> list[str]:
    return [f"{folder}/{call}pool_{kernel}_b{batch}.json.gz" for batch in batches]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kernel", "matrices", "held_out", "count"),
    [(kernel, _kept("h200_session23", kernel, (1, 16), "call1_"), "held_out_2@1 held_out_2@16", 6)
     for kernel in ("conv2d_igemm", "conv2d_1x1")]
    + [("conv2d_depthwise", _kept("h200_session23", "conv2d_depthwise", (1, 16), "call4_"),
        "mobilenet_v2@1 mobilenet_v2@16", 6),
       ("conv2d_direct", _kept("h200_session25", "conv2d_direct", (1, 16), "call1_"),
        "grouped_held@1 grouped_held@16", 8),
       ("conv2d_direct", _kept("cpu_session25", "conv2d_direct", (1, 8)),
        "grouped_held@1 grouped_held@8", 4),
       ("conv2d_panel", _kept("cpu_session24", "conv2d_panel", (1, 8)),
        "mobilenet_v2@1 mobilenet_v2@8", 6)],
)  # fmt: skip
def test_the_shipped_conv_starts_are_what_the_kept_matrices_pick(
    kernel: str, matrices: list[str], held_out: str, count: int
) -> None:
    """``space_starts.py pick`` on the matrices measured for the starts (the H200's in
    data/h200_session23 and h200_session25, a Xeon's in data/cpu_session24 and cpu_session25),
    with the same layers held out, gives the starts octune ships for that device type, in their
    order: they can be made again, and a pick that changes is noticed.
    """
    data = BENCHMARKS / "data"
    starts = BENCHMARKS.parent / "search_spaces" / "starts" / f"{kernel}.yaml"
    device_type = "cpu" if "cpu_" in matrices[0] else "gpu"
    picked = _run(BENCHMARKS / "space_starts.py", "pick", *(data / m for m in matrices),
                  "--count", str(count), "--eval", *held_out.split(), "--against", starts,
                  "--device-type", device_type)  # fmt: skip
    entries = "\n".join(line for line in picked.splitlines() if line.startswith("    - "))
    shipped = yaml.safe_load(starts.read_text())[device_type]
    assert len(shipped) == count and yaml.safe_load(entries) == shipped
    assert f"against: {count} of {count} starts in the pool" in picked
    for line in picked.splitlines():  # the shipped starts are the picks: they reach the same
        if " median " in line and "; against " in line:
            ours, theirs = line.split(": ", 1)[1].split("; against ")
            assert ours.removeprefix("picks ") == theirs, line


@pytest.mark.slow
def test_the_grouped_direct_pool_is_made_again_from_the_kept_databases(tmp_path: Path) -> None:
    """``space_starts.py pool --grouped --extend``: session 23's pool, then the grouped convs'
    fastest configs of RegNetY-400MF's kept databases, is the pool session 25 measured.
    """
    data = BENCHMARKS / "data"
    databases = []
    for name in ("call1_base_regnet_y_400mf.db.gz", "call2_tuned_regnet_y_400mf_b16.db.gz"):
        databases.append(tmp_path / name.removesuffix(".gz"))
        databases[-1].write_bytes(gzip.decompress((data / "h200_session24" / name).read_bytes()))
    made = tmp_path / "pool.json"
    _run(BENCHMARKS / "space_starts.py", "pool", *databases, "--kernels", "conv2d_direct",
         "conv2d_igemm", "--per-workload", "2", "--min-flops", "1e7", "--grouped", "--extend",
         data / "h200_session23" / "call1_conv_pool.json.gz", "--out", made)  # fmt: skip
    kept = data / "h200_session25" / "call1_grouped_pool.json.gz"
    assert json.loads(made.read_text()) == json.loads(gzip.decompress(kept.read_bytes()))


def test_the_benchmarks_tune_the_kernels_octune_tune_tunes_on_the_device_type() -> None:
    """A GPU's per-shape tuning spent a share of its seconds on gemm_panel (a CPU template that
    ran 2-5 x slower than gemm.cl's tiles there) until the harness took campaign.for_device.
    """
    code = (
        "from lib.tuning import kernels_taking\n"
        "from lib.gemm_shapes import parse_shape\n"
        "w = parse_shape('257x1024x4096')\n"
        "print([[k.name for k in kernels_taking(w, t)] for t in ('gpu', 'cpu', None)])"
    )
    ran = subprocess.run([sys.executable, "-c", code], cwd=BENCHMARKS, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    gpu, cpu, every = ast.literal_eval(ran.stdout.strip())
    assert "gemm_panel" not in gpu and "gemm" in gpu and "gemm_splitk" in gpu
    assert cpu == ["gemm_panel"]
    assert sorted(every) == sorted({*gpu, *cpu})


PLANS = ["per-matrix", "one launch", "one launch, tiled", "measured at load"]


@pytest.mark.slow
def test_small_cpu_runs_of_the_device_benchmarks(tmp_path: Path) -> None:
    """A held-out conv layer tuned and timed beside onnxruntime, attention's batched
    products both ways, the element-wise launch's bandwidth and attention by each plan, as the
    GPU calls run them (benchmarks/results/networks.md).
    """
    out = tmp_path / "conv.json"
    db = f"sqlite:///{tmp_path / 'conv.db'}"
    conv = _run(BENCHMARKS / "conv_layers.py", "--nets", "held_out", "--layers", "1",
                "--seconds", "2", "--kernels", "conv2d_depthwise_rows", "--db", db,
                "--out", out)  # fmt: skip
    assert "| held_out | effnet_b3 dw5x5 s2 | 1 |" in conv
    (row,) = json.loads(out.read_text())["rows"]
    assert row["kernels"] and row["octune_s"] == min(row["kernels"].values())
    ab = _run(BENCHMARKS / "batched_matmul_ab.py", "--batches", "1", "--repeat", "1",
              "--out", tmp_path / "ab.json")  # fmt: skip
    rows = [line for line in ab.splitlines() if line.startswith("| bert_base_layer |")]
    assert [row.split("|")[3].strip() for row in rows] == PLANS
    assert all(row.rstrip().endswith("| True |") for row in rows)  # agrees with onnxruntime
    bandwidth = _run(BENCHMARKS / "epilogue_bandwidth.py", "--repeats", "1")
    assert bandwidth.count('"runtime": {"us"') == 4  # each case checked against NumPy too
    _run(BENCHMARKS / "attention_ab.py", "--shapes", "1x2x37x16", "--repeat", "1",
         "--out", tmp_path / "attention.json")  # fmt: skip
    rows = json.loads((tmp_path / "attention.json").read_text())
    assert [row["plan"] for row in rows] == [*ATTENTION_PLANS, "measured at load"]
    assert all(row["agrees"] for row in rows)
    # A model named by an absolute path: its databases go in --dir, not beside the file
    # (where a second run once resumed the first one's base).
    g = GraphBuilder("one_conv", seed=0)
    x = g.input("input", ["batch", 8, 10, 10])
    (tmp_path / "models").mkdir()
    model = tmp_path / "models" / "one_conv.onnx"
    model.write_bytes(g.model(g.conv(x, "conv", 8, 8, 3), ["batch", 8, 10, 10]).SerializeToString())
    _run(BENCHMARKS / "cross_batch.py", "--device", "0", "--nets", model, "--base-seconds", "2",
         "--batches", "2", "--policies", "confirmed-starts", "--dir", tmp_path / "run",
         "--out", tmp_path / "cross_batch.json")  # fmt: skip
    assert (tmp_path / "run" / "one_conv.onnx.db").exists()
    assert list((tmp_path / "models").iterdir()) == [model]
    (run,) = json.loads((tmp_path / "cross_batch.json").read_text())["runs"]
    assert run["batch"] == 2 and run["totals_s"]["confirmed-starts"] > 0
    # A conv layer's pick re-timed by every clock beside onnxruntime; the GEMM parameters that
    # --missing fills by default are left off the conv kernels, whose spaces lack them.
    conv_run = tmp_path / "conv_run.json"
    conv_run.write_text(json.dumps({"rows": [row]}))
    _run(BENCHMARKS / "launch_cost.py", "--device", "0", "--runs", conv_run,
         "--out", tmp_path / "clocks.json")  # fmt: skip
    (clocked,) = json.loads((tmp_path / "clocks.json").read_text())["rows"]
    assert clocked["group"] == "depthwise" and clocked["label"] == "effnet_b3 dw5x5 s2 @1"
    assert clocked["event_s"] > 0 and clocked["anchor_s"] > 0
    arms = [tmp_path / f"{weights}.db" for weights in ("estimated", "measured")]
    for arm in arms:
        _run(BENCHMARKS / "budget_weights.py", "tune", "--net", "squeezenet1.1", "--batch", "1",
             "--seconds", "3", "--weights", arm.stem, "--db", arm)  # fmt: skip
    _run(BENCHMARKS / "budget_weights.py", "compare", "--net", "squeezenet1.1", "--batch", "1",
         "--dbs", *arms, "--repeat", "1", "--out", tmp_path / "weights.json")  # fmt: skip
    runs = json.loads((tmp_path / "weights.json").read_text())["runs"]
    assert [run["db"] for run in runs] == ["estimated.db", "measured.db"]
    assert all(run["network_ms"] > 0 for run in runs)


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("wrk") is None, reason="wrk is not installed (.ci/run installs it)"
)
def test_the_service_load_benchmark_runs_with_wrk(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'service.db'}"
    _run(BENCHMARKS / "service_db.py", url, "--workloads", "3", "--per-session", "5")
    table = _run(BENCHMARKS / "service_load.py", url, "--seconds", "1", "--connections", "2")
    rows = [line for line in table.splitlines() if line.startswith("| ") and "| 2 |" in line]
    assert len(rows) == 5, table  # the bare endpoint and four lookup scenarios
    assert all(line.split("|")[6].strip() == "0" for line in rows), table  # no non-2xx
