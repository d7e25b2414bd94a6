"""A user's own kernel, from a folder outside octune: tuned, looked up and exported through
the same pipeline as octune's families, with no octune file touched.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers.cli_testing import assert_one_line_error, octune

from octune.catalogue import registry
from octune.core.errors import OctuneError
from octune.networks.graph import GraphBuilder
from octune.networks.layers import extract_layers, load_model

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "user_kernel"


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "my_kernels"
    shutil.copytree(FIXTURE, folder)
    return folder


def test_a_users_kernel_folder_tunes_looks_up_and_exports(tmp_path: Path) -> None:
    folder, db = _folder(tmp_path), tmp_path / "octune.db"
    user = ["--kernel-dir", str(folder)]
    shape = ["--rows", "100", "--cols", "70"]
    tuned = octune(*user, "tune", "transpose", *shape, "--budget", "5", "--confirm", "1", db=db)
    assert tuned.returncode == 0, tuned.stderr + tuned.stdout
    best = octune(*user, "best", "transpose", *shape, "--json", db=db)
    assert best.returncode == 0, best.stderr
    payload = json.loads(best.stdout)
    assert payload["kernel"] == "transpose" and set(payload["config"]) == {
        "TILE", "ROWS_PER_ITEM", "PADDING",
    }  # fmt: skip
    bundle = tmp_path / "bundle"
    exported = octune(*user, "export", "--device", payload["device_fingerprint"],
                      "--out", str(bundle), "--no-model", db=db)  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    # The bundle answers without the user's folder: it carries the family's lookup rules, and
    # the template with its #include pasted in.
    (template,) = (bundle / "kernels").glob("transpose-*.cl")
    assert "inline bool inside(" in template.read_text()
    exact = octune("lookup", str(bundle), "transpose", *shape)
    assert exact.returncode == 0, exact.stderr
    assert json.loads(exact.stdout)["match"] == "exact"
    assert json.loads(exact.stdout)["config"] == payload["config"]
    near = json.loads(
        octune("lookup", str(bundle), "transpose", "--rows", "90", "--cols", "80").stdout
    )
    assert near["match"] == "nearest"
    refused = octune("lookup", str(bundle), "transpose", "--rows", "0", "--cols", "80")
    assert_one_line_error(refused, "--rows 0 is out of range")
    # Without the folder, the database still serves a network octune's own families run (the
    # stored transpose version, whose space needs its family's shape names, is not built).
    network = octune("run", "squeezenet1.1", "--db", f"sqlite:///{db}")
    assert network.returncode == 0 and "agrees with onnxruntime" in network.stdout, network.stderr


def test_a_broken_users_folder_is_named_in_one_line(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    user = ["--kernel-dir", str(folder)]
    (folder / "transpose.py").write_text(
        (FIXTURE / "transpose.py").read_text().replace("    def bind(", "    def unused(")
    )
    result = octune(*user, "tune", "transpose", "--rows", "8", "--cols", "8")
    assert_one_line_error(result, "transpose.py", "bind")

    folder = _folder(tmp_path / "second")
    (folder / "transpose.yaml").write_text(
        (FIXTURE / "transpose.yaml").read_text().replace("- TILE %", "- TILES %")
    )
    result = octune("--kernel-dir", str(folder), "tune", "transpose", "--rows", "8", "--cols", "8")
    assert_one_line_error(result, "transpose.yaml", "TILES")

    folder = _folder(tmp_path / "third")
    (folder / "transpose.cl").write_text("__kernel void transpose( { syntax error")
    result = octune("--kernel-dir", str(folder), "tune", "transpose", "--rows", "8", "--cols", "8",
                    "--budget", "6", db=tmp_path / "third.db")  # fmt: skip
    assert_one_line_error(result, "build_error")

    folder = _folder(tmp_path / "fourth")
    (folder / "bounds.clh").unlink()
    result = octune("--kernel-dir", str(folder), "tune", "transpose", "--rows", "8", "--cols", "8")
    assert_one_line_error(result, "transpose.cl includes bounds.clh", "not beside it")


@pytest.mark.parametrize("name", ["bounds.clh", "transpose.cl", "transpose.yaml", "transpose.py"])
def test_a_link_out_of_the_kernel_folder_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Issue 45: a folder's file that links to /etc/passwd was pasted into the stored source and
    travelled with uploads and exports.
    """
    folder = _folder(tmp_path)
    outside = tmp_path / "outside" / name
    outside.parent.mkdir()
    shutil.move(folder / name, outside)
    (folder / name).symlink_to(outside)
    monkeypatch.setenv(registry.KERNEL_PATH_ENV, str(folder))
    registry._clear()
    try:
        with pytest.raises(OctuneError, match=f"{name} links to .*outside the kernel folder"):
            registry.load_kernel("transpose")
    finally:
        monkeypatch.undo()
        registry._clear()


