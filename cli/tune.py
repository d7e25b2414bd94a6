"""`octune tune`, `best` and `workloads`: tune kernels for workloads on one device, show the
best stored config, write a network's workloads file.
"""

from __future__ import annotations

import json
import secrets
from collections import Counter
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
from rich.markup import escape
from rich.table import Table

from octune.cli.labels import fitted_table
from octune.cli.options import (
    BatchOption,
    DbOption,
    DeviceOption,
    DimOption,
    DtypeOption,
    JsonOption,
    KernelArgument,
    ObjectiveOption,
    checked_dtype,
    json_on_stdout,
    open_store,
    write_json,
)
from octune.cli.shape_options import shape_of
from octune.core.console import console
from octune.core.errors import CheckError, OctuneError
from octune.core.precision import DTYPES
from octune.tuner.strategies import available_strategies

#: Seconds a workload's first turn should have at least: below it `tune` warns the time budget
#: is thin.
THIN_SECONDS = 10

if TYPE_CHECKING:
    from octune.catalogue.family import Workload
    from octune.catalogue.registry import KernelSpec
    from octune.core.results import BestResult, Objective
    from octune.db.store import Store
    from octune.tuner.campaign import Task
    from octune.tuner.device import DeviceInfo
    from octune.tuner.session import Budget, SessionReport, Settings


