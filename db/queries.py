"""Reading answers out of the measurements: which rows may answer (``answering``), the best
and top configs, failures, lookup tables and the cost model's history.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    ColumnElement,
    Select,
    case,
    func,
    select,
)
from sqlalchemy.orm import Session

from octune.core.results import (
    CONFIRM_STRATEGY,
    BestResult,
    Failures,
    HistoryRecord,
    Objective,
    Status,
    failure_signature,
    score,
    top_distinct,
)
from octune.db.engine import Database
from octune.db.models import (
    TRUSTED_SCOPE,
    ApiToken,
    Device,
    FarmAgent,
    FarmAgentDevice,
    KernelVersion,
    MeasurementRow,
    SessionUpload,
    TuningSession,
    WorkloadRow,
)

if TYPE_CHECKING:
    from octune.tuner.device import DeviceInfo


class Queries(Database):
    """What the stored measurements answer: the best config, the top ones, failures, tuned
    devices, kernels and workloads, and the history a cost model learns from.
    """

    def top_configs(
        self,
        device_id: int,
        kernel_version_id: int,
        workload_id: int,
        count: int,
        objective: Objective = "time",
        within: float = math.inf,
    ) -> list[dict[str, int]]:
        """The `count` best distinct configs found by search sessions, of those that score
        at most `within` times the best: the ones to confirm.
        """
        scope = measurements_of(device_id, kernel_version_id, workload_id).where(
            TuningSession.strategy != CONFIRM_STRATEGY
        )
        with self._session() as session:
            ranked = _rank(session, scope, objective, prefer_confirmed=False)
        scored = [(score(row.median_s, row.extra, objective) or math.inf, row.config)
                  for row in ranked]  # fmt: skip
        return top_distinct(scored, count, within)

    def best(
        self,
        device_fingerprint: str,
        kernel_name: str,
        workload_key: str,
        kernel_sha256: str | None = None,
        objective: Objective = "time",
    ) -> BestResult | None:
        """The best passing config for the objective; a confirmed result (re-measured with
        more repeats at the end of a session) beats an unconfirmed one. Without a sha256, the
        kernel version last tuned on this device and workload is meant: that is the source the
        caller most likely ships.
        """
        with self._session() as session:
            found = _tuned(session, device_fingerprint, kernel_name, workload_key, kernel_sha256)
            if found is None:
                return None
            device, kernel, workload = found
            scope = measurements_of(device.id, kernel.id, workload.id)
            ranked = _rank(session, scope, objective, prefer_confirmed=True)
            if not ranked:
                return None
            fastest = ranked[0]
            counted = scope.where(TuningSession.strategy != CONFIRM_STRATEGY).with_only_columns(
                func.count(), func.count(case((MeasurementRow.status != Status.OK.value, 1)))
            )
            measured, failed = session.execute(counted).one()
        return BestResult(
            config=dict(fastest.config),
            median_s=fastest.median_s,
            spread_s=fastest.spread_s or 0.0,
            gflops=fastest.gflops,
            measurement_id=fastest.id,
            session_id=fastest.session_id,
            kernel_name=kernel.name,
            kernel_sha256=kernel.sha256,
            device_fingerprint=device.fingerprint,
            workload_key=workload.key,
            measured_at=fastest.created_at,
            measured=measured,
            failed=failed,
        )

    def failures(
        self,
        device_fingerprint: str,
        kernel_name: str,
        workload_key: str,
        kernel_sha256: str | None = None,
    ) -> Failures | None:
        """Why a workload has no verified config: its failed measurements, counted by status
        and reason. None where anything passed, or nothing was measured.
        """
        with self._session() as session:
            found = _tuned(session, device_fingerprint, kernel_name, workload_key, kernel_sha256)
            if found is None:
                return None
            device, kernel, workload = found
            rows = session.execute(
                measurements_of(device.id, kernel.id, workload.id).with_only_columns(
                    MeasurementRow.status, MeasurementRow.message
                )
            ).all()
        if not rows or any(status == Status.OK.value for status, _ in rows):
            return None
        reasons = Counter(failure_signature(status, message) for status, message in rows)
        return Failures(measured=len(rows), reasons=reasons)

    # -- lookup tables: what the config service answers from and `octune export` ships ------

    def stored_devices(self) -> list[StoredDevice]:
        """Every device, for resolving a fingerprint or a name, but those known only from
        what write tokens sent (uploads, farm agents; ``answering``): such a device cannot
        take a name.
        """
        trusted_agents = (
            select(FarmAgentDevice.device_id)
            .join(FarmAgent, FarmAgentDevice.agent_id == FarmAgent.id)
            .join(ApiToken, FarmAgent.token_id == ApiToken.id)
            .where(ApiToken.scope == TRUSTED_SCOPE)
        )
        sent = Device.id.in_(select(TuningSession.device_id)) | Device.id.in_(
            select(FarmAgentDevice.device_id)
        )
        vouched = Device.id.in_(select(TuningSession.device_id).where(answering())) | Device.id.in_(
            trusted_agents
        )
        query = select(Device).where(~sent | vouched).order_by(Device.id)
        with self._session() as session:
            rows = session.scalars(query).all()
        return [StoredDevice.from_row(row) for row in rows]

    def lookup_kernel(
        self,
        device_fingerprint: str,
        kernel_name: str,
        kernel_sha256: str | None = None,
        skip: Collection[str] = (),
    ) -> StoredKernel | None:
        """The pinned kernel version, or without a sha256 the one last tuned on this device
        that is not in ``skip`` (retired versions): one version per lookup table, because a
        config is only valid for its own source.
        """
        query = select(KernelVersion).where(KernelVersion.name == kernel_name)
        if kernel_sha256 is not None:
            query = query.where(KernelVersion.sha256 == kernel_sha256)
        else:
            query = (
                query.join(TuningSession, TuningSession.kernel_version_id == KernelVersion.id)
                .join(Device, TuningSession.device_id == Device.id)
                .where(Device.fingerprint == device_fingerprint, answering())
                .where(KernelVersion.sha256.not_in(list(skip)))
                .order_by(TuningSession.started_at.desc(), TuningSession.id.desc())
                .limit(1)
            )
        with self._session() as session:
            row = session.scalar(query)
            if row is None:
                return None
            return StoredKernel(row.name, row.sha256, row.template_source, row.space_source)

    def tuned_kernel_names(self, device_fingerprint: str) -> list[str]:
        query = (
            select(KernelVersion.name)
            .join(TuningSession, TuningSession.kernel_version_id == KernelVersion.id)
            .join(Device, TuningSession.device_id == Device.id)
            .where(Device.fingerprint == device_fingerprint, answering())
            .distinct()
            .order_by(KernelVersion.name)
        )
        with self._session() as session:
            return list(session.scalars(query))

    def best_per_workload(
        self, device_fingerprint: str, kernel_name: str, kernel_sha256: str
    ) -> list[LookupRow]:
        """The best verified measurement of every workload tuned on a device with one kernel
        version, in one query: ranked as ``best`` ranks for time (confirmed first, then the
        fastest median, then the earliest row).
        """
        unconfirmed = case((TuningSession.strategy == CONFIRM_STRATEGY, 0), else_=1)
        rank = (
            func.row_number()
            .over(
                partition_by=TuningSession.workload_id,
                order_by=(unconfirmed, MeasurementRow.median_s, MeasurementRow.id),
            )
            .label("rank")
        )
        ranked = (
            select(MeasurementRow.id.label("measurement_id"), rank)
            .join(TuningSession, MeasurementRow.session_id == TuningSession.id)
            .join(Device, TuningSession.device_id == Device.id)
            .join(KernelVersion, TuningSession.kernel_version_id == KernelVersion.id)
            .where(
                Device.fingerprint == device_fingerprint,
                KernelVersion.name == kernel_name,
                KernelVersion.sha256 == kernel_sha256,
                MeasurementRow.status == Status.OK.value,
                MeasurementRow.median_s.is_not(None),
                MeasurementRow.gflops.is_not(None),
                answering(),
            )
            .subquery()
        )
        query = (
            select(MeasurementRow, WorkloadRow)
            .join(ranked, ranked.c.measurement_id == MeasurementRow.id)
            .join(TuningSession, MeasurementRow.session_id == TuningSession.id)
            .join(WorkloadRow, TuningSession.workload_id == WorkloadRow.id)
            .where(ranked.c.rank == 1)
            .order_by(WorkloadRow.key)
        )
        with self._session() as session:
            rows = session.execute(query).all()
        return [
            LookupRow(
                workload_key=workload.key,
                problem=workload.problem,
                shape=dict(workload.shape),
                dtype=workload.dtype,
                config=dict(row.config),
                median_s=float(row.median_s),
                spread_s=float(row.spread_s or 0.0),
                gflops=float(row.gflops),
                measurement_id=row.id,
            )
            for row, workload in rows
        ]

    def measurement_stamp(self) -> int:
        """The newest measurement id of the sessions that answer: a cheap check (one indexed
        lookup a session) of whether cached lookup tables are stale, which a write token's
        uploads leave fresh.
        """
        newest = (
            select(func.max(MeasurementRow.id))
            .where(MeasurementRow.session_id == TuningSession.id)
            .scalar_subquery()
        )
        query = select(func.max(newest)).select_from(TuningSession).where(answering())
        with self._session() as session:
            return session.scalar(query) or 0

    def version_stamp(self, device_fingerprint: str, kernel_sha256: str) -> tuple[int, int]:
        """The newest id and the number of the measurements of one kernel version on one
        device: what a model trained on them depends on, in one indexed query instead of
        reading them all.
        """
        query = (
            select(func.coalesce(func.max(MeasurementRow.id), 0), func.count(MeasurementRow.id))
            .join(TuningSession, MeasurementRow.session_id == TuningSession.id)
            .join(Device, TuningSession.device_id == Device.id)
            .join(KernelVersion, TuningSession.kernel_version_id == KernelVersion.id)
            .where(Device.fingerprint == device_fingerprint, KernelVersion.sha256 == kernel_sha256)
        )
        with self._session() as session:
            newest, count = session.execute(query).one()
        return int(newest), int(count)

    def history(
        self, kernel_name: str, kernel_sha256: str, device_fingerprint: str | None = None
    ) -> list[HistoryRecord]:
        """Every measurement of one kernel version, on every device (or the one given) and
        workload, failures included: what the cost model warm-starts from
        (``ModelSearch(history=...)``) and the lookup's model trains on.
        """
        # Plain columns, not ORM objects: a device tuned for many shapes has a million rows,
        # and the times and messages the model does not read are most of each row.
        query = (
            select(
                MeasurementRow.config,
                MeasurementRow.status,
                MeasurementRow.median_s,
                MeasurementRow.flops,
                TuningSession.device_id,
                TuningSession.workload_id,
            )
            .join(TuningSession, MeasurementRow.session_id == TuningSession.id)
            .join(KernelVersion, TuningSession.kernel_version_id == KernelVersion.id)
            .where(KernelVersion.name == kernel_name, KernelVersion.sha256 == kernel_sha256)
            .where(answering())
            .order_by(MeasurementRow.id)
        )
        devices_query = select(Device)
        if device_fingerprint is not None:
            devices_query = devices_query.where(Device.fingerprint == device_fingerprint)
        with self._session() as session:
            devices = {
                device.id: {name: getattr(device, name) for name in HISTORY_DEVICE}
                for device in session.scalars(devices_query)
            }
            shapes = {
                workload.id: workload.shape for workload in session.scalars(select(WorkloadRow))
            }
            rows = session.execute(query.where(TuningSession.device_id.in_(list(devices)))).all()
        ok = Status.OK.value
        return [
            HistoryRecord(
                device=devices[device_id],
                workload=dict(shapes[workload_id]),
                config=dict(config),
                time_s=median_s if status == ok else None,
                flops=flops,
            )
            for config, status, median_s, flops, device_id, workload_id in rows
        ]


def _tuned(
    session: Session,
    device_fingerprint: str,
    kernel_name: str,
    workload_key: str,
    kernel_sha256: str | None,
) -> tuple[Device, KernelVersion, WorkloadRow] | None:
    """The rows naming a device, kernel version and workload; without a sha256, the kernel
    version last tuned there.
    """
    device = session.scalar(select(Device).filter_by(fingerprint=device_fingerprint))
    workload = session.scalar(select(WorkloadRow).filter_by(key=workload_key))
    if device is None or workload is None:
        return None
    versions = select(KernelVersion).where(KernelVersion.name == kernel_name)
    if kernel_sha256 is None:
        versions = (
            versions.join(TuningSession, TuningSession.kernel_version_id == KernelVersion.id)
            .where(TuningSession.device_id == device.id, TuningSession.workload_id == workload.id)
            .where(answering())
            .order_by(TuningSession.started_at.desc(), TuningSession.id.desc())
            .limit(1)
        )
    else:
        versions = versions.where(KernelVersion.sha256 == kernel_sha256)
    kernel = session.scalar(versions)
    return None if kernel is None else (device, kernel, workload)


def answering() -> ColumnElement[bool]:
    """The sessions whose measurements may answer (``best``, lookups, exports, the lookup's
    model): those written to the database directly, and those uploaded with a ``trusted``
    token. A ``write`` token's uploads are kept and shown, but cannot crown a config: its
    holder could send any time it likes (issue 45).
    """
    untrusted = (
        select(SessionUpload.session_id)
        .join(ApiToken, SessionUpload.token_id == ApiToken.id)
        .where(ApiToken.scope != TRUSTED_SCOPE)
    )
    return TuningSession.id.not_in(untrusted)


def measurements_of(device_id: int, kernel_version_id: int, workload_id: int) -> Select[Any]:
    """Measurement rows of one device, kernel version and workload, over the sessions that
    answer.
    """
    return (
        select(MeasurementRow)
        .join(TuningSession, MeasurementRow.session_id == TuningSession.id)
        .where(
            TuningSession.device_id == device_id,
            TuningSession.kernel_version_id == kernel_version_id,
            TuningSession.workload_id == workload_id,
            answering(),
        )
    )


def _rank(
    session: Session, scope: Select[Any], objective: Objective, *, prefer_confirmed: bool
) -> list[MeasurementRow]:
    """Passing rows, best first. Energy objectives rank on JSON fields, so ranking happens
    here rather than in SQL; a workload has thousands of rows at most.
    """
    rows = session.execute(
        scope.add_columns(TuningSession.strategy)
        .where(MeasurementRow.status == Status.OK.value)
        .where(MeasurementRow.median_s.is_not(None))
        .order_by(MeasurementRow.id)
    ).all()
    ranked = []
    for row, strategy in rows:
        value = score(row.median_s, row.extra, objective)
        if value is not None:
            unconfirmed = prefer_confirmed and strategy != CONFIRM_STRATEGY
            ranked.append(((unconfirmed, value, row.id), row))
    return [row for _, row in sorted(ranked, key=lambda pair: pair[0])]


@dataclass(frozen=True)
class StoredDevice:
    """A device as the database knows it (limits included), without an OpenCL driver."""

    fingerprint: str
    name: str
    platform_name: str
    platform_version: str
    vendor: str
    driver_version: str
    compute_units: int
    max_work_group_size: int
    local_mem_size: int
    global_mem_size: int
    device_type: str
    extensions: str = ""

    @classmethod
    def from_row(cls, row: Device) -> StoredDevice:
        return cls(**{name: getattr(row, name) for name in cls.__dataclass_fields__})

    @classmethod
    def of(cls, info: DeviceInfo) -> StoredDevice:
        """A device of this machine as the database would store it, stored or not."""
        return cls(**{name: getattr(info, name) for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class StoredKernel:
    name: str
    sha256: str
    template_source: str
    space_source: str


@dataclass(frozen=True)
class LookupRow:
    """One workload's best verified measurement on a device, for a lookup table."""

    workload_key: str
    problem: str
    shape: dict[str, int]
    dtype: str
    config: dict[str, int]
    median_s: float
    spread_s: float
    gflops: float
    measurement_id: int


#: Device columns a history record carries: what the cost model's device features read.
HISTORY_DEVICE = (
    "fingerprint",
    "name",
    "platform_name",
    "device_type",
    "compute_units",
    "max_work_group_size",
    "local_mem_size",
    "global_mem_size",
    "extensions",
)
