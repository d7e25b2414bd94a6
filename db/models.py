"""The tuning database schema. Migrations in ``migrations/versions`` must create exactly this.

Rows are only ever added: a measurement is evidence, and the best config is a query over all
of them, not a value kept up to date.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Deterministic constraint names: alembic needs names to alter constraints (SQLite batch
# mode recreates tables), and PostgreSQL and SQLite then agree on them.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

MESSAGE_MAX_CHARS = 2000
SESSION_END_STATUSES = frozenset({"completed", "interrupted", "failed"})


def utcnow() -> datetime:
    return datetime.now(UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """A timestamp that always reads back timezone-aware in UTC.

    SQLite has no time zone type and returns naive datetimes; without this, results read
    from SQLite and from PostgreSQL would compare and print differently.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: store timezone-aware UTC times")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Device(Base):
    """One OpenCL device as its driver reports it; a driver update is a new row."""

    __tablename__ = "devices"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(16), unique=True)
    platform_name: Mapped[str] = mapped_column(String(255))
    platform_version: Mapped[str] = mapped_column(String(255))
    vendor: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(255))
    driver_version: Mapped[str] = mapped_column(String(255))
    compute_units: Mapped[int] = mapped_column(Integer)
    max_work_group_size: Mapped[int] = mapped_column(BigInteger)
    local_mem_size: Mapped[int] = mapped_column(BigInteger)
    global_mem_size: Mapped[int] = mapped_column(BigInteger)
    device_type: Mapped[str] = mapped_column(String(32))
    # CL_DEVICE_EXTENSIONS, space-separated ("" for a device stored before octune kept them).
    extensions: Mapped[str] = mapped_column(Text, default="", server_default="")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class KernelVersion(Base):
    """A kernel template and its search space, identified by content: an edit is a new version."""

    __tablename__ = "kernel_versions"
    __table_args__ = (UniqueConstraint("name", "sha256"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    sha256: Mapped[str] = mapped_column(String(64))
    template_source: Mapped[str] = mapped_column(Text)
    space_source: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class WorkloadRow(Base):
    """A problem shape; ``key`` is its canonical text so lookups need not compare JSON."""

    __tablename__ = "workloads"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    problem: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(String(512), unique=True)
    shape: Mapped[dict[str, int]] = mapped_column(JSON)
    dtype: Mapped[str] = mapped_column(String(32))


class TuningSession(Base):
    """One run of a strategy; kept so results can be traced to how they were found.

    ``origin`` names a session that many writers share and only one may create (the one that
    imports of bundles into a device, kernel version and workload add to); a unique index,
    so concurrent creators find the same row.
    """

    __tablename__ = "tuning_sessions"
    __table_args__ = (Index("uq_tuning_sessions_origin", "origin", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"), index=True)
    kernel_version_id: Mapped[int] = mapped_column(ForeignKey("kernel_versions.id"), index=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"), index=True)
    strategy: Mapped[str] = mapped_column(String(64))
    seed: Mapped[int | None] = mapped_column(BigInteger)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    octune_version: Mapped[str] = mapped_column(String(64))
    origin: Mapped[str | None] = mapped_column(String(100))


class MeasurementRow(Base):
    """One measured candidate, failed ones included: they tell the next run what not to try.
    A session measures a config once: the unique index makes a repeated upload or import of
    it a no-op however many writers race (unique indexes, not constraints, because SQLite
    adds them without rebuilding the table).
    """

    __tablename__ = "measurements"
    __table_args__ = (
        Index("uq_measurements_session_id_config_key", "session_id", "config_key", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("tuning_sessions.id"), index=True)
    config: Mapped[dict[str, int]] = mapped_column(JSON)
    config_key: Mapped[str] = mapped_column(String(1024), index=True)
    status: Mapped[str] = mapped_column(String(32))
    median_s: Mapped[float | None] = mapped_column(Double)
    spread_s: Mapped[float | None] = mapped_column(Double)
    times_s: Mapped[list[float]] = mapped_column(JSON)
    flops: Mapped[int] = mapped_column(BigInteger)
    gflops: Mapped[float | None] = mapped_column(Double)
    max_error: Mapped[float | None] = mapped_column(Double)
    message: Mapped[str] = mapped_column(Text)
    extra: Mapped[dict[str, float]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class ConfigClaim(Base):
    """A config a running search is about to measure, so that another search of the same
    device, kernel version and workload leaves it alone. A claim whose session ended without
    a measurement of it (killed, or dropped in flight) may be taken over.
    """

    __tablename__ = "config_claims"
    __table_args__ = (
        # Named here: the convention's name would pass PostgreSQL's 63 characters.
        UniqueConstraint(
            "device_id", "kernel_version_id", "workload_id", "config_key",
            name="uq_config_claims_config",
        ),
    )  # fmt: skip

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"))
    kernel_version_id: Mapped[int] = mapped_column(ForeignKey("kernel_versions.id"))
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"))
    config_key: Mapped[str] = mapped_column(String(1024))
    session_id: Mapped[int] = mapped_column(ForeignKey("tuning_sessions.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


#: The scope of a token whose uploads answer lookups (``octune.db.queries.answering``).
class NetworkRow(Base):
    """A network as `tune --model` read it: its distinct layers (family, shape, dtype,
    launches, node names) and what it runs beside them, so that the dashboard and `report`
    can show any ONNX file tuned into this database without the file (a request never names
    one). ``digest`` identifies the same network read again.
    """

    __tablename__ = "networks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    layers: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    not_tuned: Mapped[list[str]] = mapped_column(JSON)
    left_out: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


TRUSTED_SCOPE = "trusted"


class ApiToken(Base):
    """A server access token: ``read``, ``write`` (uploads and jobs, kept but answering
    nothing) or ``trusted`` (a write token whose measurements answer). Only its SHA-256 is
    kept: a leaked database leaks no token. A revoked or expired token is refused; its row
    stays, since uploads and jobs name the token they came with.
    """

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    scope: Mapped[str] = mapped_column(String(16))
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)  # None: never
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UtcDateTime)  # to the minute


class SessionUpload(Base):
    """Ties a tuning session to the identifier its uploader chose, so that sending the same
    session again (in full, or resuming part way) adds only what the server lacks.
    """

    __tablename__ = "session_uploads"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uid: Mapped[str] = mapped_column(String(64), unique=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("tuning_sessions.id"), unique=True)
    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


# --- the tuning farm: jobs leased by agents (octune.farm) ----------------------------------


class JobSubmission(Base):
    """What `octune jobs submit` asked for: a workload set (a built-in network or a workloads
    list) on every device whose fingerprint, name or driver matches ``devices``. It stays
    open, so a device registered later gets a job of its own, until it is cancelled.
    """

    __tablename__ = "job_submissions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    devices: Mapped[str] = mapped_column(String(255))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    strategy: Mapped[str] = mapped_column(String(64))
    budget_seconds: Mapped[float | None] = mapped_column(Double)
    budget_candidates: Mapped[int | None] = mapped_column(Integer)
    max_attempts: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class FarmAgent(Base):
    """A running `octune agent`; ``last_seen_at`` moves with each of its calls."""

    __tablename__ = "farm_agents"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    host: Mapped[str] = mapped_column(String(255))
    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id"), index=True)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class FarmAgentDevice(Base):
    """A device an agent drives."""

    __tablename__ = "farm_agent_devices"
    __table_args__ = (UniqueConstraint("agent_id", "device_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    agent_id: Mapped[int] = mapped_column(ForeignKey("farm_agents.id"))
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"), index=True)


class FarmJob(Base):
    """One submission on one device. An agent holds it through a lease: ``lease_epoch``
    counts the leases granted, and every call of the holder names its epoch, so a holder
    whose lease expired and was granted again is refused (a fencing token).
    """

    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("submission_id", "device_id"),
        Index("ix_jobs_status_device_id", "status", "device_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("job_submissions.id"))
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"))
    status: Mapped[str] = mapped_column(String(16))
    lease_epoch: Mapped[int] = mapped_column(Integer, default=0)
    lease_agent_id: Mapped[int | None] = mapped_column(ForeignKey("farm_agents.id"))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    tried_s: Mapped[float] = mapped_column(Double, default=0.0)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class JobSession(Base):
    """A tuning session an agent uploaded for a job: the job's progress is a query over
    their measurements, and a resumed job starts from them.
    """

    __tablename__ = "job_sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("tuning_sessions.id"), unique=True)