def tune(
    ctx: typer.Context,
    kernel_name: Annotated[
        str | None,
        typer.Argument(help="a family (all its kernels), e.g. gemm, conv2d; or one kernel"),
    ] = None,
    workloads: Annotated[
        Path | None,
        typer.Option(help="YAML list of workloads sharing the budget, instead of one workload"),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="an .onnx file or a built-in network, e.g. resnet50: tune its Conv, Gemm and "
            "MatMul layers, the budget shared by their estimated share of its time"
        ),
    ] = None,
    batch: BatchOption = None,
    dim: DimOption = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            help=f"element type: {', '.join(DTYPES)} (numpy's names); default: float32, or "
            "a --model's own (a float16 file tunes its layers in float16)"
        ),
    ] = None,
    device: DeviceOption = None,
    strategy: Annotated[
        str, typer.Option(help=f"search strategy: {', '.join(available_strategies())}")
    ] = "model",
    budget: Annotated[
        int | None, typer.Option(help="stop after this many candidates (in all)")
    ] = None,
    time_budget: Annotated[
        str | None, typer.Option("--time", help="stop after this long in all, e.g. 30m or 8h")
    ] = None,
    patience: Annotated[
        int | None, typer.Option(help="stop a workload after this many candidates without gain")
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            help="build processes (default: one per core on GPUs, 0 on CPUs: build inline)"
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(help="seconds a candidate may run (default: from the workload size)"),
    ] = None,
    confirm: Annotated[
        int,
        typer.Option(
            help="re-measure up to this many top candidates at the end (those not confirmed "
            "yet, within 1.25 x the best)"
        ),
    ] = 3,
    objective: ObjectiveOption = "time",
    energy: Annotated[
        bool | None,
        typer.Option(
            "--energy/--no-energy",
            help="record joules and watts per candidate (default: only for energy objectives)",
        ),
    ] = None,
    resume: Annotated[
        bool, typer.Option(help="count stored measurements against --budget: finish a run")
    ] = False,
    all_kernels: Annotated[
        bool,
        typer.Option(
            "--all-kernels",
            help="tune every kernel of a family, also those written for other device types",
        ),
    ] = False,
    seed: Annotated[int | None, typer.Option(help="seed of the strategy and the inputs")] = None,
    summary: Annotated[
        Path | None,
        typer.Option(help="also write the per-workload summary to this JSON file (- for stdout)"),
    ] = None,
    upload: Annotated[
        str | None,
        typer.Option(help="config server to send each session to, e.g. http://host:8000"),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(envvar="OCTUNE_TOKEN", help="write token for --upload ($OCTUNE_TOKEN)"),
    ] = None,
    db: DbOption = None,
) -> None:
    """Tune kernels on one device; every candidate is verified and stored as it is measured."""
    from octune.tuner.campaign import extension_notes, for_device
    from octune.tuner.device import DeviceInfo, require_compiling, select_device
    from octune.tuner.energy import sensor_for
    from octune.tuner.session import MAX_SEED, Budget, Settings, check_seed, parse_duration
    from octune.tuner.strategies.base import get_strategy
    from octune.tuner.workers import default_jobs

    json_on_stdout(summary)

    if upload is not None and not token:
        raise OctuneError("--upload needs a write token: pass --token or set OCTUNE_TOKEN")
    check_seed(seed)
    get_strategy(strategy)  # a misspelt strategy is a one-line error before any work
    stray = kernel_name if kernel_name and kernel_name.startswith("-") else None
    if stray or (kernel_name is None and ctx.args):  # shape options follow a kernel's name only
        raise OctuneError(
            f"octune tune has no option {stray or ctx.args[0]}: see `octune tune --help` (-q "
            "and -v go before the command: octune -q tune ...)"
        )
    if model is not None:
        if kernel_name is not None or workloads is not None:
            raise OctuneError("give one of --model, --workloads FILE, or a kernel and its shape")
        tasks, network = _model_tasks(model, batch, dim, checked_dtype(dtype) if dtype else None)
    elif batch is not None or dim:
        raise OctuneError("--batch and --dim size the dynamic dimensions of a --model: add one")
    else:
        tasks, network = _tasks(kernel_name, ctx, workloads, dtype and checked_dtype(dtype)), None
    total = Budget(
        candidates=budget,
        seconds=parse_duration(time_budget) if time_budget else None,
        patience=patience,
    )
    cl_device = select_device(device)
    require_compiling(cl_device)
    info = DeviceInfo.from_cl(cl_device)
    wants_energy = objective != "time" if energy is None else energy or objective != "time"
    if wants_energy and sensor_for(cl_device) is None:
        raise OctuneError(
            f"{'--energy' if objective == 'time' else f'objective {objective!r}'} needs an "
            f"energy sensor, and none can be read for {info.name} (NVML on NVIDIA GPUs, RAPL "
            "under /sys/class/powercap on CPUs): use --objective time without --energy"
        )
    settings = Settings(
        jobs=default_jobs(cl_device) if jobs is None else jobs,
        timeout=timeout,
        confirm=confirm,
        objective=objective,
        energy=wants_energy,
        resume=resume,
    )
    store = open_store(db)
    if network is not None:  # its dashboard page and report need no file (db.networks)
        store.save_network(**network)
        if upload is not None:
            _upload_network(network, upload, cast(str, token))
    if not all_kernels:
        tasks, left_out = for_device(tasks, info.device_type)
        if left_out:
            console.print(
                f"Leaving out {', '.join(left_out)}: written for other devices than this "
                f"{info.device_type} (--all-kernels tunes them too)"
            )
    for note in extension_notes(tasks, f"{info.name} ({info.platform_name})", info.limits):
        console.print(note, markup=False)
    total = _announce(tasks, total, info.name, strategy, settings, store.url)
    # One seed for the run's sessions (each records it): a workload's kernels then bind the
    # same inputs, which the measuring process keeps (``OperandMemo``) instead of drawing them
    # and their reference again for every kernel.
    seed = secrets.randbelow(MAX_SEED) if seed is None else seed
    rows, interrupted = _run(tasks, total, store, info, settings, strategy, seed, upload, token)
    _close(tasks, rows, interrupted, store, info, objective, summary)


