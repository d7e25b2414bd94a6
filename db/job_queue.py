"""The tuning farm's work queue, in the database the server already runs: no broker.

A job is one submission on one device. An agent leases a queued job (or one whose lease
expired) for a device it drives; each lease bumps ``FarmJob.lease_epoch``, and every later call
of the holder (heartbeat, upload, finish) names that epoch, so an agent whose lease was
granted again to another is refused even if it comes back (a fencing token). Reads and the
writes that depend on them happen in one transaction that serialises with every other queue
operation: PostgreSQL locks the job rows it reads (``FOR UPDATE``; a lease skips the rows
another transaction holds, ``SKIP LOCKED``), SQLite takes its one write lock at ``BEGIN
IMMEDIATE``. A job's measurements are stored in the transaction that checks the lease, so a
job changes hands only between two uploads, never during one. A lease's tuning sessions end
with it: when the job is taken over, cancelled or finished, those still "running" (their agent
was killed, or dropped the job) become "interrupted" in that transaction.

Trust (docs/farm.md): a job is *trusted* when a trusted token submitted it, its results being
meant to answer lookups. Each agent leases the jobs of its own trust only: one registered
with a trusted token the trusted jobs, any other the rest; so a write token can neither steer
a trusted machine nor, posing as one (the same device), take its jobs. A lease resumes from
the job's sessions uploaded with a token of the job's trust only. A job is cancelled by the
token that submitted it, or a trusted one.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, func, or_, select, text, update
from sqlalchemy.orm import Session

from octune.core.results import Measurement, Status
from octune.db.job_rules import (
    ACTIVE,
    QueueError,
    cancel,
    end,
    end_sessions,
    may_cancel,
    take_back,
    trusted,
)
from octune.db.models import (
    SESSION_END_STATUSES,
    TRUSTED_SCOPE,
    ApiToken,
    Device,
    FarmAgent,
    FarmAgentDevice,
    FarmJob,
    JobSession,
    JobSubmission,
    KernelVersion,
    MeasurementRow,
    SessionUpload,
    TuningSession,
    WorkloadRow,
    utcnow,
)
from octune.db.queries import StoredKernel
from octune.db.recording import Recording, measurement_values

if TYPE_CHECKING:
    from octune.tuner.device import DeviceInfo

#: Jobs, and sessions of a job, a listing shows at most.
LISTED = 500


@dataclass(frozen=True)
class JobView:
    """A job as the API, the CLI and the dashboard show it: progress is a query over the
    measurements its agents uploaded.
    """

    id: int
    submission_id: int
    devices: str
    device_fingerprint: str
    device_name: str
    spec: dict[str, Any]
    strategy: str
    status: str
    agent: str | None
    lease_epoch: int
    lease_expires_at: datetime | None
    candidates: int
    best_gflops: float | None
    budget_seconds: float | None
    budget_candidates: int | None
    tried_s: float
    failures: int
    max_attempts: int
    reason: str
    created_at: datetime
    finished_at: datetime | None

    @property
    def time_left_s(self) -> float | None:
        if self.budget_seconds is None:
            return None
        return 0.0 if self.status not in ACTIVE else max(0.0, self.budget_seconds - self.tried_s)


@dataclass(frozen=True)
class DoneSession:
    """A session an earlier lease of the job uploaded: a resumed job starts from it."""

    kernel_name: str
    kernel_sha256: str
    workload_key: str
    strategy: str
    measurements: list[Measurement]


@dataclass(frozen=True)
class Lease:
    job: JobView
    done: list[DoneSession]


@dataclass(frozen=True)
class AgentView:
    id: int
    name: str
    host: str
    last_seen_at: datetime
    online: bool
    devices: list[tuple[str, str]]  # (fingerprint, name)
    jobs: list[int]  # running jobs it holds


def device_matches(pattern: str, device: Device) -> bool:
    """A fingerprint, or a glob (case-insensitive) over the device's name, its platform and
    name, its driver, or its name and driver: "Mali-G78*", "*NVIDIA*", "* 535.*".
    """
    if pattern == device.fingerprint:
        return True
    texts = (
        device.name,
        f"{device.platform_name} {device.name}",
        device.driver_version,
        f"{device.name} {device.driver_version}",
    )
    return any(fnmatch.fnmatchcase(value.lower(), pattern.lower()) for value in texts)


def uploader_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """An uploaded session's settings, with the uploading process's host and pid kept apart:
    they describe a process there, and ``close_dead_sessions`` must never take them for one
    of this host's.
    """
    settings = dict(settings)
    tuned_by = {key: settings.pop(key) for key in ("host", "pid") if key in settings}
    if tuned_by:
        settings["tuned_by"] = tuned_by
    return settings


class JobQueue(Recording):
    """The queue's operations, a mixin over the recording store it writes leased sessions to."""

    @contextmanager
    def _locked(self) -> Iterator[Session]:
        """A transaction that serialises with every other queue operation (module docstring)."""
        with self._session() as session:
            if self._engine.dialect.name == "sqlite":
                session.execute(text("BEGIN IMMEDIATE"))
            yield session

    # -- submissions ------------------------------------------------------------------------

    def submit(
        self,
        *,
        devices: str,
        spec: dict[str, Any],
        strategy: str,
        budget_seconds: float | None,
        budget_candidates: int | None,
        max_attempts: int,
        token_id: int,
        wait_for_device: bool,
    ) -> tuple[int, list[int]]:
        """A submission and a job per matching device; none matching is an error unless
        ``wait_for_device``, since a typo in a pattern would otherwise wait for ever.
        """
        with self._locked() as session:
            known = session.scalars(select(Device).order_by(Device.id)).all()
            matched = [device for device in known if device_matches(devices, device)]
            if not matched and not wait_for_device:
                names = ", ".join(sorted({d.name for d in known})[:10]) or "none yet"
                raise QueueError(
                    422, f"no device matches '{devices}' (known: {names}): pass a fingerprint "
                    "or a name glob such as 'Mali-G78*', or --wait-for-device to keep the job "
                    "waiting for a device that registers later",
                )  # fmt: skip
            row = JobSubmission(
                devices=devices, spec=spec, strategy=strategy, budget_seconds=budget_seconds,
                budget_candidates=budget_candidates, max_attempts=max_attempts,
                status="open", token_id=token_id,
            )  # fmt: skip
            session.add(row)
            session.flush()
            jobs = [self._new_job(session, row.id, device.id) for device in matched]
            return row.id, jobs

    @staticmethod
    def _new_job(session: Session, submission_id: int, device_id: int) -> int:
        job = FarmJob(
            submission_id=submission_id, device_id=device_id, status="queued", lease_epoch=0,
            tried_s=0.0, failures=0, reason="",
        )  # fmt: skip
        session.add(job)
        session.flush()
        return job.id

    def cancel_job(self, job_id: int, token_id: int) -> JobView:
        """Cancel a job: for the token that submitted it, or a trusted one."""
        with self._locked() as session:
            job = session.scalar(select(FarmJob).where(FarmJob.id == job_id).with_for_update())
            if job is None:
                raise QueueError(404, f"no job {job_id}: see `octune jobs list`")
            may_cancel(session, session.get(JobSubmission, job.submission_id), token_id,
                        f"job {job_id}")  # fmt: skip
            cancel(session, job)
        return self._view(job_id)

    def cancel_submission(self, submission_id: int, token_id: int) -> list[int]:
        """Cancel a submission's unfinished jobs, and close it to devices that come later:
        for the token that submitted it, or a trusted one.
        """
        with self._locked() as session:
            row = session.get(JobSubmission, submission_id, with_for_update=True)
            if row is None:
                raise QueueError(404, f"no submission {submission_id}: see `octune jobs list`")
            may_cancel(session, row, token_id, f"submission {submission_id}")
            row.status = "cancelled"
            jobs = session.scalars(
                select(FarmJob).where(FarmJob.submission_id == submission_id).with_for_update()
            ).all()
            for job in jobs:
                cancel(session, job)
            return [job.id for job in jobs]

    # -- agents -----------------------------------------------------------------------------

    def register_agent(
        self, name: str, host: str, token_id: int, devices: Iterable[DeviceInfo]
    ) -> int:
        """An agent and its devices; open submissions that match a device new to the queue
        get a job for it.
        """
        device_ids = list(dict.fromkeys(self.device_id(device) for device in devices))
        with self._locked() as session:
            agent = FarmAgent(name=name, host=host, token_id=token_id)
            session.add(agent)
            session.flush()
            for device_id in device_ids:
                session.add(FarmAgentDevice(agent_id=agent.id, device_id=device_id))
            rows = session.scalars(select(Device).where(Device.id.in_(device_ids))).all()
            open_ = session.scalars(select(JobSubmission).filter_by(status="open")).all()
            for submission in open_:
                has = set(
                    session.scalars(
                        select(FarmJob.device_id).filter_by(submission_id=submission.id)
                    )
                )
                for device in rows:
                    if device.id not in has and device_matches(submission.devices, device):
                        self._new_job(session, submission.id, device.id)
            return agent.id

    def _agent(self, session: Session, agent_id: int, token_id: int) -> FarmAgent:
        agent = session.get(FarmAgent, agent_id)
        if agent is None:
            raise QueueError(404, f"no agent {agent_id}: register first (POST /v1/agents)")
        if agent.token_id != token_id:
            raise QueueError(403, f"agent {agent_id} registered with another token: use that one")
        agent.last_seen_at = utcnow()
        return agent

    def lease(self, agent_id: int, token_id: int, fingerprint: str, lease_s: float) -> Lease | None:
        """The agent's job for the device: the one it holds already (a lease whose answer was
        lost is granted again), else the oldest queued one or one whose lease expired; None
        when there is none. An expired lease counts as a failed attempt.
        """
        now = utcnow()
        with self._locked() as session:
            self._agent(session, agent_id, token_id)
            own_trust = trusted(session, token_id)
            submitted_trusted = (
                select(JobSubmission.id)
                .join(ApiToken, ApiToken.id == JobSubmission.token_id)
                .where(ApiToken.scope == TRUSTED_SCOPE)
            )
            of_own_trust = (
                FarmJob.submission_id.in_(submitted_trusted)
                if own_trust
                else FarmJob.submission_id.not_in(submitted_trusted)
            )
            device_id = session.scalar(
                select(Device.id)
                .join(FarmAgentDevice, FarmAgentDevice.device_id == Device.id)
                .where(FarmAgentDevice.agent_id == agent_id, Device.fingerprint == fingerprint)
            )
            if device_id is None:
                raise QueueError(
                    422, f"agent {agent_id} did not register device {fingerprint}: lease for "
                    "one of its own devices, or register again with it",
                )  # fmt: skip
            job = session.scalar(
                select(FarmJob)
                .where(FarmJob.device_id == device_id, FarmJob.status == "running",
                       FarmJob.lease_agent_id == agent_id)
                .with_for_update()
            )  # fmt: skip
            while job is None:
                job = session.scalar(
                    select(FarmJob)
                    .where(
                        FarmJob.device_id == device_id,
                        of_own_trust,
                        or_(
                            FarmJob.status == "queued",
                            and_(FarmJob.status == "running", FarmJob.lease_expires_at < now),
                        ),
                    )
                    .order_by(FarmJob.id)
                    .limit(1)
                    .with_for_update(skip_locked=True)
                )
                if job is None:
                    return None
                if job.status == "running" and take_back(session, job) == "failed":
                    job = None
                    continue
                job.status = "running"
                job.lease_epoch += 1
                job.lease_agent_id = agent_id
            job.lease_expires_at = now + timedelta(seconds=lease_s)
            job_id = job.id
        return Lease(self._view(job_id), self._done_sessions(job_id, own_trust))

    def _held(
        self, session: Session, job_id: int, agent_id: int, token_id: int, epoch: int
    ) -> FarmJob:
        """The job, locked, if the agent holds it under lease ``epoch``; else why not."""
        self._agent(session, agent_id, token_id)
        job = session.scalar(select(FarmJob).where(FarmJob.id == job_id).with_for_update())
        if job is None:
            raise QueueError(404, f"no job {job_id}")
        if job.status == "cancelled":
            raise QueueError(409, f"job {job_id} was cancelled: drop it and lease the next")
        if job.status != "running" or job.lease_agent_id != agent_id or job.lease_epoch != epoch:
            raise QueueError(
                409, f"agent {agent_id} does not hold job {job_id} (its lease {epoch} ended; "
                f"the job is {job.status}, lease {job.lease_epoch}): drop it and lease the next",
            )  # fmt: skip
        return job

    def heartbeat(
        self, job_id: int, agent_id: int, token_id: int, epoch: int, tried_s: float, lease_s: float
    ) -> None:
        with self._locked() as session:
            job = self._held(session, job_id, agent_id, token_id, epoch)
            job.lease_expires_at = utcnow() + timedelta(seconds=lease_s)
            job.tried_s = max(job.tried_s, tried_s)

    def finish(
        self, job_id: int, agent_id: int, token_id: int, epoch: int, tried_s: float,
        error: str | None,
    ) -> JobView:  # fmt: skip
        """Complete the job, or count a failed attempt: queued again while attempts are
        left, failed with ``error`` once they are spent.
        """
        with self._locked() as session:
            done = session.get(FarmJob, job_id)
            if (
                error is None and done is not None and done.status == "completed"
                and (done.lease_agent_id, done.lease_epoch) == (agent_id, epoch)
            ):  # fmt: skip
                return self._view(job_id)  # a repeat whose first answer was lost
            job = self._held(session, job_id, agent_id, token_id, epoch)
            job.tried_s = max(job.tried_s, tried_s)
            if error is None:
                end(session, job, "completed")
            else:
                job.failures += 1
                job.reason = error
                submission = session.get(JobSubmission, job.submission_id)
                if submission is not None and job.failures >= submission.max_attempts:
                    end(session, job, "failed")
                else:
                    end_sessions(session, job)
                    job.status, job.lease_agent_id, job.lease_expires_at = "queued", None, None
        return self._view(job_id)

    def sweep_expired(self) -> int:
        """Take back every expired lease, as the next lease of the job's device would: the job
        queued again (an attempt counted) or failed after its last attempt, so a dead agent's
        job does not show as running while no other agent of its device asks. How many.
        """
        with self._locked() as session:
            jobs = session.scalars(
                select(FarmJob)
                .where(FarmJob.status == "running", FarmJob.lease_expires_at < utcnow())
                .with_for_update(skip_locked=True)
            ).all()
            for job in jobs:
                if take_back(session, job) == "queued":
                    job.status, job.lease_expires_at = "queued", None
        return len(jobs)

    def renew_leases(self, lease_s: float) -> int:
        """Give every running job a full lease again: after a server restart, so that agents
        that waited for the server are not taken for dead.
        """
        with self._locked() as session:
            renewed = session.execute(
                update(FarmJob)
                .where(FarmJob.status == "running")
                .values(lease_expires_at=utcnow() + timedelta(seconds=lease_s))
                .returning(FarmJob.id)
            ).all()
        return len(renewed)

    # -- measurements -----------------------------------------------------------------------

    def job_upload(
        self,
        *,
        job_id: int,
        agent_id: int,
        token_id: int,
        epoch: int,
        session_key: int,
        lease_s: float,
        device: DeviceInfo,
        kernel: StoredKernel,
        problem: str,
        workload_key: str,
        shape: dict[str, int],
        dtype: str,
        strategy: str,
        seed: int | None,
        settings: dict[str, Any],
        status: str,
        octune_version: str,
        measurements: list[Measurement],
    ) -> tuple[int, int]:
        """Store measurements of one of the holder's sessions, in the transaction that checks
        its lease. Idempotent: the session is named by (job, lease, the agent's session), and
        a measurement is stored once per session and config, however often it is sent.
        Returns (the server's session id, how many were new).
        """
        identity = (
            self.device_id(device),
            self.kernel_version_id(
                kernel.name, kernel.sha256, kernel.template_source, kernel.space_source
            ),
            self.workload_id(problem, workload_key, shape, dtype),
        )
        uid = f"job-{job_id}.{epoch}.{session_key}"
        insert = self._insert_or_skip(MeasurementRow)
        with self._locked() as session:
            job = self._held(session, job_id, agent_id, token_id, epoch)
            if job.device_id != identity[0]:
                raise QueueError(
                    422, f"job {job_id} is for another device than {device.name} "
                    f"({device.fingerprint}): upload its measurements to its own job",
                )  # fmt: skip
            job.lease_expires_at = utcnow() + timedelta(seconds=lease_s)
            found = session.execute(
                select(TuningSession)
                .join(SessionUpload, SessionUpload.session_id == TuningSession.id)
                .where(SessionUpload.uid == uid)
            ).scalar_one_or_none()
            if found is None:
                found = TuningSession(
                    device_id=identity[0], kernel_version_id=identity[1],
                    workload_id=identity[2], strategy=strategy, seed=seed,
                    settings=uploader_settings(settings), status="running",
                    octune_version=octune_version,
                )  # fmt: skip
                session.add(found)
                session.flush()
                session.add(SessionUpload(uid=uid, session_id=found.id, token_id=token_id))
                session.add(JobSession(job_id=job_id, session_id=found.id))
            elif (found.device_id, found.kernel_version_id, found.workload_id) != identity:
                raise QueueError(
                    409, f"session {session_key} of lease {epoch} of job {job_id} was sent "
                    "for another kernel or workload: give each session its own number",
                )  # fmt: skip
            added = sum(
                len(session.execute(insert.values(measurement_values(found.id, m))).all())
                for m in measurements
            )
            if status in SESSION_END_STATUSES and found.status != status:
                found.status, found.finished_at = status, utcnow()
            return found.id, added

    def _done_sessions(self, job_id: int, trusted: bool) -> list[DoneSession]:
        """The job's sessions uploaded with a token of the leasing agent's trust only: a
        trusted agent never skips a config on a write token's word.
        """
        scope = ApiToken.scope == TRUSTED_SCOPE if trusted else ApiToken.scope != TRUSTED_SCOPE
        query = (
            select(TuningSession.id, TuningSession.strategy, KernelVersion.name,
                   KernelVersion.sha256, WorkloadRow.key)
            .join(JobSession, JobSession.session_id == TuningSession.id)
            .join(SessionUpload, SessionUpload.session_id == TuningSession.id)
            .join(ApiToken, ApiToken.id == SessionUpload.token_id)
            .join(KernelVersion, TuningSession.kernel_version_id == KernelVersion.id)
            .join(WorkloadRow, TuningSession.workload_id == WorkloadRow.id)
            .where(JobSession.job_id == job_id, scope)
            .order_by(TuningSession.id)
        )  # fmt: skip
        with self._session() as session:
            found = session.execute(query).all()
        return [
            DoneSession(name, sha256, key, strategy, self.session_measurements(session_id))
            for session_id, strategy, name, sha256, key in found
        ]

    # -- listings ---------------------------------------------------------------------------

    def jobs(self, status: str | None = None, limit: int = LISTED) -> list[JobView]:
        return self._views(status=status, limit=limit)

    def job(self, job_id: int) -> JobView | None:
        found = self._views(job_id=job_id)
        return found[0] if found else None

    def _view(self, job_id: int) -> JobView:
        found = self.job(job_id)
        assert found is not None, f"job {job_id} vanished"
        return found

    def _views(
        self, *, status: str | None = None, job_id: int | None = None, limit: int = LISTED
    ) -> list[JobView]:
        progress = (
            select(JobSession.job_id, func.max(MeasurementRow.gflops).label("best"))
            .join(MeasurementRow, MeasurementRow.session_id == JobSession.session_id)
            .where(MeasurementRow.status == Status.OK.value)
            .group_by(JobSession.job_id)
            .subquery()
        )
        tried = (
            select(JobSession.job_id, func.count(MeasurementRow.id).label("tried"))
            .join(MeasurementRow, MeasurementRow.session_id == JobSession.session_id)
            .join(TuningSession, TuningSession.id == JobSession.session_id)
            .where(TuningSession.strategy != "confirm")
            .group_by(JobSession.job_id)
            .subquery()
        )
        query = (
            select(FarmJob, JobSubmission, Device, FarmAgent.name, tried.c.tried, progress.c.best)
            .join(JobSubmission, FarmJob.submission_id == JobSubmission.id)
            .join(Device, FarmJob.device_id == Device.id)
            .outerjoin(FarmAgent, FarmJob.lease_agent_id == FarmAgent.id)
            .outerjoin(tried, tried.c.job_id == FarmJob.id)
            .outerjoin(progress, progress.c.job_id == FarmJob.id)
            .order_by(FarmJob.id.desc())
            .limit(limit)
        )
        if status is not None:
            query = query.where(FarmJob.status == status)
        if job_id is not None:
            query = query.where(FarmJob.id == job_id)
        with self._session() as session:
            rows = session.execute(query).all()
        return [
            JobView(
                id=job.id,
                submission_id=sub.id,
                devices=sub.devices,
                device_fingerprint=device.fingerprint,
                device_name=device.name,
                spec=sub.spec,
                strategy=sub.strategy,
                status=job.status,
                agent=agent if job.status == "running" else None,
                lease_epoch=job.lease_epoch,
                lease_expires_at=job.lease_expires_at,
                candidates=candidates or 0,
                best_gflops=best,
                budget_seconds=sub.budget_seconds,
                budget_candidates=sub.budget_candidates,
                tried_s=job.tried_s,
                failures=job.failures,
                max_attempts=sub.max_attempts,
                reason=job.reason,
                created_at=job.created_at,
                finished_at=job.finished_at,
            )
            for job, sub, device, agent, candidates, best in rows
        ]

    def waiting_submissions(self) -> list[tuple[int, str]]:
        """Open submissions with no job yet: waiting for a device that matches them."""
        query = (
            select(JobSubmission.id, JobSubmission.devices)
            .outerjoin(FarmJob, FarmJob.submission_id == JobSubmission.id)
            .where(JobSubmission.status == "open", FarmJob.id.is_(None))
            .order_by(JobSubmission.id)
        )
        with self._session() as session:
            return [(row.id, row.devices) for row in session.execute(query)]

    def agents(self, online_s: float) -> list[AgentView]:
        """Agents seen within ``online_s`` (online), then the others, newest first."""
        since = utcnow() - timedelta(seconds=online_s)
        with self._session() as session:
            agents = session.scalars(
                select(FarmAgent).order_by(FarmAgent.last_seen_at.desc()).limit(LISTED)
            ).all()
            ids = [agent.id for agent in agents]
            devices: dict[int, list[tuple[str, str]]] = {}
            for agent_id, fingerprint, name in session.execute(
                select(FarmAgentDevice.agent_id, Device.fingerprint, Device.name)
                .join(Device, FarmAgentDevice.device_id == Device.id)
                .where(FarmAgentDevice.agent_id.in_(ids))
            ):
                devices.setdefault(agent_id, []).append((fingerprint, name))
            held: dict[int, list[int]] = {}
            for job_id, agent_id in session.execute(
                select(FarmJob.id, FarmJob.lease_agent_id).where(
                    FarmJob.status == "running", FarmJob.lease_agent_id.in_(ids)
                )
            ):
                held.setdefault(agent_id, []).append(job_id)
        return [
            AgentView(
                agent.id,
                agent.name,
                agent.host,
                agent.last_seen_at,
                agent.last_seen_at >= since,
                devices.get(agent.id, []),
                held.get(agent.id, []),
            )
            for agent in agents
        ]
