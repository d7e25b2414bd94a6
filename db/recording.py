"""Writing a tuning run down: identity rows, sessions, claims on configs, measurements, and
the per-session reads a run and an upload need.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    ColumnElement,
    Insert,
    func,
    select,
    union,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from octune.core.results import (
    CONFIRM_STRATEGY,
    Measurement,
    Status,
    config_key,
)
from octune.db.engine import Database
from octune.db.models import (
    MESSAGE_MAX_CHARS,
    SESSION_END_STATUSES,
    ConfigClaim,
    Device,
    KernelVersion,
    MeasurementRow,
    TuningSession,
    WorkloadRow,
    utcnow,
)
from octune.db.queries import measurements_of

if TYPE_CHECKING:  # importing it would load pyopencl, which the server does not need
    from octune.tuner.device import DeviceInfo


class Recording(Database):
    """What a tuning run writes: the device, kernel version and workload it tunes, its
    sessions, the configs it claims and the measurements it takes, each committed at once.
    """

    def device_id(self, info: DeviceInfo) -> int:
        device_id = self._get_or_create(
            Device,
            {"fingerprint": info.fingerprint},
            platform_name=info.platform_name,
            platform_version=info.platform_version,
            vendor=info.vendor,
            name=info.name,
            driver_version=info.driver_version,
            compute_units=info.compute_units,
            max_work_group_size=info.max_work_group_size,
            local_mem_size=info.local_mem_size,
            global_mem_size=info.global_mem_size,
            device_type=info.device_type,
            extensions=info.extensions,
        )
        if info.extensions:  # a device stored before its extensions were kept learns them
            with self._session() as session:
                session.execute(
                    update(Device)
                    .where(Device.id == device_id, Device.extensions == "")
                    .values(extensions=info.extensions)
                )
        return device_id

    def kernel_version_id(
        self, name: str, sha256: str, template_source: str, space_source: str
    ) -> int:
        return self._get_or_create(
            KernelVersion,
            {"name": name, "sha256": sha256},
            template_source=template_source,
            space_source=space_source,
        )

    def stored_kernel_version_id(self, name: str, sha256: str) -> int | None:
        """The version's id where the database has it; unlike ``kernel_version_id``, a read."""
        with self._session() as session:
            return session.scalar(select(KernelVersion.id).filter_by(name=name, sha256=sha256))

    def workload_id(self, problem: str, key: str, shape: dict[str, int], dtype: str) -> int:
        return self._get_or_create(
            WorkloadRow,
            {"key": key},
            problem=problem,
            shape={name: int(size) for name, size in shape.items()},
            dtype=dtype,
        )

    def start_session(
        self,
        device_id: int,
        kernel_version_id: int,
        workload_id: int,
        strategy: str,
        seed: int | None,
        settings: dict[str, Any],
    ) -> int:
        with self._session() as session:
            row = TuningSession(
                device_id=device_id,
                kernel_version_id=kernel_version_id,
                workload_id=workload_id,
                strategy=strategy,
                seed=seed,
                settings={**settings, **_this_process()},
                status="running",
                octune_version=_octune_version(),
            )
            session.add(row)
            session.flush()
            return row.id

    def close_dead_sessions(self) -> int:
        """Mark "interrupted" the running sessions whose process on this host is gone (killed,
        or its machine restarted), so that no session stays "running" forever.
        """
        me = _this_process()
        closed = 0
        with self._session() as session:
            for row in session.scalars(select(TuningSession).filter_by(status="running")):
                host, pid = row.settings.get("host"), row.settings.get("pid")
                if host == me["host"] and isinstance(pid, int) and not _alive(pid):
                    row.status, row.finished_at = "interrupted", utcnow()
                    closed += 1
        return closed

    def claim(
        self, session_id: int, scope: tuple[int, int, int], config: Mapping[str, int]
    ) -> bool:
        """Whether this session may measure `config`: it claimed it now, or took over the
        claim of a session that ended without measuring it. False: another search has it.
        """
        device_id, kernel_version_id, workload_id = scope
        key = config_key(config)
        insert = self._insert_or_skip(ConfigClaim)
        where = (*_claims_of(scope), ConfigClaim.config_key == key)
        with self._session() as session:
            claimed = session.execute(
                insert.values(
                    device_id=device_id, kernel_version_id=kernel_version_id,
                    workload_id=workload_id, config_key=key, session_id=session_id,
                    created_at=utcnow(),
                )
            ).all()  # fmt: skip
            if claimed:
                return True
            holder = session.execute(
                select(ConfigClaim.session_id, TuningSession.status)
                .join(TuningSession, ConfigClaim.session_id == TuningSession.id)
                .where(*where)
            ).one()
            if holder.session_id == session_id:
                return True
            measured = session.scalar(
                measurements_of(*scope)
                .where(MeasurementRow.config_key == key)
                .with_only_columns(func.count())
            )
            if holder.status == "running" or measured:
                return False
            taken = session.execute(
                update(ConfigClaim)
                .where(*where, ConfigClaim.session_id == holder.session_id)
                .values(session_id=session_id)
                .returning(ConfigClaim.id)
            ).all()
            return len(taken) == 1

    def taken(self, scope: tuple[int, int, int]) -> int:
        """Configs of a workload measured or claimed by any session: what two searches that
        finish one budget together (--resume) count against it.
        """
        measured = measurements_of(*scope).with_only_columns(MeasurementRow.config_key)
        claimed = select(ConfigClaim.config_key).where(*_claims_of(scope))
        keys = union(measured, claimed).subquery()
        with self._session() as session:
            return int(session.scalar(select(func.count()).select_from(keys)) or 0)

    def confirmed_config_keys(
        self, device_id: int, kernel_version_id: int, workload_id: int
    ) -> set[str]:
        """Configs re-measured by a confirm session, even one cut short."""
        scope = measurements_of(device_id, kernel_version_id, workload_id).where(
            TuningSession.strategy == CONFIRM_STRATEGY
        )
        with self._session() as session:
            return set(session.scalars(scope.with_only_columns(MeasurementRow.config_key)))

    def session_status(self, session_id: int) -> str:
        with self._session() as session:
            status = session.scalar(select(TuningSession.status).filter_by(id=session_id))
        if status is None:
            raise ValueError(f"no tuning session {session_id}")
        return status

    def finish_session(self, session_id: int, status: str) -> None:
        if status not in SESSION_END_STATUSES:
            raise ValueError(f"session status must be one of {sorted(SESSION_END_STATUSES)}")
        with self._session() as session:
            row = session.get(TuningSession, session_id)
            if row is None:
                raise ValueError(f"no tuning session {session_id}")
            row.status = status
            row.finished_at = utcnow()

    def _insert_or_skip(self, model: type[MeasurementRow | ConfigClaim]) -> Insert:
        """An INSERT that skips a row a unique index already holds (SQLite and PostgreSQL
        spell it alike), so racing writers need no check before they write.
        """
        dialect_insert = pg_insert if self._engine.dialect.name == "postgresql" else sqlite_insert
        # RETURNING tells what was stored: rowcount reads -1 through the ORM on PostgreSQL.
        return dialect_insert(model).on_conflict_do_nothing().returning(model.id)

    def add_measurement(self, session_id: int, m: Measurement) -> bool:
        """Store one measurement; False if the session holds that config already."""
        return self.add_measurements(session_id, [m]) == 1

    def add_measurements(self, session_id: int, measurements: Iterable[Measurement]) -> int:
        """Store, in one transaction, the measurements whose config the session does not hold
        yet, and count them: the unique index decides, so racing writers store each once.
        """
        insert = self._insert_or_skip(MeasurementRow)
        added = 0
        with self._session() as session:
            for m in measurements:
                added += len(
                    session.execute(insert.values(measurement_values(session_id, m))).all()
                )
        return added

    def origin_session(
        self,
        origin: str,
        device_id: int,
        kernel_version_id: int,
        workload_id: int,
        strategy: str,
        settings: dict[str, Any],
    ) -> int:
        """The session `origin` names, created by whichever writer comes first."""
        return self._get_or_create(
            TuningSession,
            {"origin": origin},
            device_id=device_id,
            kernel_version_id=kernel_version_id,
            workload_id=workload_id,
            strategy=strategy,
            seed=None,
            settings=dict(settings),
            status="completed",
            finished_at=utcnow(),
            octune_version=_octune_version(),
        )

    def session_record(self, session_id: int) -> dict[str, Any] | None:
        """A session with its device, kernel, workload and measurements as plain data: what
        a tuning machine uploads to a config server.
        """
        with self._session() as session:
            found = session.execute(
                select(TuningSession, Device, KernelVersion, WorkloadRow)
                .join(Device, TuningSession.device_id == Device.id)
                .join(KernelVersion, TuningSession.kernel_version_id == KernelVersion.id)
                .join(WorkloadRow, TuningSession.workload_id == WorkloadRow.id)
                .where(TuningSession.id == session_id)
            ).one_or_none()
            if found is None:
                return None
            row, device, kernel, workload = found
            measurements = session.scalars(
                select(MeasurementRow)
                .where(MeasurementRow.session_id == session_id)
                .order_by(MeasurementRow.id)
            ).all()
            device_fields = ("platform_name", "platform_version", "vendor", "name",
                             "driver_version", "compute_units", "max_work_group_size",
                             "local_mem_size", "global_mem_size", "device_type",
                             "extensions")  # fmt: skip
            measurement_fields = ("config", "status", "times_s", "flops", "max_error",
                                  "message", "extra")  # fmt: skip
            return {
                "device": {name: getattr(device, name) for name in device_fields},
                "kernel": {
                    "name": kernel.name,
                    "sha256": kernel.sha256,
                    "template_source": kernel.template_source,
                    "space_source": kernel.space_source,
                },
                "workload": {
                    "problem": workload.problem,
                    "dtype": workload.dtype,
                    **workload.shape,
                },
                "session": {
                    "id": row.id,
                    "strategy": row.strategy,
                    "seed": row.seed,
                    "settings": row.settings,
                    "status": row.status,
                    "started_at": row.started_at.isoformat(),
                    "octune_version": row.octune_version,
                },
                "measurements": [
                    {name: getattr(m, name) for name in measurement_fields} for m in measurements
                ],
            }

    def measured_config_keys(
        self, device_id: int, kernel_version_id: int, workload_id: int
    ) -> set[str]:
        """Every config tried in any session, failed ones too: a resumed run skips them all."""
        query = (
            select(MeasurementRow.config_key)
            .join(TuningSession, MeasurementRow.session_id == TuningSession.id)
            .where(
                TuningSession.device_id == device_id,
                TuningSession.kernel_version_id == kernel_version_id,
                TuningSession.workload_id == workload_id,
            )
            .distinct()
        )
        with self._session() as session:
            return set(session.scalars(query))

    def search_seconds(self, device_id: int, kernel_version_id: int, workload_id: int) -> float:
        """Wall time of the earlier search sessions of one workload, confirmations left out:
        what a resumed run counts against its time budget. A session killed before it could
        finish ends at its last stored measurement.
        """
        last_measured = (
            select(MeasurementRow.session_id, func.max(MeasurementRow.created_at).label("last"))
            .group_by(MeasurementRow.session_id)
            .subquery()
        )
        query = (
            select(TuningSession.started_at, TuningSession.finished_at, last_measured.c.last)
            .outerjoin(last_measured, last_measured.c.session_id == TuningSession.id)
            .where(
                TuningSession.device_id == device_id,
                TuningSession.kernel_version_id == kernel_version_id,
                TuningSession.workload_id == workload_id,
                TuningSession.strategy != CONFIRM_STRATEGY,
            )
        )
        with self._session() as session:
            spans = session.execute(query).all()
        return sum(
            max(0.0, ((finished or last or started) - started).total_seconds())
            for started, finished, last in spans
        )

    def session_measurements(self, session_id: int) -> list[Measurement]:
        query = (
            select(MeasurementRow)
            .where(MeasurementRow.session_id == session_id)
            .order_by(MeasurementRow.id)
        )
        with self._session() as session:
            rows = session.scalars(query).all()
        return [
            Measurement(
                config=dict(row.config),
                status=Status(row.status),
                times_s=tuple(row.times_s),
                flops=row.flops,
                max_error=row.max_error,
                message=row.message,
                extra=dict(row.extra),
            )
            for row in rows
        ]


def _claims_of(scope: tuple[int, int, int]) -> tuple[ColumnElement[bool], ...]:
    """Conditions that pick the claims of one device, kernel version and workload."""
    device_id, kernel_version_id, workload_id = scope
    return (
        ConfigClaim.device_id == device_id,
        ConfigClaim.kernel_version_id == kernel_version_id,
        ConfigClaim.workload_id == workload_id,
    )


def measurement_values(session_id: int, m: Measurement) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "config": {name: int(value) for name, value in m.config.items()},
        "config_key": config_key(m.config),
        "status": Status(m.status).value,
        "median_s": m.median_s,
        "spread_s": m.spread_s,
        "times_s": [float(t) for t in m.times_s],
        "flops": int(m.flops),
        "gflops": m.gflops,
        "max_error": m.max_error,
        "message": m.message[:MESSAGE_MAX_CHARS],
        "extra": dict(m.extra),
        "created_at": utcnow(),
    }


def _this_process() -> dict[str, Any]:
    """What a session records of the process running it, to tell later whether it died."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _octune_version() -> str:
    try:
        return version("octune")
    except PackageNotFoundError:
        return "unknown"