def _announce(
    tasks: list[Task], total: Budget, device: str, strategy: str, settings: Settings, url: str
) -> Budget:
    """The run's budget (the default where none was given), said before it starts, with a
    warning where it leaves the workloads only seconds each.
    """
    from octune.tuner.campaign import DEFAULT_CANDIDATES

    default = total.candidates is None and total.seconds is None
    if default:
        total = replace(total, candidates=DEFAULT_CANDIDATES * len(tasks))
    builds = f"{settings.jobs} build processes" if settings.jobs else "builds inline"
    console.print(
        f"Tuning {len(tasks)} workload(s) on [bold]{device}[/] with {strategy}; budget "
        f"{total.describe()}"
        + (" (the default: --budget or --time sets it)" if default else "")
        + f"; {builds}; database {url}"
    )
    if total.seconds is not None and total.seconds / len(tasks) < THIN_SECONDS:
        console.print(
            f"[yellow]{total.seconds:,.0f} s over {len(tasks)} workloads is about "
            f"{total.seconds / len(tasks):.1f} s each: the smallest may get no candidate "
            f"measured[/] (give --time {THIN_SECONDS * len(tasks) / 60:.0f}m or more)"
        )
    return total


def _run(
    tasks: list[Task],
    total: Budget,
    store: Store,
    info: DeviceInfo,
    settings: Settings,
    strategy: str,
    seed: int | None,
    upload: str | None,
    token: str | None,
) -> tuple[dict[int, dict[str, object]], bool]:
    """The campaign, a turn at a time: each task's summary row (both turns counted), keyed
    by the task's id, and whether the run was interrupted.
    """
    from octune.tuner.campaign import tune_in_turn, tune_one

    rows: dict[int, dict[str, object]] = {}  # a task's latest turn
    interrupted = False
    turns = tune_in_turn(
        tasks,
        total,
        lambda task, part, workers, turn_settings, place: tune_one(
            store, info, task, strategy, part, turn_settings, seed, workers, place=place
        ),
        device=info,
        settings=settings,
    )
    with closing(turns):
        for turn in turns:
            if turn.failure is not None:
                message = (
                    f"[yellow]{escape(str(turn.failure))}[/] Going on with the rest of the run."
                )
                console.print(message, soft_wrap=True)
            if upload is not None and token is not None:
                _upload(store, turn.report, upload, token)
            row = _summary_row(store, info, turn.task, turn.report, settings.objective)
            earlier = rows.get(id(turn.task))
            if earlier is not None:  # a second turn: what both measured now
                row["tried_now"] = cast(int, earlier["tried_now"]) + turn.report.progress.tried
                failures = Counter(cast(dict[str, int], earlier["failures_now"]))
                failures.update(turn.report.progress.failures)
                row["failures_now"] = dict(failures)
            rows[id(turn.task)] = row
            interrupted = turn.report.interrupted
    return rows, interrupted


def _close(
    tasks: list[Task],
    rows: dict[int, dict[str, object]],
    interrupted: bool,
    store: Store,
    info: DeviceInfo,
    objective: Objective,
    summary: Path | None,
) -> None:
    """What the run did: the workloads left without a turn, the summary table (and file),
    those without a verified config; exit 130 when interrupted, an error when none verified.
    """
    from octune.tuner.campaign import unverified

    starved = list(dict.fromkeys(task.label for task in tasks if id(task) not in rows))
    if starved and not interrupted:  # the turns stopped: the budget ran out
        console.print(
            f"Budget spent before {len(starved)} workload(s) got a turn (the smallest by "
            "estimated time); lookups answer them from the nearest tuned shape or the "
            f"default: {'; '.join(starved)}",
            markup=False,
            soft_wrap=True,
        )
    ran = [task for task in tasks if id(task) in rows]
    _print_summary([rows[id(task)] for task in ran], objective)
    if summary is not None:
        write_json(summary, json.dumps([rows[id(task)] for task in ran], indent=2))
    missing, workloads_tuned = unverified(store, info, ran)
    if workloads_tuned > 1:
        for label, why in missing:
            console.print(
                f"no verified config for {label}: {why}; lookups answer it from the nearest "
                "tuned shape or the default",
                markup=False,
                soft_wrap=True,  # one line each, for scripts too
            )
    if interrupted:
        console.print(
            "Interrupted: every measurement taken so far is stored. Resume with the same "
            "command and --resume."
        )
        raise typer.Exit(130)
    if workloads_tuned and len(missing) == workloads_tuned:
        label, why = missing[0]
        problem = (
            f"no verified config for {label}: {why}"
            if workloads_tuned == 1
            else f"none of the {workloads_tuned} workloads got a verified config (listed above)"
        )
        raise CheckError(f"{problem}; see `octune devices` for whether this device compiles")


