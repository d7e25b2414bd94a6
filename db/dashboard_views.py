"""What the dashboard's pages read: tuning sessions with every candidate, a confirmation
folded into the search it confirms. Read-only queries over the same tables the tuner writes.

A confirm session re-measures a search's best configs on the same device, kernel version and
workload (``CONFIRM_STRATEGY``); it belongs to the latest search of that scope started before
it, so the overview lists searches only and each search's page shows its confirmation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Row, Select, case, func, select
from sqlalchemy.orm import Session

from octune.core.results import CONFIRM_STRATEGY, Status
from octune.db.models import Device, KernelVersion, MeasurementRow, TuningSession, WorkloadRow
from octune.db.store import Store

#: Candidates a session page draws; a longer session shows its first ones and says so.
MAX_CANDIDATES = 20_000


@dataclass(frozen=True)
class SessionRow:
    """One search session as the overview lists it."""

    session_id: int
    device_name: str
    device_fingerprint: str
    kernel: str
    workload: str  # its key
    problem: str
    shape: dict[str, int]
    dtype: str
    strategy: str
    started_at: datetime
    status: str
    candidates: int
    failures: int
    best_gflops: float | None  # the confirmed figure where a confirmation measured it
    confirmed_by: tuple[int, ...]  # the confirm sessions folded into it


@dataclass(frozen=True)
class Candidate:
    config: dict[str, int]
    status: str
    gflops: float | None
    median_s: float | None
    message: str
    confirm: bool  # measured again by a confirm session


@dataclass(frozen=True)
class SessionDetail:
    row: SessionRow
    candidates: list[Candidate]  # the search's, in measuring order, then its confirmations'
    truncated: bool


def _sessions(ids: list[int] | None = None, limit: int | None = None) -> Select[tuple]:
    counts = (
        select(
            MeasurementRow.session_id.label("session_id"),
            func.count().label("candidates"),
            func.sum(case((MeasurementRow.status != Status.OK.value, 1), else_=0)).label(
                "failures"
            ),
            func.max(MeasurementRow.gflops).label("best"),
        )
        .group_by(MeasurementRow.session_id)
        .subquery()
    )
    query = (
        select(
            TuningSession,
            Device.name,
            Device.fingerprint,
            KernelVersion.name,
            WorkloadRow.key,
            WorkloadRow.problem,
            WorkloadRow.shape,
            WorkloadRow.dtype,
            func.coalesce(counts.c.candidates, 0),
            func.coalesce(counts.c.failures, 0),
            counts.c.best,
        )
        .join(Device, TuningSession.device_id == Device.id)
        .join(KernelVersion, TuningSession.kernel_version_id == KernelVersion.id)
        .join(WorkloadRow, TuningSession.workload_id == WorkloadRow.id)
        .outerjoin(counts, counts.c.session_id == TuningSession.id)
        .order_by(TuningSession.started_at.desc(), TuningSession.id.desc())
    )
    if ids is not None:
        query = query.where(TuningSession.id.in_(ids))
    else:
        query = query.where(TuningSession.strategy != CONFIRM_STRATEGY)
    return query.limit(limit) if limit is not None else query


def _confirmed_best(session: Session, folded: dict[int, tuple[int, ...]]) -> dict[int, float]:
    """Each confirmed search's best as its confirmation measured it: the figure a lookup
    answers, not the search's luckiest single run.
    """
    confirms = {confirm: search for search, ids in folded.items() for confirm in ids}
    if not confirms:
        return {}
    best = (
        select(MeasurementRow.session_id, func.max(MeasurementRow.gflops))
        .where(MeasurementRow.session_id.in_(confirms), MeasurementRow.status == Status.OK.value)
        .group_by(MeasurementRow.session_id)
    )
    found: dict[int, float] = {}
    for confirm, gflops in session.execute(best):
        if gflops is not None:
            search = confirms[confirm]
            found[search] = max(found.get(search, 0.0), gflops)
    return found


def _row(found: Row, confirmed_by: tuple[int, ...], confirmed: float | None) -> SessionRow:
    run, device, fingerprint, kernel, key, problem, shape, dtype, candidates, failures, best = found
    return SessionRow(
        session_id=run.id,
        device_name=device,
        device_fingerprint=fingerprint,
        kernel=kernel,
        workload=key,
        problem=problem,
        shape=dict(shape),
        dtype=dtype,
        strategy=run.strategy,
        started_at=run.started_at,
        status=run.status,
        candidates=int(candidates),
        failures=int(failures or 0),
        best_gflops=confirmed if confirmed is not None else best,
        confirmed_by=confirmed_by,
    )


def _confirmations(session: Session, searches: list[TuningSession]) -> dict[int, tuple[int, ...]]:
    """Each search's confirm sessions: those of its scope started after it and before the
    scope's next search.
    """
    scopes = {(s.device_id, s.kernel_version_id, s.workload_id) for s in searches}
    if not scopes:
        return {}
    same_scope = select(TuningSession).where(
        TuningSession.device_id.in_({d for d, _, _ in scopes}),
        TuningSession.workload_id.in_({w for _, _, w in scopes}),
    )
    runs: dict[tuple[int, int, int], list[TuningSession]] = {}
    for run in session.scalars(same_scope.order_by(TuningSession.started_at, TuningSession.id)):
        runs.setdefault((run.device_id, run.kernel_version_id, run.workload_id), []).append(run)
    folded: dict[int, list[int]] = {}
    for scope in scopes:
        search = None
        for run in runs.get(scope, []):
            if run.strategy != CONFIRM_STRATEGY:
                search = run.id
                folded.setdefault(search, [])
            elif search is not None:
                folded[search].append(run.id)
    return {search: tuple(confirms) for search, confirms in folded.items()}


def recent_sessions(store: Store, limit: int) -> list[SessionRow]:
    """The latest search sessions, newest first, each with its confirmations."""
    with store._session() as session:
        found = session.execute(_sessions(limit=limit)).all()
        folded = _confirmations(session, [row[0] for row in found])
        confirmed = _confirmed_best(session, folded)
        return [_row(r, folded.get(r[0].id, ()), confirmed.get(r[0].id)) for r in found]


def session_detail(store: Store, session_id: int) -> SessionDetail | None:
    """A session and every candidate it measured (a confirm session: its search's page)."""
    with store._session() as session:
        run = session.get(TuningSession, session_id)
        if run is None:
            return None
        if run.strategy == CONFIRM_STRATEGY:
            earlier = select(TuningSession.id).where(
                TuningSession.device_id == run.device_id,
                TuningSession.kernel_version_id == run.kernel_version_id,
                TuningSession.workload_id == run.workload_id,
                TuningSession.strategy != CONFIRM_STRATEGY,
                TuningSession.started_at <= run.started_at,
            )
            search = session.scalar(earlier.order_by(TuningSession.started_at.desc()).limit(1))
            if search is not None:
                return session_detail(store, search)
        folded = _confirmations(session, [run])
        confirms = folded.get(run.id, ())
        confirmed = _confirmed_best(session, folded).get(run.id)
        (found,) = session.execute(_sessions(ids=[run.id])).all()
        measured = (
            select(MeasurementRow)
            .where(MeasurementRow.session_id.in_([run.id, *confirms]))
            .order_by(MeasurementRow.session_id != run.id, MeasurementRow.id)
            .limit(MAX_CANDIDATES + 1)
        )
        candidates = [
            Candidate(
                config=dict(m.config),
                status=m.status,
                gflops=m.gflops,
                median_s=m.median_s,
                message=m.message[:300],
                confirm=m.session_id != run.id,
            )
            for m in session.scalars(measured)
        ]
        return SessionDetail(
            _row(found, confirms, confirmed),
            candidates[:MAX_CANDIDATES],
            len(candidates) > MAX_CANDIDATES,
        )
