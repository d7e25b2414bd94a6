"""The layer contracts in `.importlinter`, checked by import-linter over the source tree laid
out as it installs: each top-level folder a subpackage of `octune` (pyproject's package-dir).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_layer_contracts_hold(tmp_path: Path) -> None:
    mapping = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    root = tmp_path / "octune"
    root.mkdir()
    (root / "__init__.py").write_text("")
    for package, folder in mapping.items():
        if package.count(".") == 1:  # nested packages lie inside their parents' folders
            (root / package.split(".")[1]).symlink_to(REPO / folder)
    checked = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache", "--config",
         str(REPO / ".importlinter")],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True,
        text=True,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "BROKEN" not in checked.stdout