def _tasks(
    kernel_name: str | None, ctx: typer.Context, workloads: Path | None, dtype: str | None
) -> list[Task]:
    from octune.catalogue.registry import resolve_kernels
    from octune.tuner.campaign import load_tasks, tasks_for

    if workloads is not None:
        if kernel_name is not None or ctx.args:  # shape options come after a kernel
            raise OctuneError("give either --workloads FILE or a kernel and its shape, not both")
        if dtype is not None:
            raise OctuneError("a workloads file says each workload's dtype: leave out --dtype")
        return load_tasks(workloads)
    if kernel_name is None:
        raise OctuneError(
            "say what to tune: `octune tune gemm --m M --n N --k K` or `--workloads FILE.yaml`"
        )
    family = resolve_kernels(kernel_name)[0].family  # an unknown name: says which are known
    return tasks_for(kernel_name, shape_of(ctx, family.name), dtype or "float32")


def _model_tasks(
    source: str, batch: int | None, dims: list[str] | None, dtype: str | None
) -> tuple[list[Task], dict[str, Any]]:
    """The network's layers as tasks, and the record of it the database keeps."""
    from octune.networks.workloads import (
        describe,
        network_model,
        network_record,
        network_tasks,
        parse_dims,
    )

    model, layers, untuned = network_model(source, batch, parse_dims(dims or []))
    console.print(describe(source, layers, untuned))
    return network_tasks(layers, dtype), network_record(source, batch, model, layers, untuned)


_KEPT_NOT_ANSWERING = (
    "; kept, but a write token's uploads answer no lookup: upload with a token made with "
    "`octune token create --scope trusted` to have them answer"
)


def _upload(store: Store, report: SessionReport, url: str, token: str) -> None:
    """Send the sessions to a config server. A failure ends nothing: the results stay in the
    local database, and since uploads are idempotent a later upload of the same session
    (`OctuneClient.upload_session`) stores each measurement once.
    """
    from octune.api.client import OctuneClient  # the server's schemas load only when asked

    try:
        with OctuneClient(url, token=token) as client:
            for session_id in report.session_ids:
                sent = client.upload_session(store, session_id)
                console.print(
                    f"Uploaded session {session_id} to {url}: {sent.added} new, "
                    f"{sent.already_stored} already there"
                    + ("" if sent.answers else _KEPT_NOT_ANSWERING)
                )
    except OctuneError as error:
        console.print(f"[yellow]Upload to {url} failed, results kept locally:[/] {error}")


def _upload_network(network: dict[str, Any], url: str, token: str) -> None:
    """The network's layers for the server's dashboard; a failure ends nothing."""
    from octune.api.client import OctuneClient

    try:
        with OctuneClient(url, token=token) as client:
            client.upload_network(network)
    except OctuneError as error:
        console.print(f"[yellow]Sending the network's layers to {url} failed:[/] {error}")


def _summary_row(
    store: Store, info: DeviceInfo, task: Task, report: SessionReport, objective: Objective
) -> dict[str, object]:
    """One workload's line of the summary, read back from the database."""
    workload = task.workload
    found = store.best(
        info.fingerprint, task.kernel.name, workload.key, task.kernel.sha256, objective
    )
    progress = report.progress
    failures = (
        None
        if found
        else store.failures(info.fingerprint, task.kernel.name, workload.key, task.kernel.sha256)
    )
    return {
        "workload": str(workload),
        "kernel": task.kernel.name,
        "key": workload.key,
        "best_gflops": found.gflops if found else None,
        "stored_candidates": found.measured
        if found
        else progress.already_measured + progress.tried,
        "tried_now": progress.tried,
        "failures_now": dict(progress.failures),
        "within_noise": report.within_noise,
        "all_failed": str(failures) if failures else None,
    }


