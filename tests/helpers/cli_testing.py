"""`octune ARGS` in tests: in this process, through the console script's own entry point
(``octune.cli.main``, with its one-line errors and exit statuses), so that a command costs no
interpreter start and no second import of octune; or as a process of its own where the test is
about processes (a kill, concurrency, what an import loads).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from octune.catalogue import registry
from octune.cli import main

#: The console script as a process.
OCTUNE = [sys.executable, "-c", "from octune.cli import main; main()"]


def _environment(db: Path | None, columns: int = 200) -> dict[str, str | None]:
    """The variables a command sees changed: wide tables (or a terminal ``columns`` wide), no
    database but ``db``, and the user-kernel path restored afterwards (``--kernel-dir`` sets
    it)."""
    return {
        "COLUMNS": str(columns),
        "OCTUNE_DATABASE_URL": f"sqlite:///{db}" if db is not None else None,
        registry.KERNEL_PATH_ENV: os.environ.get(registry.KERNEL_PATH_ENV),
    }


def octune(
    *args: str, db: Path | None = None, columns: int = 200
) -> subprocess.CompletedProcess[str]:
    """``octune ARGS`` in this process; ``db``: the database it defaults to; ``columns``: the
    terminal's width.
    """
    with CliRunner().isolation(env=_environment(db, columns)) as (stdout, stderr, _):
        try:
            main(list(args))
            status = 0
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
        sys.stdout.flush()
        sys.stderr.flush()
        out, err = stdout.getvalue().decode(), stderr.getvalue().decode()
    if "--kernel-dir" in args:
        # The families a --kernel-dir loaded stay out of the next test's (the isolation has
        # already put the path variable back).
        registry._clear()
    return subprocess.CompletedProcess(["octune", *args], status, out, err)


def octune_process(
    *args: str, db: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``octune ARGS`` as a process of its own, seeing what ``octune`` would."""
    changed = {**os.environ, **_environment(db)}
    env = {name: value for name, value in changed.items() if value is not None}
    return subprocess.run(
        [*OCTUNE, *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def assert_one_line_error(
    result: subprocess.CompletedProcess[str], *fragments: str, code: int = 2
) -> None:
    """One line on stderr holding ``fragments``, and exit status ``code`` (docs/commands.md,
    "Exit status": 2 a usage error, 3 no device, 4 the database, 5 the server, 1 a check).
    """
    assert result.returncode == code, result.stderr + result.stdout
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
