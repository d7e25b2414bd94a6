"""The `octune` command line: list devices, tune a kernel for a workload, show the best config."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from octune.db.store import BestResult, Store
from octune.server.cli import serve, token_app
from octune.tuner.device import DeviceInfo, list_devices, select_device
from octune.tuner.errors import OctuneError
from octune.tuner.kernels import PROBLEMS, KernelSpec, load_kernel
from octune.tuner.measure import DeviceRunner
from octune.tuner.session import Budget, parse_duration, run_session
from octune.tuner.session import Progress as SessionProgress
from octune.tuner.strategies.base import available_strategies
from octune.tuner.workloads import GemmWorkload

app = typer.Typer(
    help="Auto-tune OpenCL kernels, store the best verified configs, look them up.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console()

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db", help="SQLAlchemy URL [default: $OCTUNE_DATABASE_URL or SQLite in the user data dir]"
    ),
]
DeviceOption = Annotated[
    str | None,
    typer.Option("--device", "-d", help="device index or name substring (see `octune devices`)"),
]
KernelArgument = Annotated[str, typer.Argument(help="kernel family, e.g. gemm")]
MOption = Annotated[int, typer.Option("--m", help="rows of op(A) and C")]
NOption = Annotated[int, typer.Option("--n", help="columns of op(B) and C")]
KOption = Annotated[int, typer.Option("--k", help="columns of op(A), rows of op(B)")]
TransAOption = Annotated[bool, typer.Option("--transa", help="op(A) = A^T")]
TransBOption = Annotated[bool, typer.Option("--transb", help="op(B) = B^T")]


def _open_store(db: str | None) -> Store:
    return Store(db or Store.default_url())


def _gemm_kernel(kernel_name: str) -> KernelSpec:
    kernel = load_kernel(kernel_name)
    if PROBLEMS[kernel.space.problem] is not GemmWorkload:
        raise OctuneError(f"kernel '{kernel_name}' is not a GEMM: --m/--n/--k do not apply to it")
    return kernel


@app.command()
def devices(
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable")] = False,
) -> None:
    """List every OpenCL platform and device with its index, fingerprint and limits."""
    infos = [DeviceInfo.from_cl(device) for device in list_devices()]
    if as_json:
        print(
            json.dumps([{"index": i, **info.to_dict()} for i, info in enumerate(infos)], indent=2)
        )
        return
    table = Table(title="OpenCL devices")
    for column in (
        "#",
        "device",
        "platform",
        "driver",
        "CUs",
        "max WG",
        "local mem",
        "fingerprint",
    ):
        table.add_column(column)
    for index, info in enumerate(infos):
        table.add_row(
            str(index),
            f"{info.name} ({info.device_type})",
            info.platform_name,
            info.driver_version,
            str(info.compute_units),
            str(info.max_work_group_size),
            f"{info.local_mem_size // 1024} KiB",
            info.fingerprint,
        )
    console.print(table)


@app.command()
def tune(
    kernel_name: KernelArgument,
    m: MOption,
    n: NOption,
    k: KOption,
    transa: TransAOption = False,
    transb: TransBOption = False,
    device: DeviceOption = None,
    strategy: Annotated[
        str, typer.Option(help=f"search strategy: {', '.join(available_strategies())}")
    ] = "random",
    budget: Annotated[int | None, typer.Option(help="stop after this many candidates")] = None,
    time_budget: Annotated[
        str | None, typer.Option("--time", help="stop after this long, e.g. 90s, 30m, 8h")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="seed of the strategy and the inputs")] = None,
    db: DbOption = None,
) -> None:
    """Tune a kernel for one workload on one device; every candidate is verified and stored."""
    kernel = _gemm_kernel(kernel_name)
    workload = GemmWorkload(m, n, k, transa, transb)
    limits = Budget(
        candidates=budget,
        seconds=parse_duration(time_budget) if time_budget else None,
    )
    if limits.candidates is None and limits.seconds is None:
        limits = Budget(candidates=100)
    cl_device = select_device(device)
    info = DeviceInfo.from_cl(cl_device)
    store = _open_store(db)
    table = kernel.space.enumerate(info.limits)
    console.print(
        f"Tuning [bold]{kernel.name}[/] for {workload} on [bold]{info.name}[/] "
        f"({len(table):,} legal configs, strategy {strategy}, database {store.url})"
    )
    runner = DeviceRunner(cl_device, kernel, workload, seed=seed)
    total = limits.candidates
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as bar:
        task = bar.add_task("configs", total=total, status="")

        def show(progress: SessionProgress) -> None:
            failures = sum(progress.failures.values())
            best = progress.best.gflops if progress.best else None
            status = f"failures {failures}  best " + (f"{best:,.1f} GFLOP/s" if best else "-")
            bar.update(task, completed=progress.tried, status=status)

        report = run_session(
            store, info, kernel, workload, table, runner,
            strategy=strategy, budget=limits, seed=seed, on_result=show,
        )  # fmt: skip
    progress = report.progress
    failures = ", ".join(f"{count} {status}" for status, count in progress.failures.items())
    console.print(
        f"Session {report.session_id}: measured {progress.tried} configs"
        + (f" ({failures})" if failures else "")
        + (
            f", skipped {progress.already_measured} measured before"
            if progress.already_measured
            else ""
        )
    )
    if report.interrupted:
        console.print("Interrupted: every measurement taken so far is stored.")
    if progress.best is None:
        console.print("No config passed verification in this session.")
    else:
        console.print(f"Best this session: {progress.best.gflops:,.1f} GFLOP/s")
    console.print(
        f"See the best stored config: octune best {kernel.name} --m {m} --n {n} --k {k}"
        + (" --transa" if transa else "")
        + (" --transb" if transb else "")
    )
    if report.interrupted:
        raise typer.Exit(130)


def _best_payload(
    best: BestResult, kernel: KernelSpec, workload: GemmWorkload, info: DeviceInfo
) -> dict[str, object]:
    global_size, local_size = kernel.space.launch(best.config, workload.shape_vars(), info.limits)
    defines = kernel.defines(best.config, workload)
    return {
        "kernel": kernel.name,
        "entry": kernel.space.entry,
        "kernel_sha256": best.kernel_sha256,
        "device": info.name,
        "device_fingerprint": info.fingerprint,
        "workload": workload.key,
        "config": best.config,
        "defines": defines,
        "build_options": " ".join(kernel.build_options(best.config, workload)),
        "global_size": list(global_size),
        "local_size": list(local_size),
        "median_s": best.median_s,
        "spread_s": best.spread_s,
        "gflops": best.gflops,
        "measured": best.measured,
        "failed": best.failed,
        "measured_at": best.measured_at.isoformat(),
    }


@app.command()
def best(
    kernel_name: KernelArgument,
    m: MOption,
    n: NOption,
    k: KOption,
    transa: TransAOption = False,
    transb: TransBOption = False,
    device: DeviceOption = None,
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable")] = False,
) -> None:
    """Show the fastest verified config stored for a workload on a device."""
    kernel = _gemm_kernel(kernel_name)
    workload = GemmWorkload(m, n, k, transa, transb)
    info = DeviceInfo.from_cl(select_device(device))
    store = _open_store(db)
    found = store.best(info.fingerprint, kernel.name, workload.key, kernel_sha256=kernel.sha256)
    if found is None:
        older = store.best(info.fingerprint, kernel.name, workload.key)
        what = (
            f"only configs of an older {kernel.name} version ({older.kernel_sha256[:12]}) are "
            f"stored for {workload} on {info.name}, and a config is only valid for the source "
            "it was tuned with"
            if older is not None
            else f"no verified config stored for {kernel.name} {workload} on {info.name}"
        )
        raise OctuneError(
            f"{what} in {store.url}: run `octune tune {kernel.name} --m {m} --n {n} --k {k}` first"
        )
    payload = _best_payload(found, kernel, workload, info)
    if as_json:
        print(json.dumps(payload, indent=2))
        return
    table = Table(title=f"Best {kernel.name} for {workload} on {info.name}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    table.add_row("GFLOP/s", f"{found.gflops:,.1f}")
    table.add_row(
        "median time", f"{found.median_s * 1e3:.4f} ms (IQR {found.spread_s * 1e3:.4f} ms)"
    )
    table.add_row("build options", str(payload["build_options"]))
    table.add_row("global / local", f"{payload['global_size']} / {payload['local_size']}")
    table.add_row("kernel version", f"{found.kernel_sha256[:16]}")
    table.add_row("candidates", f"{found.measured} measured, {found.failed} failed")
    table.add_row("measured at", str(payload["measured_at"]))
    console.print(table)


app.command()(serve)
app.add_typer(token_app, name="token")


def main() -> None:
    """Entry point: user mistakes end in one line on stderr and exit status 2, not a traceback."""
    try:
        app()
    except OctuneError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
