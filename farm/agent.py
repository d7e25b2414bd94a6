"""`octune agent`: lease a job for each of this machine's devices, tune it as `octune tune
--resume` would, upload every measurement as it is taken, and lease the next.

A job is tuned in a scratch SQLite database seeded with what earlier leases of it uploaded,
so a job whose agent died resumes where its uploads stopped: the session skips those configs
and counts them against the budget, and the time they took (the job's ``tried_s``) is taken
off the time budget. Uploads are named by (job, lease, session) on the server, so sending one
again stores nothing twice; one that cannot reach the server stays pending and goes with the
next. A heartbeat thread renews the lease; when the server says the agent no longer holds the
job (cancelled, or its lease expired and went to another agent), the session stops at its
next measurement and the agent leases again.
"""

from __future__ import annotations

import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyopencl as cl
import tenacity

from octune.api.client import ClientError, OctuneClient, session_body
from octune.api.job_spec import spec_label, spec_tasks
from octune.api.schemas import DoneSessionOut, JobOut, LeaseOut, MeasurementIn
from octune.core.errors import OctuneError
from octune.core.results import Measurement
from octune.db.store import Store
from octune.tuner.campaign import Task, for_device, tune_in_turn, tune_one, unverified
from octune.tuner.device import DeviceInfo, require_compiling
from octune.tuner.session import Budget, Settings
from octune.tuner.tuning_store import record_session
from octune.tuner.workers import default_jobs

#: Seconds between retries of a call that could not reach the server.
RETRY_S = 1.0


class JobDropped(OctuneError):
    """The agent no longer holds the job: stop tuning it (raised from inside the session)."""


def log(message: str) -> None:
    print(f"agent: {message}", file=sys.stderr, flush=True)


