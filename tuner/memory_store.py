"""A ``TuningStore`` in memory (TVM's ``MemoryDatabase`` is the model): a tuning run that
keeps nothing, and the proof that the protocol is all a session and a campaign need, since
their tests run on it as on the database (``octune.db.store.Store``). One process, no threads:
claims only keep one session from measuring a config another running one holds.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from octune.core.results import (
    CONFIRM_STRATEGY,
    BestResult,
    Failures,
    HistoryRecord,
    Measurement,
    Objective,
    config_key,
    failure_signature,
    score,
    top_distinct,
)
from octune.tuner.tuning_store import Scope

if TYPE_CHECKING:
    from octune.tuner.device import DeviceInfo

#: What a history record carries of its device (the database's rows carry the same).
_DEVICE_FIELDS = ("fingerprint", "name", "platform_name", "vendor", "driver_version",
                  "compute_units", "max_work_group_size", "local_mem_size", "global_mem_size",
                  "device_type", "extensions")  # fmt: skip


@dataclass
class _Session:
    scope: Scope
    strategy: str
    status: str = "running"
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    # (measurement id, measurement, when it was stored), in the order stored
    rows: list[tuple[int, Measurement, float]] = field(default_factory=list)


class MemoryStore:
    """Sessions and measurements in dicts, with the database's answers."""

    def __init__(self) -> None:
        self._devices: dict[str, tuple[int, DeviceInfo]] = {}
        self._kernels: dict[tuple[str, str], int] = {}
        self._workloads: dict[str, tuple[int, dict[str, int]]] = {}
        self._sessions: dict[int, _Session] = {}
        self._claims: dict[tuple[Scope, str], int] = {}
        self._next_measurement = 1

    # -- identity ---------------------------------------------------------------------------

    def device_id(self, info: DeviceInfo) -> int:
        found = self._devices.setdefault(info.fingerprint, (len(self._devices) + 1, info))
        return found[0]

    def kernel_version_id(
        self, name: str, sha256: str, template_source: str, space_source: str
    ) -> int:
        return self._kernels.setdefault((name, sha256), len(self._kernels) + 1)

    def stored_kernel_version_id(self, name: str, sha256: str) -> int | None:
        return self._kernels.get((name, sha256))

    def workload_id(self, problem: str, key: str, shape: dict[str, int], dtype: str) -> int:
        found = self._workloads.setdefault(key, (len(self._workloads) + 1, dict(shape)))
        return found[0]

    # -- writing a run ----------------------------------------------------------------------

    def start_session(
        self,
        device_id: int,
        kernel_version_id: int,
        workload_id: int,
        strategy: str,
        seed: int | None,
        settings: dict[str, Any],
    ) -> int:
        session_id = len(self._sessions) + 1
        self._sessions[session_id] = _Session((device_id, kernel_version_id, workload_id), strategy)
        return session_id

    def finish_session(self, session_id: int, status: str) -> None:
        session = self._sessions[session_id]
        session.status, session.finished = status, time.monotonic()

    def close_dead_sessions(self) -> int:
        return 0  # every session lives in this process

    def claim(self, session_id: int, scope: Scope, config: Mapping[str, int]) -> bool:
        key = config_key(config)
        holder = self._claims.setdefault((scope, key), session_id)
        if holder == session_id:
            return True
        if self._sessions[holder].status == "running" or key in self._keys(scope):
            return False
        self._claims[(scope, key)] = session_id
        return True

    def taken(self, scope: Scope) -> int:
        claimed = {key for (claim_scope, key) in self._claims if claim_scope == scope}
        return len(claimed | self._keys(scope))

    def add_measurement(self, session_id: int, m: Measurement) -> bool:
        session = self._sessions[session_id]
        if any(config_key(row.config) == config_key(m.config) for _, row, _ in session.rows):
            return False
        session.rows.append((self._next_measurement, m, time.monotonic()))
        self._next_measurement += 1
        return True

    def add_measurements(self, session_id: int, measurements: Iterable[Measurement]) -> int:
        return sum(self.add_measurement(session_id, m) for m in measurements)

    def session_measurements(self, session_id: int) -> list[Measurement]:
        """A session's measurements in the order stored (as ``Store`` offers them)."""
        return [m for _, m, _ in self._sessions[session_id].rows]

    # -- reading back -----------------------------------------------------------------------

    def measured_config_keys(
        self, device_id: int, kernel_version_id: int, workload_id: int
    ) -> set[str]:
        return self._keys((device_id, kernel_version_id, workload_id))

    def confirmed_config_keys(
        self, device_id: int, kernel_version_id: int, workload_id: int
    ) -> set[str]:
        scope = (device_id, kernel_version_id, workload_id)
        return {config_key(m.config) for s, _, m, _ in self._rows(scope) if s == CONFIRM_STRATEGY}

    def search_seconds(self, device_id: int, kernel_version_id: int, workload_id: int) -> float:
        """Wall time of the earlier search sessions; a session cut short ends at its last row."""
        total = 0.0
        for session in self._sessions.values():
            if session.scope != (device_id, kernel_version_id, workload_id):
                continue
            if session.strategy == CONFIRM_STRATEGY:
                continue
            end = session.finished or max((at for *_, at in session.rows), default=None)
            total += 0.0 if end is None else end - session.started
        return total

    def top_configs(
        self,
        device_id: int,
        kernel_version_id: int,
        workload_id: int,
        count: int,
        objective: Objective = "time",
        within: float = math.inf,
    ) -> list[dict[str, int]]:
        ranked = self._ranked((device_id, kernel_version_id, workload_id), objective, False)
        return top_distinct([(value, m.config) for value, m in ranked], count, within)

    def best(
        self,
        device_fingerprint: str,
        kernel_name: str,
        workload_key: str,
        kernel_sha256: str | None = None,
        objective: Objective = "time",
    ) -> BestResult | None:
        found = self._scope(device_fingerprint, kernel_name, workload_key, kernel_sha256)
        if found is None:
            return None
        scope, sha256 = found
        ranked = self._ranked(scope, objective, True, with_ids=True)
        if not ranked:
            return None
        (_, measurement_id, session_id, at), fastest = ranked[0]
        searched = [m for strategy, _, m, _ in self._rows(scope) if strategy != CONFIRM_STRATEGY]
        assert fastest.median_s is not None  # ranked rows passed
        return BestResult(
            config=dict(fastest.config),
            median_s=fastest.median_s,
            spread_s=fastest.spread_s or 0.0,
            gflops=fastest.gflops,
            measurement_id=measurement_id,
            session_id=session_id,
            kernel_name=kernel_name,
            kernel_sha256=sha256,
            device_fingerprint=device_fingerprint,
            workload_key=workload_key,
            measured_at=datetime.now(UTC) - _ago(at),
            measured=len(searched),
            failed=sum(not m.ok for m in searched),
        )

    def failures(
        self,
        device_fingerprint: str,
        kernel_name: str,
        workload_key: str,
        kernel_sha256: str | None = None,
    ) -> Failures | None:
        found = self._scope(device_fingerprint, kernel_name, workload_key, kernel_sha256)
        if found is None:
            return None
        rows = [m for _, _, m, _ in self._rows(found[0])]
        if not rows or any(m.ok for m in rows):
            return None
        reasons = Counter(failure_signature(m.status.value, m.message) for m in rows)
        return Failures(measured=len(rows), reasons=reasons)

    def history(
        self, kernel_name: str, kernel_sha256: str, device_fingerprint: str | None = None
    ) -> list[HistoryRecord]:
        kernel_id = self._kernels.get((kernel_name, kernel_sha256))
        devices = {
            device_id: {name: getattr(info, name, None) for name in _DEVICE_FIELDS}
            for fingerprint, (device_id, info) in self._devices.items()
            if device_fingerprint in (None, fingerprint)
        }
        shapes = {workload_id: shape for workload_id, shape in self._workloads.values()}
        records = []
        for session in self._sessions.values():
            device_id, version_id, workload_id = session.scope
            if version_id != kernel_id or device_id not in devices:
                continue
            records += [
                (
                    measurement_id,
                    HistoryRecord(
                        devices[device_id],
                        shapes[workload_id],
                        dict(m.config),
                        m.median_s if m.ok else None,
                        m.flops,
                    ),
                )
                for measurement_id, m, _ in session.rows
            ]
        return [record for _, record in sorted(records, key=lambda pair: pair[0])]

    # -- helpers ----------------------------------------------------------------------------

    def _rows(self, scope: Scope) -> list[tuple[str, int, Measurement, float]]:
        """(strategy, session id, measurement, when stored) of every row of the scope."""
        return [
            (session.strategy, session_id, m, at)
            for session_id, session in self._sessions.items()
            if session.scope == scope
            for _, m, at in session.rows
        ]

    def _keys(self, scope: Scope) -> set[str]:
        return {config_key(m.config) for _, _, m, _ in self._rows(scope)}

    def _ranked(
        self, scope: Scope, objective: Objective, prefer_confirmed: bool, with_ids: bool = False
    ) -> list[Any]:
        """Passing rows, best first: (score, measurement) or, ``with_ids``, ((unconfirmed,
        score, measurement id, session id, stored at) ..., measurement); a confirmed row
        first where ``prefer_confirmed``, then the score, then the earlier row.
        """
        ranked = []
        for session_id, session in self._sessions.items():
            if session.scope != scope or (
                not prefer_confirmed and session.strategy == CONFIRM_STRATEGY
            ):
                continue
            for measurement_id, m, at in session.rows:
                value = score(m.median_s, m.extra, objective) if m.ok else None
                if value is None:
                    continue
                unconfirmed = prefer_confirmed and session.strategy != CONFIRM_STRATEGY
                ranked.append(((unconfirmed, value, measurement_id, session_id, at), m))
        ranked.sort(key=lambda pair: pair[0][:3])
        if with_ids:
            return [((value, mid, sid, at), m) for (_, value, mid, sid, at), m in ranked]
        return [(key[1], m) for key, m in ranked]

    def _scope(
        self, fingerprint: str, kernel_name: str, workload_key: str, sha256: str | None
    ) -> tuple[Scope, str] | None:
        """The scope a device, kernel (version, else the one last tuned there) and workload
        name, with that version's sha256.
        """
        device = self._devices.get(fingerprint)
        workload = self._workloads.get(workload_key)
        if device is None or workload is None:
            return None
        versions = {
            version_id: sha for (name, sha), version_id in self._kernels.items()
            if name == kernel_name and sha256 in (None, sha)
        }  # fmt: skip
        tuned = [
            session.scope
            for session in self._sessions.values()
            if session.scope[0] == device[0]
            and session.scope[2] == workload[0]
            and session.scope[1] in versions
        ]
        if sha256 is not None:
            version = next(iter(versions), None)
            return None if version is None else ((device[0], version, workload[0]), sha256)
        if not tuned:
            return None
        scope = tuned[-1]  # the version last tuned
        return scope, versions[scope[1]]


def _ago(monotonic_at: float) -> timedelta:
    return timedelta(seconds=max(0.0, time.monotonic() - monotonic_at))
