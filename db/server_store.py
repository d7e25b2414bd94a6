"""The queries only the config service needs: uploads, listings and the dashboard (tokens:
``tokens.py``).

Kept beside ``store.py`` rather than in it so the tuner's store stays small; a ``ServerStore``
is a ``Store`` (same migrated database, same one-line errors) composed with these methods and
the tuning farm's queue (``job_queue.JobQueue``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import case, func, select, text

from octune.core.errors import StoreError
from octune.core.results import CONFIRM_STRATEGY, Measurement, Status
from octune.db.job_queue import JobQueue, uploader_settings
from octune.db.models import (
    SESSION_END_STATUSES,
    Device,
    KernelVersion,
    MeasurementRow,
    SessionUpload,
    TuningSession,
    WorkloadRow,
    utcnow,
)
from octune.db.queries import StoredKernel, answering
from octune.db.store import Store
from octune.db.tokens import TokenRecords

if TYPE_CHECKING:
    from octune.tuner.device import DeviceInfo


@dataclass(frozen=True)
class TunedKernel:
    name: str
    sha256: str
    workloads: int


@dataclass(frozen=True)
class DeviceSummary:
    fingerprint: str
    name: str
    platform: str
    driver_version: str
    compute_units: int
    device_type: str
    kernels: tuple[TunedKernel, ...]


@dataclass(frozen=True)
class BestSummary:
    device_name: str
    device_fingerprint: str
    kernel: str
    workload: str
    best_gflops: float
    measured: int
    problem: str
    shape: dict[str, int]
    dtype: str


@dataclass(frozen=True)
class UploadOutcome:
    session_id: int
    added: int
    already_stored: int


class UploadConflictError(StoreError):
    """An upload identifier already names a session of another device, kernel or workload."""


class ServerStore(JobQueue, TokenRecords, Store):
    def revision(self) -> str:
        """The schema revision the database is at; reading it proves the database answers."""
        with self._session() as session:
            return session.execute(text("SELECT version_num FROM alembic_version")).scalar_one()

    def devices(self) -> list[DeviceSummary]:
        """Every device with the kernel versions tuned on it; sessions are few, so this is cheap."""
        tuned = (
            select(
                TuningSession.device_id,
                KernelVersion.name,
                KernelVersion.sha256,
                func.count(func.distinct(TuningSession.workload_id)),
            )
            .join(KernelVersion, TuningSession.kernel_version_id == KernelVersion.id)
            .group_by(TuningSession.device_id, KernelVersion.name, KernelVersion.sha256)
            .order_by(KernelVersion.name, KernelVersion.sha256)
        )
        with self._session() as session:
            kernels: dict[int, list[TunedKernel]] = {}
            for device_id, name, sha256, workloads in session.execute(tuned):
                kernels.setdefault(device_id, []).append(TunedKernel(name, sha256, workloads))
            rows = session.scalars(select(Device).order_by(Device.name, Device.id)).all()
        return [
            DeviceSummary(
                fingerprint=row.fingerprint,
                name=row.name,
                platform=f"{row.platform_name} {row.platform_version}",
                driver_version=row.driver_version,
                compute_units=row.compute_units,
                device_type=row.device_type,
                kernels=tuple(kernels.get(row.id, ())),
            )
            for row in rows
        ]

    def kernel_names(self) -> list[str]:
        with self._session() as session:
            return list(session.scalars(select(KernelVersion.name).distinct()))

    def kernel_source(self, sha256: str) -> StoredKernel | None:
        with self._session() as session:
            row = session.scalar(
                select(KernelVersion).filter_by(sha256=sha256).order_by(KernelVersion.id)
            )
            if row is None:
                return None
            return StoredKernel(row.name, row.sha256, row.template_source, row.space_source)

    def tuned_workloads(self, limit: int) -> list[BestSummary]:
        """Each tuned workload's best per device and kernel, as lookups answer it: ranked as
        ``best`` ranks (confirmed first, then the fastest median, then the earliest row), in
        the kernel's newest version measured; not the fastest single run, which a confirmation
        may have found lucky.
        """
        unconfirmed = case((TuningSession.strategy == CONFIRM_STRATEGY, 0), else_=1)
        version = (Device.id, KernelVersion.id, WorkloadRow.id)
        ranked = (
            select(
                Device.name.label("device_name"),
                Device.fingerprint.label("fingerprint"),
                KernelVersion.name.label("kernel"),
                KernelVersion.id.label("version"),
                WorkloadRow.key.label("workload"),
                WorkloadRow.problem.label("problem"),
                WorkloadRow.shape.label("shape"),
                WorkloadRow.dtype.label("dtype"),
                MeasurementRow.gflops.label("gflops"),
                func.row_number()
                .over(
                    partition_by=version,
                    order_by=(unconfirmed, MeasurementRow.median_s, MeasurementRow.id),
                )
                .label("rank"),
                func.count().over(partition_by=version).label("measured"),
            )
            .select_from(MeasurementRow)
            .join(TuningSession, MeasurementRow.session_id == TuningSession.id)
            .join(Device, TuningSession.device_id == Device.id)
            .join(KernelVersion, TuningSession.kernel_version_id == KernelVersion.id)
            .join(WorkloadRow, TuningSession.workload_id == WorkloadRow.id)
            .where(
                MeasurementRow.status == Status.OK.value,
                MeasurementRow.median_s.is_not(None),
                MeasurementRow.gflops.is_not(None),
                answering(),
            )
            .subquery()
        )
        c = ranked.c
        query = (
            select(
                c.device_name,
                c.fingerprint,
                c.kernel,
                c.workload,
                c.gflops,
                c.measured,
                c.problem,
                c.shape,
                c.dtype,
            )
            .where(c.rank == 1)
            .order_by(c.device_name, c.kernel, c.workload, c.version.desc())
        )
        found: dict[tuple[str, str, str], BestSummary] = {}
        with self._session() as session:
            for row in session.execute(query):
                best = BestSummary(*row)
                key = (best.device_fingerprint, best.kernel, best.workload)
                found.setdefault(key, best)  # the newest version first
                if len(found) == limit:
                    break
        return list(found.values())

    def upload(
        self,
        *,
        uid: str,
        token_id: int,
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
        measurements: Iterable[Measurement],
    ) -> UploadOutcome:
        """Store a session sent by a tuning machine. The uploader's ``uid`` names the session:
        sending it again, whole or resumed, adds only the configs the server lacks.
        """
        device_id = self.device_id(device)
        kernel_id = self.kernel_version_id(
            kernel.name, kernel.sha256, kernel.template_source, kernel.space_source
        )
        workload_id = self.workload_id(problem, workload_key, shape, dtype)
        identity = (device_id, kernel_id, workload_id)
        settings = uploader_settings(settings)
        session_id = self._uploaded_session(uid, identity, token_id)
        if session_id is None:
            try:
                with self._session() as session:
                    row = TuningSession(
                        device_id=device_id,
                        kernel_version_id=kernel_id,
                        workload_id=workload_id,
                        strategy=strategy,
                        seed=seed,
                        settings=dict(settings),
                        status="running",
                        octune_version=octune_version,
                    )
                    session.add(row)
                    session.flush()
                    session.add(SessionUpload(uid=uid, session_id=row.id, token_id=token_id))
            except StoreError:  # a concurrent upload of the same uid won: use its session
                session_id = self._uploaded_session(uid, identity, token_id)
                if session_id is None:
                    raise
            else:
                session_id = row.id
        measurements = list(measurements)
        added = self.add_measurements(session_id, measurements)
        with self._session() as session:
            stored = session.get(TuningSession, session_id)
            if stored is not None and status in SESSION_END_STATUSES and stored.status != status:
                stored.status = status
                stored.finished_at = utcnow()
        skipped = len(measurements) - added
        return UploadOutcome(session_id, added, skipped)

    def _uploaded_session(
        self, uid: str, identity: tuple[int, int, int], token_id: int
    ) -> int | None:
        """The session an earlier upload named ``uid``. Only its own token may add to it: a
        write token must not slip measurements into a trusted token's session.
        """
        with self._session() as session:
            found = session.execute(
                select(
                    TuningSession.id,
                    TuningSession.device_id,
                    TuningSession.kernel_version_id,
                    TuningSession.workload_id,
                    SessionUpload.token_id,
                )
                .join(SessionUpload, SessionUpload.session_id == TuningSession.id)
                .where(SessionUpload.uid == uid)
            ).one_or_none()
        if found is None:
            return None
        if found[4] != token_id:
            raise UploadConflictError(
                f"upload id '{uid}' names a session another token uploaded: give each session "
                "its own id"
            )
        if tuple(found[1:4]) != identity:
            raise UploadConflictError(
                f"upload id '{uid}' already names a session of another device, kernel or "
                "workload: give each session its own id"
            )
        return found[0]
