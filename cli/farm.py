"""`octune jobs submit|list|show|cancel` and `octune agent`, registered into the main app."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from octune.cli.options import JsonOption
from octune.core.console import console
from octune.core.errors import OctuneError

jobs_app = typer.Typer(
    help="Tuning jobs for a farm of agents: submit, follow, cancel.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

ServerOption = Annotated[
    str,
    typer.Option(
        "--server", envvar="OCTUNE_SERVER", help="the config server, e.g. http://host:8000"
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(envvar="OCTUNE_TOKEN", help="API token ($OCTUNE_TOKEN); a write token to change"),
]


def _client(server: str, token: str | None, *, write: bool) -> Any:
    from octune.api.client import OctuneClient  # the server's schemas load only when asked

    if write and not token:
        raise OctuneError(
            "this needs a write token: pass --token or set OCTUNE_TOKEN (make one with "
            "`octune token create --scope trusted` on the server; a write token's results "
            "answer no lookup)"
        )
    return OctuneClient(server, token=token)


def _read_workloads(path: Path) -> list[Any]:
    """The file's entries, after checking them as `octune tune --workloads` does."""
    from octune.tuner.campaign import load_tasks

    load_tasks(path)
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))["workloads"]


@jobs_app.command("submit")
def submit(
    devices: Annotated[
        str,
        typer.Option(
            help="a device fingerprint, or a glob over its name or driver, e.g. 'Mali-G78*'"
        ),
    ],
    server: ServerOption,
    model: Annotated[str | None, typer.Option(help="a built-in network, e.g. resnet50")] = None,
    batch: Annotated[int | None, typer.Option(help="the network's batch size")] = None,
    workloads: Annotated[
        Path | None, typer.Option(help="a workloads file, as `octune tune --workloads` reads")
    ] = None,
    time_budget: Annotated[
        str | None, typer.Option("--time", help="tuning time per device, e.g. 8h")
    ] = None,
    budget: Annotated[int | None, typer.Option(help="candidates per device, in all")] = None,
    strategy: Annotated[str, typer.Option(help="search strategy")] = "model",
    attempts: Annotated[
        int, typer.Option(help="attempts (crashed or killed agents) before a job fails")
    ] = 3,
    wait_for_device: Annotated[
        bool,
        typer.Option(help="keep the submission waiting when no known device matches yet"),
    ] = False,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """One job per matching device; devices that register later get theirs too."""
    from octune.tuner.session import parse_duration

    if (model is None) == (workloads is None):
        raise OctuneError("give what to tune: --model NAME or --workloads FILE.yaml (one)")
    if time_budget is None and budget is None:
        raise OctuneError("give how long: --time DURATION or --budget N (or both); a job without "
                          "either never ends")  # fmt: skip
    body: dict[str, Any] = {
        "devices": devices,
        "strategy": strategy,
        "max_attempts": attempts,
        "wait_for_device": wait_for_device,
        "time_s": parse_duration(time_budget) if time_budget else None,
        "budget": budget,
    }
    if model is not None:
        body.update(model=model, batch=batch)
    else:
        assert workloads is not None
        body["workloads"] = _read_workloads(workloads)
    with _client(server, token, write=True) as client:
        done = client.submit_job(body)
    if as_json:
        print(done.model_dump_json(indent=2))
        return
    if done.waiting:
        console.print(
            f"Submission {done.submission_id}: no device matches '{devices}' yet; a job starts "
            "when an agent registers one"
        )
        return
    console.print(f"Submission {done.submission_id}: {len(done.jobs)} job(s)")
    _print_jobs(done.jobs)


@jobs_app.command("list")
def list_jobs(
    server: ServerOption,
    status: Annotated[
        str | None, typer.Option(help="queued, running, completed, failed or cancelled")
    ] = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Jobs, newest first, with their progress, and the agents online."""
    with _client(server, token, write=False) as client:
        jobs = client.jobs(status)
        agents = client.agents()
    if as_json:
        print(json.dumps([job.model_dump(mode="json") for job in jobs], indent=2))
        return
    _print_jobs(jobs)
    online = [agent for agent in agents if agent.online]
    console.print(
        f"{len(online)} agent(s) online: "
        + (", ".join(f"{a.name} ({len(a.devices)} device(s))" for a in online) or "none")
    )


@jobs_app.command("show")
def show(
    job_id: Annotated[int, typer.Argument(help="a job id from `octune jobs list`")],
    server: ServerOption,
    token: TokenOption = None,
) -> None:
    """A job's progress and, if it failed, why."""
    with _client(server, token, write=False) as client:
        job = client.job(job_id)
    print(job.model_dump_json(indent=2))


@jobs_app.command("cancel")
def cancel(
    server: ServerOption,
    job_ids: Annotated[list[int] | None, typer.Argument(help="job ids")] = None,
    submission: Annotated[
        int | None, typer.Option(help="cancel all jobs of this submission, and close it")
    ] = None,
    token: TokenOption = None,
) -> None:
    """Cancel jobs: their agents stop at the next measurement; what was measured stays."""
    if not job_ids and submission is None:
        raise OctuneError("say what to cancel: job ids, or --submission ID")
    with _client(server, token, write=True) as client:
        cancelled = [client.cancel_job(job_id) for job_id in job_ids or ()]
        if submission is not None:
            cancelled += client.cancel_submission(submission)
    _print_jobs(cancelled)


def _print_jobs(jobs: list[Any]) -> None:
    from octune.api.job_spec import spec_label

    table = Table(title="Jobs")
    for column in ("job", "device", "what", "status", "agent", "candidates", "best GFLOP/s",
                   "time left", "failures", "reason"):  # fmt: skip
        table.add_column(column)
    for job in jobs:
        left = job.time_left_s
        table.add_row(
            str(job.id),
            job.device_name,
            spec_label(job.spec),
            job.status,
            job.agent or "-",
            str(job.candidates),
            f"{job.best_gflops:,.1f}" if job.best_gflops is not None else "-",
            f"{left / 60:.1f} min" if left is not None else "-",
            f"{job.failures}/{job.max_attempts}",
            job.reason or "",
        )
    console.print(table)


def agent(
    server: ServerOption,
    token: TokenOption = None,
    device: Annotated[
        list[str] | None,
        typer.Option(
            "--device",
            "-d",
            help="a device to drive (index, fingerprint or name); repeatable [default: every "
            "device that compiles]",
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="the agent's name [default: host name]")] = None,
    workdir: Annotated[
        Path | None, typer.Option(help="scratch databases of the jobs [default: a temp dir]")
    ] = None,
    poll: Annotated[float, typer.Option(help="seconds between leases while idle", min=0.1)] = 5.0,
    exit_when_idle: Annotated[
        bool, typer.Option(help="stop once no job waits for a device (scripts, CI)")
    ] = False,
) -> None:
    """Lease jobs for this machine's devices from a server and tune them, one per device."""
    import tempfile

    from octune.farm.agent import run_agent
    from octune.tuner.device import compiling_devices, describe, select_device

    if device:
        chosen = [select_device(choice) for choice in device]
    else:  # every device that compiles: Intel's CPU runtime beside a PoCL that cannot, say
        chosen, left_out = compiling_devices()
        for skipped, check in left_out:
            print(f"agent: leaving out {describe(skipped)}: {check.reason}", file=sys.stderr)
    with _client(server, token, write=True) as client:
        run_agent(
            client, chosen, name=name, poll_s=poll, exit_when_idle=exit_when_idle,
            workdir=workdir or Path(tempfile.gettempdir()) / "octune-agent",
        )  # fmt: skip
    print("agent: no job waits: done", file=sys.stderr)