def test_a_users_family_reads_the_onnx_nodes_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``onnx_ops`` is all it takes for a model's nodes to become a user family's layers."""
    g = GraphBuilder("transposes", seed=2)
    x = g.input("input", [6, 10])
    y = g.node("Transpose", [x], "flat")
    y = g.node("Reshape", [y, g.constant("cube", np.array([2, 5, 6], dtype=np.int64))], "as3d")
    y = g.node("Transpose", [y], "deep", perm=[2, 1, 0])
    onnx.save(g.model(y, [6, 5, 2]), tmp_path / "transposes.onnx")
    monkeypatch.setenv(registry.KERNEL_PATH_ENV, str(_folder(tmp_path)))
    registry._clear()
    try:
        layers, untuned = extract_layers(load_model(tmp_path / "transposes.onnx"))
    finally:
        monkeypatch.undo()
        registry._clear()
    assert [(layer.family, layer.shape, layer.nodes) for layer in layers] == [
        ("transpose", {"rows": 6, "cols": 10}, ("flat",))
    ]
    assert untuned == ["Transpose (3-D: transpose is 2-D) x1"]


def test_a_space_extends_another(tmp_path: Path) -> None:
    """A space that says ``extends:`` tunes the other's template with its sections on top."""
    folder, db = _folder(tmp_path), tmp_path / "octune.db"
    (folder / "transpose_padded.yaml").write_text(
        "extends: transpose\nparameters:\n  PADDING: {values: [1]}\nconstraints:\n  - TILE >= 16\n"
    )
    user, shape = ["--kernel-dir", str(folder)], ["--rows", "40", "--cols", "24"]
    tuned = octune(*user, "tune", "transpose_padded", *shape, "--strategy", "exhaustive",
                   "--confirm", "0", db=db)  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr + tuned.stdout
    assert "8 legal configs" in tuned.stdout  # TILE 16, 32 x ROWS_PER_ITEM 1, 2, 4, 8
    best = json.loads(octune(*user, "best", "transpose_padded", *shape, "--json", db=db).stdout)
    assert best["config"]["PADDING"] == 1 and best["config"]["TILE"] >= 16

    (folder / "transpose_padded.yaml").write_text("extends: transposed\n")
    refused = octune(*user, "tune", "transpose_padded", *shape)
    assert_one_line_error(refused, "extends 'transposed', which is no kernel's space")


def _half_wrong_folder(tmp_path: Path) -> Path:
    """The transpose, wrong for an odd number of rows, beside a second kernel of its family
    that never builds: a layer whose every candidate fails, two ways.
    """
    folder = _folder(tmp_path)
    template = (FIXTURE / "transpose.cl").read_text()
    wrong = template.replace("= tile[tx][y];", "= tile[tx][y] + rows % 2;")
    assert wrong != template
    (folder / "transpose.cl").write_text(wrong)
    (folder / "transpose_broken.yaml").write_text("extends: transpose\nkernel: broken\n")
    (folder / "broken.cl").write_text("__kernel void transpose( { syntax error")
    return folder