def _print_summary(rows: list[dict[str, object]], objective: str) -> None:
    noted = any(row["within_noise"] for row in rows)
    columns = {"workload": True, "kernel": True, "GFLOP/s": True, "tried": True,
               "stored": False, "failed now": True, "note": noted}  # fmt: skip
    table = fitted_table(
        console, f"Summary (best by {objective})", columns,
        numeric=("GFLOP/s", "tried", "stored"), whole=("kernel",),
    )  # fmt: skip
    shown = [column.header for column in table.columns]
    for row in rows:
        gflops = row["best_gflops"]
        failures = row["failures_now"]
        assert isinstance(failures, dict)
        cells = {
            "workload": str(row["workload"]),
            "kernel": str(row["kernel"]),
            "GFLOP/s": f"{gflops:,.1f}" if isinstance(gflops, float) else "-",
            "tried": str(row["tried_now"]),
            "stored": str(row["stored_candidates"]),
            "failed now": ", ".join(f"{n} {status}" for status, n in failures.items()) or "-",
            "note": "top within noise" if row["within_noise"] else "",
        }
        table.add_row(*(cells[column] for column in shown))
    console.print(table)


def _best_payload(
    best: BestResult, kernel: KernelSpec, workload: Workload, info: DeviceInfo
) -> dict[str, object]:
    shape = workload.shape_vars()
    entry, *then = kernel.space.launches(best.config, shape, info.limits)
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
        "global_size": list(entry.global_size),
        "local_size": list(entry.local_size),
        "then": [
            {
                "entry": step.entry,
                "global_size": list(step.global_size),
                "local_size": list(step.local_size),
            }
            for step in then
        ],
        "workspace_bytes": 4 * kernel.space.workspace_elements(best.config, shape, info.limits),
        "median_s": best.median_s,
        "spread_s": best.spread_s,
        "gflops": best.gflops,
        "measured": best.measured,
        "failed": best.failed,
        "measured_at": best.measured_at.isoformat(),
    }


