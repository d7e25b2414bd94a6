"""The `octune` command line, a package of its own that no library module imports: one module
per group of commands, each loading what its commands need only when they run, so that
`octune --help` answers without SQLAlchemy, NumPy, ONNX or an OpenCL driver.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from octune.cli import bundles, devices, farm, networks, run, serve, tokens, tune
from octune.cli.options import SHAPE_ARGS
from octune.cli.shape_options import ShapeCommand
from octune.core.errors import OctuneError

app = typer.Typer(
    help="Auto-tune OpenCL kernels, store the best verified configs, look them up.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version

        print(f"octune {version('octune')}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="print octune's version and exit"
        ),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="print only errors and --json output"),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="also log each candidate's config and outcome (to stderr)"
        ),
    ] = False,
    kernel_dir: Annotated[
        list[Path] | None,
        typer.Option(
            "--kernel-dir",
            help="a folder with your own kernels (.cl, .yaml and a family .py); repeatable. "
            "Also $OCTUNE_KERNEL_PATH (folders separated by ':')",
        ),
    ] = None,
) -> None:
    """Auto-tune OpenCL kernels, store the best verified configs, look them up."""
    from octune.core.console import console, log_to_stderr

    if quiet and verbose:
        raise OctuneError("give --quiet or --verbose, not both")
    console.quiet = quiet  # each command line says anew (tests run many in one process)
    log_to_stderr(logging.DEBUG if verbose else logging.WARNING)
    if kernel_dir:
        from octune.catalogue.registry import add_kernel_dir

        for folder in kernel_dir:
            add_kernel_dir(folder)


app.command(context_settings=SHAPE_ARGS, cls=ShapeCommand)(tune.tune)
app.command(context_settings=SHAPE_ARGS, cls=ShapeCommand)(tune.best)
app.add_typer(tune.workloads_app, name="workloads")
app.command()(devices.devices)
app.command()(devices.setup)
app.command()(serve.serve)
app.add_typer(tokens.token_app, name="token")
app.command("export")(bundles.export)
app.command("import")(bundles.import_)
app.command("lookup", context_settings=SHAPE_ARGS, cls=bundles.LookupCommand)(bundles.lookup)
app.command("keygen")(bundles.keygen)
app.command("run")(run.run)
app.command("report")(networks.report)
app.add_typer(farm.jobs_app, name="jobs")
app.command("agent")(farm.agent)

#: The modules each optional extra of pyproject.toml brings: a command that needs a missing one
#: says which extra to install instead of ending in an ImportError.
EXTRAS = {
    "onnx": "networks",
    "onnxruntime": "networks",
    "fastapi": "service",
    "uvicorn": "service",
    "psycopg": "service",
    "fastapi_offline": "service",
    "plotly": "networks",  # report --html; the service has it too
    "cryptography": "signing",
}


def main(args: list[str] | None = None) -> None:
    """Entry point: user mistakes end in one line on stderr and exit status 2, not a traceback.
    ``args``: the command line after ``octune`` (default: the process's own).
    """
    try:
        app(args=args, prog_name="octune")
    except OctuneError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
    except ModuleNotFoundError as error:
        module = (error.name or "").split(".")[0]
        if module not in EXTRAS:
            raise
        extra = EXTRAS[module]
        print(
            f"error: this command needs {module}, which is not installed: install octune's "
            f"'{extra}' extra (pip install 'octune[{extra}]')",
            file=sys.stderr,
        )
        sys.exit(2)
