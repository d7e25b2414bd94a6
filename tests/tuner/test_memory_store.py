"""The in-memory ``TuningStore`` answers as the database does: the same writes through the
protocol, then every read of the protocol compared, on a real SQLite store beside it.
"""

from __future__ import annotations

import pytest

from octune.catalogue.registry import load_kernel
from octune.core.results import CONFIRM_STRATEGY, Measurement, Status
from octune.db.store import Store
from octune.kernels.gemm import gemm_workload
from octune.tuner.device import DeviceInfo
from octune.tuner.memory_store import MemoryStore
from octune.tuner.tuning_store import TuningStore, record_session

WORKLOAD = gemm_workload(64, 64, 64)


def _write(store: TuningStore, device: DeviceInfo) -> tuple[int, int, int]:
    """A search (three passing configs, one wrong result, one build failure), a second
    search that loses a claim, a confirmation of the top two, then a recorded session.
    """
    kernel = load_kernel("gemm")
    scope = (
        store.device_id(device),
        store.kernel_version_id(kernel.name, kernel.sha256, kernel.source, "space"),
        store.workload_id(WORKLOAD.problem, WORKLOAD.key, WORKLOAD.shape, WORKLOAD.dtype),
    )
    flops = WORKLOAD.flops
    search = store.start_session(*scope, "random", 1, {})
    rows = [
        Measurement({"A": 1}, Status.OK, (3e-3, 3e-3, 3e-3), flops),
        Measurement({"A": 2}, Status.OK, (1e-3, 1.1e-3, 0.9e-3), flops),
        Measurement({"A": 3}, Status.OK, (1.2e-3,) * 3, flops),
        Measurement({"A": 4}, Status.WRONG_RESULT, (5e-4,), flops, max_error=3.0),
        Measurement({"A": 5}, Status.BUILD_ERROR, (), flops, message="error: no such thing"),
    ]
    for row in rows:
        assert store.claim(search, scope, row.config)
        assert store.add_measurement(search, row)
    assert not store.add_measurement(search, rows[0])  # a session holds a config once
    other = store.start_session(*scope, "random", 2, {})
    assert store.claim(search, scope, {"A": 6})
    assert not store.claim(other, scope, {"A": 6})  # a running session holds it
    store.finish_session(search, "completed")
    assert store.claim(other, scope, {"A": 6})  # its holder ended without measuring it
    store.finish_session(other, "completed")
    confirm = store.start_session(*scope, CONFIRM_STRATEGY, None, {})
    store.add_measurement(confirm, Measurement({"A": 3}, Status.OK, (0.95e-3,) * 5, flops))
    store.add_measurement(confirm, Measurement({"A": 2}, Status.OK, (1.05e-3,) * 5, flops))
    store.finish_session(confirm, "completed")
    # Measurements taken outside a search (a runtime's confirmation), stored as a session.
    taken = Measurement({"A": 7}, Status.OK, (2e-3,) * 3, flops)
    stored = record_session(store, scope[0], kernel, WORKLOAD, [taken, taken], strategy="load",
                            seed=0, settings={})  # fmt: skip
    assert stored == 1  # a session holds a config once
    return scope


def _reads(store: TuningStore, device: DeviceInfo, scope: tuple[int, int, int]) -> dict:
    kernel = load_kernel("gemm")
    best = store.best(device.fingerprint, "gemm", WORKLOAD.key)
    assert best is not None
    return {
        "measured": store.measured_config_keys(*scope),
        "confirmed": store.confirmed_config_keys(*scope),
        "top": store.top_configs(*scope, 3),
        "top within": store.top_configs(*scope, 5, within=1.5),
        "taken": store.taken(scope),
        "best": (
            best.config,
            best.median_s,
            best.spread_s,
            best.gflops,
            best.measured,
            best.failed,
            best.kernel_sha256,
            best.workload_key,
        ),
        "best of a version": store.best(device.fingerprint, "gemm", WORKLOAD.key, "0" * 64),
        "failures": store.failures(device.fingerprint, "gemm", WORKLOAD.key),
        "history": [
            (r.workload, r.config, r.time_s, r.flops, r.device["fingerprint"])
            for r in store.history("gemm", kernel.sha256)
        ],
        "version": store.stored_kernel_version_id("gemm", kernel.sha256) is not None,
    }


def test_memory_and_database_answer_alike(tmp_path, device_info: DeviceInfo) -> None:
    with Store(f"sqlite:///{tmp_path / 'parity.db'}") as database:
        expected = _reads(database, device_info, _write(database, device_info))
    memory = MemoryStore()
    found = _reads(memory, device_info, _write(memory, device_info))
    assert found == expected
    assert expected["best"][0] == {"A": 3}  # confirmed beats a faster search time
    assert expected["top"] == [{"A": 2}, {"A": 3}, {"A": 7}]  # the recorded one among them
    assert len(expected["history"]) == 8  # five searched, two confirmed, one recorded


def test_an_all_failed_workload_says_why(device_info: DeviceInfo) -> None:
    memory = MemoryStore()
    kernel = load_kernel("gemm")
    scope = (
        memory.device_id(device_info),
        memory.kernel_version_id(kernel.name, kernel.sha256, kernel.source, "space"),
        memory.workload_id(WORKLOAD.problem, WORKLOAD.key, WORKLOAD.shape, WORKLOAD.dtype),
    )
    session = memory.start_session(*scope, "random", 0, {})
    memory.add_measurement(session, Measurement({"A": 1}, Status.BUILD_ERROR, message="bad"))
    failures = memory.failures(device_info.fingerprint, "gemm", WORKLOAD.key)
    assert failures is not None and failures.measured == 1
    assert memory.best(device_info.fingerprint, "gemm", WORKLOAD.key) is None
    with pytest.raises(KeyError):
        memory.finish_session(99, "completed")
