"""The only way octune reads and writes its database, so every caller gets a migrated schema
and one-line errors instead of SQLAlchemy tracebacks.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import sqlite3
import time
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar

import platformdirs
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from filelock import FileLock, Timeout
from sqlalchemy import (
    ColumnElement,
    Connection,
    Insert,
    Select,
    case,
    create_engine,
    event,
    func,
    make_url,
    select,
    text,
    union,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from octune.db.models import (
    MESSAGE_MAX_CHARS,
    TRUSTED_SCOPE,
    ApiToken,
    ConfigClaim,
    Device,
    FarmAgent,
    FarmAgentDevice,
    KernelVersion,
    MeasurementRow,
    SessionUpload,
    TuningSession,
    Workload,
    utcnow,
)
from octune.tuner.errors import StoreError
from octune.tuner.results import (
    Measurement,
    Objective,
    Status,
    config_key,
    failure_signature,
    score,
)

if TYPE_CHECKING:  # importing it would load pyopencl, which the server does not need
    from octune.tuner.device import DeviceInfo

ENV_VAR = "OCTUNE_DATABASE_URL"
#: Seconds a SQLite writer waits for another's lock before giving up (Python's default is 5,
#: which ended tuning runs while an import or a server held the lock).
BUSY_TIMEOUT_ENV_VAR = "OCTUNE_DB_BUSY_TIMEOUT"
DEFAULT_BUSY_TIMEOUT_S = 120.0
# Any constant will do: it names octune's migration lock among PostgreSQL's advisory locks.
_PG_MIGRATION_LOCK = 0x6F6374756E65
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# Sessions of this strategy re-measure the top configs of a search: their rows rank first.
CONFIRM_STRATEGY = "confirm"
SESSION_END_STATUSES = frozenset({"completed", "interrupted", "failed"})
_WHERE = f"pass a writable path or another URL with --db or {ENV_VAR}"

_Row = TypeVar("_Row", Device, KernelVersion, Workload)


@dataclass(frozen=True)
class BestResult:
    """The fastest passing config, with enough provenance to judge how much to trust it."""

    config: dict[str, int]
    median_s: float
    spread_s: float
    gflops: float | None
    measurement_id: int
    session_id: int
    kernel_name: str
    kernel_sha256: str
    device_fingerprint: str
    workload_key: str
    measured_at: datetime
    measured: int  # measurement rows for this device, kernel version and workload
    failed: int  # of those, the ones whose status is not "ok"


@dataclass(frozen=True)
class Failures:
    """A workload whose every measurement failed: how many, and for which reasons."""

    measured: int
    reasons: Counter[str]  # "status: reason" -> how many measurements met it

    def __str__(self) -> str:
        (reason, count), *others = self.reasons.most_common()
        more = f" ({count} of them; {len(others)} other reason(s))" if others else ""
        return f"all {self.measured} measured configs failed: {reason}{more}"


def alembic_config(connection: Connection | None = None, url: str | None = None) -> Config:
    """An alembic config without alembic.ini, also for writing new revisions:
    ``command.revision(alembic_config(url="sqlite:///dev.db"), autogenerate=True, message=...)``.
    """
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["connection"] = connection
    return config


class Store:
    """A migrated database; each write is its own committed transaction, so a run that is
    killed keeps everything measured before it died.
    """

    def __init__(self, url: str) -> None:
        self.url = _mask(url)
        try:
            is_sqlite = make_url(url).get_backend_name() == "sqlite"
            connect_args = {"timeout": busy_timeout()} if is_sqlite else {}
            self._engine = create_engine(url, connect_args=connect_args)
        except ImportError as error:
            raise StoreError(
                f"cannot open database {self.url}: missing driver ({error}); install it "
                f"or pass another URL with --db or {ENV_VAR}"
            ) from error
        except (SQLAlchemyError, ValueError) as error:
            raise StoreError(
                f"cannot open database {self.url}: not a valid database URL ({_reason(error)}); "
                f"pass one like sqlite:////path/to/octune.db with --db or {ENV_VAR}"
            ) from error
        self.url = self._engine.url.render_as_string(hide_password=True)
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)
        try:
            if is_sqlite:
                self._prepare_sqlite()
            self._migrate()
        except (CommandError, Timeout) as error:
            self._engine.dispose()
            raise StoreError(
                f"cannot migrate database {self.url}: {_reason(error)}; it was probably written "
                "by a newer octune (upgrade octune), or another process holds its migration "
                "lock: pass another database or try again"
            ) from error
        except (SQLAlchemyError, OSError) as error:
            self._engine.dispose()
            fix = _WHERE
            if not is_sqlite:
                fix = f"check that the server is up and the credentials are right, or {fix}"
            raise StoreError(f"cannot open database {self.url}: {_reason(error)}; {fix}") from error

    def _migrate(self) -> None:
        """Bring the schema to head, one process at a time: tuners, importers and servers
        that open a new database together would otherwise all create its tables.
        """
        head = ScriptDirectory.from_config(alembic_config()).get_current_head()
        with self._engine.connect() as connection:
            if MigrationContext.configure(connection).get_current_revision() == head:
                return
        with self._migration_lock(), self._engine.begin() as connection:
            if self._engine.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                                   {"key": _PG_MIGRATION_LOCK})  # fmt: skip
            command.upgrade(alembic_config(connection), "head")

    def _migration_lock(self) -> AbstractContextManager[object]:
        """A file lock beside a SQLite file; PostgreSQL locks in the transaction itself."""
        database = self._engine.url.database
        if self._engine.dialect.name != "sqlite" or not database or database == ":memory:":
            return nullcontext()
        path = Path(database).expanduser()
        return FileLock(path.with_name(f"{path.name}.migrate-lock"), timeout=busy_timeout())

    def _prepare_sqlite(self) -> None:
        """WAL lets the server read while a tuning run writes; SQLite enforces foreign keys
        only when asked, per connection.
        """
        database = self._engine.url.database
        if database and database != ":memory:" and not self._engine.url.query.get("uri"):
            parent = Path(database).expanduser().parent
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except FileExistsError:  # Python's words for "a file is in the way" mislead
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(parent)) from None

        timeout = busy_timeout()

        @event.listens_for(self._engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            # Switching a new file to WAL needs it to itself and SQLite does not wait for
            # that (no busy handler), so processes opening one database together retry.
            deadline = time.monotonic() + timeout
            while True:
                try:
                    cursor.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError as error:
                    if "locked" not in str(error) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            cursor.close()

    @staticmethod
    def default_url() -> str:
        """The user's own database, unless the environment points at a shared one."""
        if url := os.environ.get(ENV_VAR):
            return url
        path = Path(platformdirs.user_data_dir("octune")) / "octune.db"
        return f"sqlite:///{path.as_posix()}"

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @contextmanager
    def _session(self) -> Iterator[Session]:
        """One committed transaction; database failures become a one-line StoreError."""
        try:
            with self._sessions.begin() as session:
                yield session
        except SQLAlchemyError as error:
            raise StoreError(
                f"cannot use database {self.url}: {_reason(error)}; check that it is reachable, "
                f"writable and not full, or pass another with --db or {ENV_VAR}"
            ) from error

    def _get_or_create(self, model: type[_Row], lookup: Mapping[str, Any], **values: Any) -> int:
        """Select, else insert; a concurrent insert of the same row loses the race and selects."""
        query = select(model.id).filter_by(**lookup)
        with self._session() as session:
            found = session.scalar(query)
            if found is not None:
                return found
        try:
            with self._session() as session:
                row = model(**lookup, **values)
                session.add(row)
                session.flush()
                return row.id
        except StoreError as error:
            if not isinstance(error.__cause__, IntegrityError):
                raise
        with self._session() as session:
            return session.execute(query).scalar_one()

    def device_id(self, info: DeviceInfo) -> int:
        return self._get_or_create(
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
        )

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
            Workload,
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
                _scope(*scope)
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
        measured = _scope(*scope).with_only_columns(MeasurementRow.config_key)
        claimed = select(ConfigClaim.config_key).where(*_claims_of(scope))
        keys = union(measured, claimed).subquery()
        with self._session() as session:
            return int(session.scalar(select(func.count()).select_from(keys)) or 0)

    def confirmed_config_keys(
        self, device_id: int, kernel_version_id: int, workload_id: int
    ) -> set[str]:
        """Configs re-measured by a confirm session, even one cut short."""
        scope = _scope(device_id, kernel_version_id, workload_id).where(
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
                select(TuningSession, Device, KernelVersion, Workload)
                .join(Device, TuningSession.device_id == Device.id)
                .join(KernelVersion, TuningSession.kernel_version_id == KernelVersion.id)
                .join(Workload, TuningSession.workload_id == Workload.id)
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
                             "local_mem_size", "global_mem_size", "device_type")  # fmt: skip
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

    def top_configs(
        self,
        device_id: int,
        kernel_version_id: int,
        workload_id: int,
        count: int,
        objective: Objective = "time",
    ) -> list[dict[str, int]]:
        """The `count` best distinct configs found by search sessions: the ones to confirm."""
        scope = _scope(device_id, kernel_version_id, workload_id).where(
            TuningSession.strategy != CONFIRM_STRATEGY
        )
        with self._session() as session:
            ranked = _rank(session, scope, objective, prefer_confirmed=False)
        configs: dict[str, dict[str, int]] = {}
        for row in ranked:
            configs.setdefault(row.config_key, dict(row.config))
            if len(configs) == count:
                break
        return list(configs.values())

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
            scope = _scope(device.id, kernel.id, workload.id)
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
                _scope(device.id, kernel.id, workload.id).with_only_columns(
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
    ) -> list[TunedWorkload]:
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
            select(MeasurementRow, Workload)
            .join(ranked, ranked.c.measurement_id == MeasurementRow.id)
            .join(TuningSession, MeasurementRow.session_id == TuningSession.id)
            .join(Workload, TuningSession.workload_id == Workload.id)
            .where(ranked.c.rank == 1)
            .order_by(Workload.key)
        )
        with self._session() as session:
            rows = session.execute(query).all()
        return [
            TunedWorkload(
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
            shapes = {workload.id: workload.shape for workload in session.scalars(select(Workload))}
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
) -> tuple[Device, KernelVersion, Workload] | None:
    """The rows naming a device, kernel version and workload; without a sha256, the kernel
    version last tuned there.
    """
    device = session.scalar(select(Device).filter_by(fingerprint=device_fingerprint))
    workload = session.scalar(select(Workload).filter_by(key=workload_key))
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


def _claims_of(scope: tuple[int, int, int]) -> tuple[ColumnElement[bool], ...]:
    """Conditions that pick the claims of one device, kernel version and workload."""
    device_id, kernel_version_id, workload_id = scope
    return (
        ConfigClaim.device_id == device_id,
        ConfigClaim.kernel_version_id == kernel_version_id,
        ConfigClaim.workload_id == workload_id,
    )


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


def _scope(device_id: int, kernel_version_id: int, workload_id: int) -> Select[Any]:
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


def busy_timeout() -> float:
    """Seconds a SQLite writer waits for a lock: $OCTUNE_DB_BUSY_TIMEOUT, or 120."""
    raw = os.environ.get(BUSY_TIMEOUT_ENV_VAR, "")
    try:
        seconds = float(raw) if raw else DEFAULT_BUSY_TIMEOUT_S
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 86400:
        raise StoreError(
            f"{BUSY_TIMEOUT_ENV_VAR}={raw!r} is not a number of seconds: set it to e.g. 120"
        )
    return seconds


def _reason(error: BaseException) -> str:
    """The driver's own words on one line, without SQLAlchemy's SQL echo and doc links."""
    if isinstance(error, DBAPIError) and error.orig is not None:
        error = error.orig
    text = " ".join(str(error).split()) or type(error).__name__
    return re.sub(r"\(Background on this error at: [^)]*\)", "", text).strip()


def _mask(url: str) -> str:
    """Hide a password even in a URL that SQLAlchemy cannot parse."""
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def _octune_version() -> str:
    try:
        return version("octune")
    except PackageNotFoundError:
        return "unknown"


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

    @classmethod
    def from_row(cls, row: Device) -> StoredDevice:
        return cls(**{name: getattr(row, name) for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class StoredKernel:
    name: str
    sha256: str
    template_source: str
    space_source: str


@dataclass(frozen=True)
class TunedWorkload:
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
)


@dataclass(frozen=True)
class HistoryRecord:
    """One stored measurement in its context (satisfies ``octune.tuner.cost_model.Record``)."""

    device: dict[str, Any]
    workload: dict[str, int]
    config: dict[str, int]
    time_s: float | None  # None: the config failed
    flops: int