@dataclass
class Held:
    """A job this agent holds, and what it has sent of it."""

    client: OctuneClient
    agent_id: int
    job: JobOut
    store: Store
    started: float = field(default_factory=time.monotonic)
    dropped: str | None = None  # why the server says the agent no longer holds the job
    pending: dict[int, list[Measurement]] = field(default_factory=dict)
    records: dict[int, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def held(self) -> dict[str, Any]:
        """The lease a call is made under, with the tuning time spent so far."""
        tried = self.job.tried_s + time.monotonic() - self.started
        return {"agent_id": self.agent_id, "epoch": self.job.lease_epoch, "tried_s": tried}

    def call(self, what: Callable[[], Any]) -> Any:
        """A call under the lease: a 409 or 404 means the job is no longer this agent's."""
        try:
            return what()
        except ClientError as error:
            if error.status in (404, 409):
                self.dropped = str(error)
                raise JobDropped(str(error)) from error
            raise

    def on_measurement(self, session_id: int, measurement: Measurement) -> None:
        """The session's hook: queue the measurement and send what is queued, once; a server
        that cannot be reached gets it with the next one.
        """
        if self.dropped is not None:
            raise JobDropped(self.dropped)
        with self.lock:
            self.pending.setdefault(session_id, []).append(measurement)
        try:
            self.send()
        except ClientError as error:
            if error.status is not None:
                raise
            log(f"job {self.job.id}: upload waits for the server: {error}")

    def send(self, *, final: bool = False) -> None:
        """Send every queued measurement; ``final`` also sends each session's last status."""
        with self.lock:
            sessions = list(self.pending) if not final else list(self.records)
            for session_id in sessions:
                measurements = self.pending.get(session_id, [])
                if not measurements and not final:
                    continue
                record = self.records.get(session_id)
                if record is None:
                    record = self.store.session_record(session_id)
                    assert record is not None, f"session {session_id} is not stored"
                    self.records[session_id] = record
                status = "running"
                if final:  # read again: the record was read while the session ran
                    status = self.store.session_status(session_id)
                body = {
                    **session_body(
                        record,
                        [MeasurementIn.of(m).model_dump(mode="json") for m in measurements],
                        status,
                    ),
                    **self.held(),
                    "session_key": session_id,
                }
                self.call(lambda b=body: self.client.upload_job_measurements(self.job.id, b))
                self.pending.pop(session_id, None)

    def heartbeats(self, stop: threading.Event, every_s: float) -> None:
        """Renew the lease until ``stop``; a server that cannot be reached is tried again."""
        while not stop.wait(every_s):
            try:
                self.call(lambda: self.client.heartbeat(self.job.id, self.held()))
            except JobDropped as dropped:
                log(f"job {self.job.id}: dropped: {dropped}")
                return
            except ClientError as error:
                log(f"job {self.job.id}: heartbeat failed, trying again: {error}")


def _unreachable(error: BaseException) -> bool:
    """A server that did not answer at all (a restart), not one that said no."""
    return isinstance(error, ClientError) and error.status is None


def retrying(what: Callable[[], Any], stop: threading.Event) -> Any:
    """``what()``, again every RETRY_S while the server cannot be reached (a restart), until
    ``stop``; a server's answer, even an error, is final.
    """
    attempts = tenacity.Retrying(
        retry=tenacity.retry_if_exception(_unreachable),
        wait=tenacity.wait_fixed(RETRY_S),
        stop=lambda _state: stop.is_set(),
        sleep=stop.wait,  # a stop wakes it at once
        before_sleep=lambda state: log(f"waiting for the server: {state.outcome.exception()}"),
        reraise=True,
    )
    return attempts(what)


def seed(store: Store, info: DeviceInfo, tasks: list[Task], done: list[DoneSessionOut]) -> int:
    """Store what earlier leases uploaded, as sessions of their own, so the tuning session
    skips those configs as `--resume` skips a killed run's. Sessions of another kernel
    version than this agent's are left out: its configs were not tuned for this source.
    """
    by_version = {(task.kernel.sha256, task.workload.key): task for task in tasks}
    device_id = store.device_id(info)
    seeded = 0
    for session in done:
        task = by_version.get((session.kernel_sha256, session.workload_key))
        if task is not None:
            seeded += record_session(
                store, device_id, task.kernel, task.workload,
                [m.measurement() for m in session.measurements],
                strategy=session.strategy, seed=None, settings={"uploaded": True},
            )  # fmt: skip
    return seeded


def tune_job(held: Held, device: cl.Device, info: DeviceInfo, tasks: list[Task]) -> None:
    """The job's workloads in turn, each with its share of what is left of the budget, as
    `octune tune --resume` shares it; raises OctuneError when no workload got a verified
    config (the device cannot run them).
    """
    job = held.job
    seconds = None
    if job.budget_seconds is not None:
        seconds = max(job.budget_seconds - job.tried_s, 0.0)
        if seconds <= 0:
            return  # spent by earlier leases
    settings = Settings(jobs=default_jobs(device), resume=True)
    tasks, left_out = for_device(tasks, info.device_type)
    if left_out:
        log(f"job {job.id}: leaving out {', '.join(left_out)}, written for other devices")
    turns = tune_in_turn(
        tasks,
        Budget(candidates=job.budget_candidates, seconds=seconds),
        lambda task, part, workers, turn_settings, place: tune_one(
            held.store,
            info,
            task,
            job.strategy,
            part,
            turn_settings,
            None,
            workers,
            held.on_measurement,
            place=place,
        ),
        device=info,
        settings=settings,
        count_earlier_time=False,  # earlier leases' time is off the budget already (tried_s)
    )
    for turn in turns:
        if turn.failure is not None:
            log(f"job {job.id}: {turn.failure}; going on with the rest")
    missing, tuned = unverified(held.store, info, tasks)
    if tuned and len(missing) == tuned:
        label, why = missing[0]
        raise OctuneError(f"no workload got a verified config on {info.name} ({label}: {why})")


def run_job(
    client: OctuneClient, agent_id: int, granted: LeaseOut, device: cl.Device, workdir: Path,
    stop: threading.Event,
) -> None:  # fmt: skip
    """Tune a leased job and finish it: completed, or failed with the reason (the server
    queues it again while attempts are left).
    """
    job = granted.job
    assert job is not None
    info = DeviceInfo.from_cl(device)
    with tempfile.TemporaryDirectory(dir=workdir, prefix=f"job-{job.id}-") as scratch:
        store = Store(f"sqlite:///{Path(scratch) / 'job.db'}")
        held = Held(client, agent_id, job, store)
        beating = threading.Event()
        beat = threading.Thread(
            target=held.heartbeats, args=(beating, granted.lease_s / 3), daemon=True
        )
        beat.start()
        error: str | None = None
        try:
            tasks = spec_tasks(job.spec)
            resumed = seed(store, info, tasks, granted.done)
            log(
                f"job {job.id}: {spec_label(job.spec)} on {info.name}, lease {job.lease_epoch}"
                + (f", resuming after {resumed} uploaded measurements" if resumed else "")
            )
            tune_job(held, device, info, tasks)
        except JobDropped as dropped:
            log(f"job {job.id}: dropped: {dropped}")
            beating.set()
            store.close()
            return
        except OctuneError as failure:
            error = str(failure)
        except Exception as failure:  # a bug here must not end the agent: the job says why
            error = f"{type(failure).__name__}: {failure}"
        finally:
            beating.set()
        try:
            retrying(lambda: held.send(final=True), stop)
            retrying(lambda: held.call(lambda: client.finish_job(job.id, held.held(), error)), stop)
        except JobDropped as dropped:
            log(f"job {job.id}: dropped: {dropped}")
            return
        finally:
            store.close()
        log(f"job {job.id}: " + (f"failed: {error}" if error else "completed"))


def device_loop(
    client: OctuneClient, agent_id: int, device: cl.Device, workdir: Path, poll_s: float,
    stop: threading.Event, exit_when_idle: bool, errors: list[OctuneError],
) -> None:  # fmt: skip
    """Lease, tune, finish, lease the next: one job at a time on one device. A refusal
    (a revoked token, say) ends every device's loop: ``errors`` keeps it for the agent.
    """
    fingerprint = DeviceInfo.from_cl(device).fingerprint
    try:
        _leasing(client, agent_id, device, fingerprint, workdir, poll_s, stop, exit_when_idle)
    except OctuneError as error:
        errors.append(error)
        stop.set()


def _leasing(
    client: OctuneClient, agent_id: int, device: cl.Device, fingerprint: str, workdir: Path,
    poll_s: float, stop: threading.Event, exit_when_idle: bool,
) -> None:  # fmt: skip
    while not stop.is_set():
        granted = retrying(lambda: client.lease(agent_id, fingerprint), stop)
        if granted.job is None:
            if exit_when_idle:
                return
            stop.wait(poll_s)
            continue
        run_job(client, agent_id, granted, device, workdir, stop)


def run_agent(
    client: OctuneClient,
    devices: list[cl.Device],
    *,
    name: str | None = None,
    workdir: Path,
    poll_s: float = 5.0,
    exit_when_idle: bool = False,
) -> None:
    """Register this machine's devices and drive each in a thread of its own."""
    for device in devices:
        require_compiling(device)
    infos = [DeviceInfo.from_cl(device) for device in devices]
    host = socket.gethostname()
    stop = threading.Event()
    registered = retrying(
        lambda: client.register_agent(name or host, host, [_device_in(info) for info in infos]),
        stop,
    )
    log(
        f"agent {registered.agent_id} on {client.base_url} drives "
        + ", ".join(f"{info.name} ({info.fingerprint})" for info in infos)
    )
    workdir.mkdir(parents=True, exist_ok=True)
    errors: list[OctuneError] = []
    threads = [
        threading.Thread(
            target=device_loop,
            args=(
                client,
                registered.agent_id,
                device,
                workdir,
                poll_s,
                stop,
                exit_when_idle,
                errors,
            ),
            name=f"device-{index}",
            daemon=True,  # Ctrl-C ends the agent; its leases expire and others take the jobs
        )
        for index, device in enumerate(devices)
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except KeyboardInterrupt:
        stop.set()
        raise
    if errors:
        raise errors[0]


def _device_in(info: DeviceInfo) -> dict[str, Any]:
    fields = ("platform_name", "platform_version", "vendor", "name", "driver_version",
              "compute_units", "max_work_group_size", "local_mem_size", "global_mem_size",
              "device_type", "extensions")  # fmt: skip
    return {name: getattr(info, name) for name in fields}
