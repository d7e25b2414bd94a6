"""The tuning farm's API: jobs (submit with a write token, list, cancel) and the agents that
lease them for a device, renew the lease, upload measurements under it and finish them.
The queue itself is ``octune.db.job_queue``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request

from octune.api.job_spec import check_spec
from octune.api.schemas import (
    AgentIn,
    AgentOut,
    AgentStatusOut,
    DoneSessionOut,
    FinishIn,
    HeldIn,
    JobOut,
    JobSubmitIn,
    JobUploadIn,
    JobUploadOut,
    LeaseIn,
    LeaseOut,
    MeasurementIn,
    SubmitOut,
)
from octune.db.job_queue import JobView
from octune.db.server_store import ServerStore
from octune.db.tokens import TokenRecord
from octune.server.auth import require_write
from octune.server.routes.uploads import checked_session
from octune.tuner.device import DeviceInfo
from octune.tuner.strategies.base import get_strategy

#: Read routes (the app adds the read-token check where the server asks for one).
reads = APIRouter(tags=["jobs"])
#: Everything that changes the queue: a write token.
writes = APIRouter(tags=["jobs"])

Writer = Annotated[TokenRecord, Depends(require_write)]
JobId = Annotated[int, Path(ge=1, le=2**62)]
Status = Literal["queued", "running", "completed", "failed", "cancelled"]


def _store(request: Request) -> ServerStore:
    return request.app.state.store


def _lease_s(request: Request) -> float:
    return request.app.state.settings.lease_s


def job_out(view: JobView) -> JobOut:
    return JobOut.model_validate(
        {name: getattr(view, name) for name in JobOut.model_fields}, from_attributes=False
    )


@writes.post("/jobs", response_model=SubmitOut)
def submit(request: Request, body: JobSubmitIn, token: Writer) -> SubmitOut:
    """One job per device that matches ``devices`` now, and one for each that registers
    later while the submission is open. A pattern that matches nothing is refused unless
    ``wait_for_device``.
    """
    if body.model is not None:
        spec: dict[str, object] = {"model": body.model}
        if body.batch is not None:
            spec["batch"] = body.batch
    else:
        spec = {"workloads": [entry.model_dump() for entry in body.workloads or ()]}
    check_spec(spec)
    get_strategy(body.strategy)
    store = _store(request)
    submission_id, job_ids = store.submit(
        devices=body.devices, spec=spec, strategy=body.strategy, budget_seconds=body.time_s,
        budget_candidates=body.budget, max_attempts=body.max_attempts, token_id=token.id,
        wait_for_device=body.wait_for_device,
    )  # fmt: skip
    views = [store.job(job_id) for job_id in job_ids]
    return SubmitOut(
        submission_id=submission_id,
        jobs=[job_out(view) for view in views if view is not None],
        waiting=not job_ids,
    )


@reads.get("/jobs")
def list_jobs(
    request: Request,
    status: Annotated[Status | None, Query(description="only jobs in this state")] = None,
) -> list[JobOut]:
    """The newest jobs first, with their progress."""
    return [job_out(view) for view in _store(request).jobs(status)]


@reads.get("/jobs/{job_id}")
def show_job(request: Request, job_id: JobId) -> JobOut:
    view = _store(request).job(job_id)
    if view is None:
        raise HTTPException(404, f"no job {job_id}: see GET /v1/jobs")
    return job_out(view)


@writes.post("/jobs/{job_id}/cancel")
def cancel_job(request: Request, job_id: JobId, token: Writer) -> JobOut:
    """Its agent drops it at its next call; what it measured stays stored. For the token that
    submitted it, or a trusted one (403 for any other).
    """
    return job_out(_store(request).cancel_job(job_id, token.id))


@writes.post("/submissions/{submission_id}/cancel")
def cancel_submission(
    request: Request,
    submission_id: Annotated[int, Path(ge=1, le=2**62)],
    token: Writer,
) -> list[JobOut]:
    """Cancel every unfinished job of a submission, and close it to devices that come later:
    for the token that submitted it, or a trusted one.
    """
    store = _store(request)
    views = [store.job(job_id) for job_id in store.cancel_submission(submission_id, token.id)]
    return [job_out(view) for view in views if view is not None]


@writes.post("/agents")
def register_agent(request: Request, body: AgentIn, token: Writer) -> AgentOut:
    """An agent and the devices it drives; jobs waiting for such a device are created."""
    devices = [DeviceInfo(**d.model_dump(), max_work_item_sizes=()) for d in body.devices]
    agent_id = _store(request).register_agent(body.name, body.host, token.id, devices)
    return AgentOut(agent_id=agent_id, lease_s=_lease_s(request))


@reads.get("/agents")
def list_agents(request: Request) -> list[AgentStatusOut]:
    """Agents, online ones first (seen within two leases), with their devices and jobs."""
    return [
        AgentStatusOut(
            id=a.id,
            name=a.name,
            host=a.host,
            last_seen_at=a.last_seen_at,
            online=a.online,
            devices=[fingerprint for fingerprint, _name in a.devices],
            jobs=a.jobs,
        )
        for a in _store(request).agents(2 * _lease_s(request))
    ]


@writes.post("/agents/{agent_id}/lease")
def lease(
    request: Request,
    agent_id: Annotated[int, Path(ge=1, le=2**62)],
    body: LeaseIn,
    token: Writer,
) -> LeaseOut:
    """The agent's job for one of its devices, and what earlier leases of it measured;
    ``job`` is null when none waits.
    """
    lease_s = _lease_s(request)
    granted = _store(request).lease(agent_id, token.id, body.device, lease_s)
    if granted is None:
        return LeaseOut(job=None, lease_s=lease_s)
    done = [
        DoneSessionOut(
            kernel_name=d.kernel_name,
            kernel_sha256=d.kernel_sha256,
            workload_key=d.workload_key,
            strategy=d.strategy,
            measurements=[MeasurementIn.of(m) for m in d.measurements],
        )
        for d in granted.done
    ]
    return LeaseOut(job=job_out(granted.job), lease_s=lease_s, done=done)


@writes.post("/jobs/{job_id}/heartbeat")
def heartbeat(request: Request, job_id: JobId, body: HeldIn, token: Writer) -> LeaseOut:
    """Renew the lease; 409 when the agent no longer holds the job (cancelled, or its lease
    expired and another agent has it): it should drop the job.
    """
    lease_s = _lease_s(request)
    _store(request).heartbeat(job_id, body.agent_id, token.id, body.epoch, body.tried_s, lease_s)
    return LeaseOut(job=None, lease_s=lease_s)


@writes.post("/jobs/{job_id}/measurements")
def upload_measurements(
    request: Request, job_id: JobId, body: JobUploadIn, token: Writer
) -> JobUploadOut:
    """Measurements of the holder's session ``session_key``, checked as any upload is.
    Sending them again stores each once; an agent that does not hold the job gets 409.
    """
    device, kernel, workload, measurements = checked_session(body, _store(request))
    session_id, added = _store(request).job_upload(
        job_id=job_id, agent_id=body.agent_id, token_id=token.id, epoch=body.epoch,
        session_key=body.session_key, lease_s=_lease_s(request), device=device, kernel=kernel,
        problem=workload.problem, workload_key=workload.key, shape=workload.shape,
        dtype=workload.dtype, strategy=body.session.strategy, seed=body.session.seed,
        settings=body.session.settings, status=body.session.status,
        octune_version=body.session.octune_version, measurements=measurements,
    )  # fmt: skip
    if added and token.answers:  # what a write token sends changes no answer
        request.app.state.lookups.invalidate()
    return JobUploadOut(session_id=session_id, added=added)


@writes.post("/jobs/{job_id}/finish")
def finish(request: Request, job_id: JobId, body: FinishIn, token: Writer) -> JobOut:
    """Done, or (with ``error``) a failed attempt: the job is queued again until its
    attempts are spent, then failed with the reason.
    """
    view = _store(request).finish(
        job_id, body.agent_id, token.id, body.epoch, body.tried_s, body.error
    )
    return job_out(view)
