"""What a tuning run needs of a database: the methods the session and the campaign call.

The tuner depends on this protocol and not on ``octune.db``, which implements it
(``octune.db.store.Store``) and depends on the tuner's types: dependencies point one way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from octune.core.results import BestResult, Failures, HistoryRecord, Measurement, Objective

if TYPE_CHECKING:
    from octune.catalogue.family import Workload
    from octune.catalogue.registry import KernelSpec
    from octune.tuner.device import DeviceInfo

#: A workload's measurements on one device and kernel version: (device, kernel version,
#: workload) ids.
Scope = tuple[int, int, int]


class TuningStore(Protocol):
    """Sessions, claims and measurements written; earlier results read back."""

    def device_id(self, info: DeviceInfo) -> int: ...

    def kernel_version_id(
        self, name: str, sha256: str, template_source: str, space_source: str
    ) -> int: ...

    def stored_kernel_version_id(self, name: str, sha256: str) -> int | None: ...

    def workload_id(self, problem: str, key: str, shape: dict[str, int], dtype: str) -> int: ...

    def start_session(
        self,
        device_id: int,
        kernel_version_id: int,
        workload_id: int,
        strategy: str,
        seed: int | None,
        settings: dict[str, Any],
    ) -> int: ...

    def finish_session(self, session_id: int, status: str) -> None: ...

    def close_dead_sessions(self) -> int: ...

    def claim(self, session_id: int, scope: Scope, config: Mapping[str, int]) -> bool: ...

    def taken(self, scope: Scope) -> int: ...

    def add_measurement(self, session_id: int, m: Measurement) -> bool: ...

    def add_measurements(self, session_id: int, measurements: Iterable[Measurement]) -> int: ...

    def measured_config_keys(
        self, device_id: int, kernel_version_id: int, workload_id: int
    ) -> set[str]: ...

    def confirmed_config_keys(
        self, device_id: int, kernel_version_id: int, workload_id: int
    ) -> set[str]: ...

    def search_seconds(self, device_id: int, kernel_version_id: int, workload_id: int) -> float: ...

    def top_configs(
        self,
        device_id: int,
        kernel_version_id: int,
        workload_id: int,
        count: int,
        objective: Objective = "time",
        within: float = math.inf,
    ) -> list[dict[str, int]]: ...

    def best(
        self,
        device_fingerprint: str,
        kernel_name: str,
        workload_key: str,
        kernel_sha256: str | None = None,
        objective: Objective = "time",
    ) -> BestResult | None: ...

    def failures(
        self,
        device_fingerprint: str,
        kernel_name: str,
        workload_key: str,
        kernel_sha256: str | None = None,
    ) -> Failures | None: ...

    def history(
        self, kernel_name: str, kernel_sha256: str, device_fingerprint: str | None = None
    ) -> list[HistoryRecord]: ...


def record_session(
    store: TuningStore,
    device_id: int,
    kernel: KernelSpec,
    workload: Workload,
    measurements: Iterable[Measurement],
    *,
    strategy: str,
    seed: int | None,
    settings: dict[str, Any],
) -> int:
    """A completed session of measurements taken outside a search (a runtime's confirmation,
    a farm's earlier leases), so that searches skip their configs as ``--resume`` skips a
    killed run's and lookups answer from them; how many it stored.
    """
    session_id = store.start_session(
        device_id,
        store.kernel_version_id(kernel.name, kernel.sha256, kernel.source,
                                kernel.space.source_text),
        store.workload_id(workload.problem, workload.key, workload.shape, workload.dtype),
        strategy=strategy, seed=seed, settings=settings,
    )  # fmt: skip
    added = store.add_measurements(session_id, measurements)
    store.finish_session(session_id, "completed")
    return added