def _workloads(tmp_path: Path, *rows: int) -> Path:
    path = tmp_path / "layers.yaml"
    entries = "".join(f"  - {{kernel: transpose, rows: {r}, cols: 8}}\n" for r in rows)
    path.write_text(f"workloads:\n{entries}")
    return path


def test_a_workload_without_a_verified_config_is_listed_and_the_run_succeeds(
    tmp_path: Path,
) -> None:
    folder, db = _half_wrong_folder(tmp_path), tmp_path / "octune.db"
    summary = tmp_path / "summary.json"
    result = octune("--kernel-dir", str(folder), "tune", "--workloads",
                    str(_workloads(tmp_path, 16, 9)), "--budget", "24", "--strategy",
                    "exhaustive", "--confirm", "0", "--jobs", "0", "--summary", str(summary),
                    db=db)  # fmt: skip
    assert result.returncode == 0, result.stderr + result.stdout
    assert "Traceback" not in result.stderr + result.stdout
    # Shares of 24: one candidate for each of the four kernels first, then 5 of the 20 left for
    # each: the broken kernel's second turn stops after 5 identical build errors (6 in all).
    rows = json.loads(summary.read_text())
    assert [row["tried_now"] for row in rows] == [6, 6, 6, 6]
    lines = [line for line in result.stdout.splitlines() if line.startswith("no verified")]
    assert lines == [
        "no verified config for transpose rows=9 cols=8: 12 candidates failed (wrong_result: "
        "output off the float64 reference); lookups answer it from the nearest tuned shape or "
        "the default"
    ]
    assert result.stdout.count("Going on with the rest of the run") == 2
    with sqlite3.connect(db) as connection:
        statuses = connection.execute(
            "SELECT status, COUNT(*) FROM measurements GROUP BY status ORDER BY status"
        ).fetchall()
    assert statuses == [("build_error", 12), ("ok", 6), ("wrong_result", 6)]  # all stored


def test_a_run_where_no_workload_verified_fails_in_one_line(tmp_path: Path) -> None:
    folder = _half_wrong_folder(tmp_path)
    result = octune("--kernel-dir", str(folder), "tune", "--workloads",
                    str(_workloads(tmp_path, 9, 11)), "--budget", "6", "--strategy",
                    "exhaustive", "--confirm", "0", "--jobs", "0",
                    db=tmp_path / "octune.db")  # fmt: skip
    assert_one_line_error(result, "none of the 2 workloads got a verified config", code=1)
    assert result.stdout.count("no verified config for transpose rows=") == 2


def test_a_retired_kernel_version_is_never_answered(tmp_path: Path) -> None:
    """A version found wrong after it was tuned is listed under ``retired:`` in the next
    version's space: export refuses it, and a bundle exported before answers without it.
    """
    folder, db = _folder(tmp_path), tmp_path / "octune.db"
    user, shape = ["--kernel-dir", str(folder)], ["--rows", "100", "--cols", "70"]
    tuned = octune(*user, "tune", "transpose", *shape, "--budget", "3", "--confirm", "0", db=db)
    assert tuned.returncode == 0, tuned.stderr + tuned.stdout
    best = json.loads(octune(*user, "best", "transpose", *shape, "--json", db=db).stdout)
    bundle = tmp_path / "bundle"
    export = [*user, "export", "--device", best["device_fingerprint"], "--no-model"]
    assert octune(*export, "--out", str(bundle), db=db).returncode == 0
    assert octune("lookup", str(bundle), "transpose", *shape).returncode == 0

    space = folder / "transpose.yaml"
    space.write_text(f"{space.read_text()}retired:\n  {best['kernel_sha256']}: wrote past rows\n")
    refused = octune(*export, "--out", str(tmp_path / "again"), db=db)
    assert_one_line_error(refused, "'transpose' is tuned on", "only in retired versions (wrote")
    looked_up = octune(*user, "lookup", str(bundle), "transpose", *shape)
    assert_one_line_error(looked_up, "carries a retired version of transpose (wrote past rows)")
    # Where the space that retires it is not installed, nothing says the version is wrong.
    assert octune("lookup", str(bundle), "transpose", *shape).returncode == 0