def best(
    ctx: typer.Context,
    kernel_name: KernelArgument,
    device: DeviceOption = None,
    db: DbOption = None,
    objective: ObjectiveOption = "time",
    dtype: DtypeOption = "float32",
    as_json: JsonOption = False,
) -> None:
    """Show the fastest verified config stored for a workload on a device: of a family, the
    fastest kernel (algorithm) and its config, as cuDNN's find answers.
    """
    from octune.catalogue.family import host_timing
    from octune.tuner.device import DeviceInfo, select_device

    tasks = _tasks(kernel_name, ctx, None, checked_dtype(dtype))
    workload = tasks[0].workload
    info = DeviceInfo.from_cl(select_device(device))
    store = open_store(db)
    found = [
        (result, task.kernel)
        for task in tasks
        if (result := store.best(info.fingerprint, task.kernel.name, workload.key,
                                 task.kernel.sha256, objective)) is not None
    ]  # fmt: skip
    if not found:
        raise OctuneError(_why_none(store, info, tasks, objective, kernel_name))
    result, kernel = min(found, key=lambda pair: pair[0].median_s)
    payload = _best_payload(result, kernel, workload, info)
    baseline = workload.family.host_baseline(workload)
    if info.device_type == "cpu" and baseline is not None:  # the same processor, two ways
        median, first, third = host_timing(baseline)
        payload["host_numpy_gflops"] = workload.flops / median / 1e9
        # The quartiles of its time, as GFLOP/s: the slower quarter's and the faster one's.
        payload["host_numpy_gflops_quartiles"] = [workload.flops / t / 1e9 for t in (third, first)]
    if as_json:
        print(json.dumps(payload, indent=2))
        return
    table = Table(title=f"Best {kernel.name} for {workload} on {info.name}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    table.add_row("GFLOP/s", f"{result.gflops:,.1f}" if result.gflops else "-")
    table.add_row(
        "median time", f"{result.median_s * 1e3:.4f} ms (IQR {result.spread_s * 1e3:.4f} ms)"
    )
    table.add_row("build options", str(payload["build_options"]))
    table.add_row("global / local", f"{payload['global_size']} / {payload['local_size']}")
    for step in kernel.space.launches(result.config, workload.shape_vars(), info.limits)[1:]:
        table.add_row(f"then {step.entry}", f"{list(step.global_size)} / {list(step.local_size)}")
    if payload["workspace_bytes"]:
        table.add_row("workspace", f"{payload['workspace_bytes']:,} bytes, last argument")
    if "host_numpy_gflops" in payload:
        host = cast(float, payload["host_numpy_gflops"])
        low, high = cast(list[float], payload["host_numpy_gflops_quartiles"])
        ratio = (result.gflops or 0.0) / host
        numpy = "NumPy on this host" + ("" if workload.dtype == "float32" else " (float32)")
        table.add_row(numpy, f"{host:,.1f} GFLOP/s, quartiles {low:,.1f}-{high:,.1f} (octune's "
                      f"config: {ratio:.2f} x the median)")  # fmt: skip
    table.add_row("kernel version", f"{result.kernel_sha256[:16]}")
    table.add_row("candidates", f"{result.measured} measured, {result.failed} failed")
    table.add_row("measured at", str(payload["measured_at"]))
    if len(tasks) > 1:
        others = ", ".join(
            f"{k.name} {r.median_s * 1e3:.4f} ms" for r, k in found if k is not kernel
        )
        table.add_row("other kernels", others or "none tuned")
    console.print(table)


def _why_none(
    store: Store,
    info: DeviceInfo,
    tasks: list[Task],
    objective: str,
    kernel_name: str,
) -> str:
    """Why no config can be shown: all failed, no energy readings, an older version, or none."""
    workload = tasks[0].workload
    for task in tasks:
        kernel = task.kernel
        failures = store.failures(info.fingerprint, kernel.name, workload.key, kernel.sha256)
        if failures:
            return (
                f"no verified config for {kernel.name} {workload} on {info.name}: {failures}; "
                "see `octune devices` for whether this device compiles"
            )
    if objective != "time":
        return (
            f"no verified config with energy readings stored for {kernel_name} {workload} on "
            f"{info.name}: tune it with --objective {objective} or --energy first"
        )
    shape = " ".join(f"--{key} {value}" for key, value in workload.shape.items())
    command = f"octune tune {kernel_name} {shape}"
    for task in tasks:
        kernel = task.kernel
        older = store.best(info.fingerprint, kernel.name, workload.key)
        if older is not None:
            return (
                f"only configs of an older {kernel.name} version ({older.kernel_sha256[:12]}) "
                f"are stored for {workload} on {info.name}, and a config is only valid for the "
                f"source it was tuned with, in {store.url}: run `{command}` first"
            )
    return (
        f"no verified config stored for {kernel_name} {workload} on {info.name} in "
        f"{store.url}: run `{command}` first"
    )


workloads_app = typer.Typer(
    help="Workloads files for `octune tune --workloads`.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@workloads_app.command("from-onnx")
def from_onnx(
    model: Annotated[str, typer.Argument(help="an .onnx file or a built-in network name")],
    batch: BatchOption = None,
    dim: DimOption = None,
    out: Annotated[
        Path | None, typer.Option(help="write the workloads file here, not to stdout")
    ] = None,
) -> None:
    """A network's Conv, Gemm and MatMul layers as a workloads file, weighted by their time."""
    from octune.networks.workloads import describe, network_layers, parse_dims, workloads_yaml

    layers, untuned = network_layers(model, batch, parse_dims(dim or []))
    text = workloads_yaml(model, layers, untuned)
    if out is None:
        print(text, end="")
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as error:
        raise OctuneError(f"cannot write {out}: {error.strerror}") from None
    console.print(f"Wrote {out}: {describe(model, layers, untuned)}")
