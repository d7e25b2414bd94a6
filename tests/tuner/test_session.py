"""Sessions survive hung and crashing candidates, confirm their winners, obey their budgets,
and reuse built programs from the on-disk cache.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pyopencl as cl
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from octune.catalogue.registry import KernelSpec, kernel_from_texts, load_kernel
from octune.catalogue.space import ConfigTable
from octune.catalogue.starts import config_starts
from octune.core.results import CONFIRM_STRATEGY, Measurement, Status, config_key
from octune.db.models import TuningSession
from octune.db.store import Store
from octune.kernels.gemm import gemm_workload
from octune.lookup.tables import default_config
from octune.tuner import programs
from octune.tuner.device import DeviceInfo
from octune.tuner.measure import DeviceRunner
from octune.tuner.memory_store import MemoryStore
from octune.tuner.programs import ProgramCache
from octune.tuner.session import (
    CONFIRM_WITHIN,
    DEFAULT_ROW,
    FIRST_WINDOW,
    SYSTEMATIC_AFTER,
    Budget,
    Pipeline,
    Progress,
    SessionReport,
    Settings,
    SystematicFailure,
    open_workers,
    run_session,
    start_rows,
)
from octune.tuner.workers import Measurer, MeasuringContext, Workers

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
WORKLOAD = gemm_workload(21, 18, 7)


def fixture_kernel(space: str) -> KernelSpec:
    """A test-only kernel: the fixture template stall.cl with one of the fixture spaces."""
    source = (FIXTURES / "stall.cl").read_text()
    return kernel_from_texts(space, source, (FIXTURES / f"{space}.yaml").read_text())


@pytest.fixture(scope="module")
def stall_kernel() -> KernelSpec:
    return fixture_kernel("stall")


def test_hang_and_crash_are_recorded_and_the_session_goes_on(
    tmp_path: Path, stall_kernel: KernelSpec, device_info: DeviceInfo
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'stall.db'}")
    table = stall_kernel.space.enumerate(device_info.limits)
    settings = Settings(jobs=1, timeout=20, confirm=0, cache_root=str(tmp_path / "cache"))
    report = run_session(
        store, device_info, stall_kernel, WORKLOAD, table,
        strategy="exhaustive", budget=Budget(candidates=3), settings=settings,
    )  # fmt: skip
    by_mode = {m.config["MODE"]: m for m in store.session_measurements(report.session_id)}
    assert by_mode[1].status is Status.TIMEOUT, by_mode[1].message
    assert by_mode[2].status is Status.CRASH, by_mode[2].message
    assert "SIGSEGV" in by_mode[2].message or "died" in by_mode[2].message
    assert by_mode[0].status is Status.OK, by_mode[0].message
    assert report.progress.failures == {"timeout": 1, "crash": 1}


def test_confirm_phase_remeasures_the_top_and_best_prefers_it(
    tmp_path: Path, gemm_kernel: KernelSpec, gemm_table: ConfigTable, device_info: DeviceInfo
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'confirm.db'}")
    settings = Settings(jobs=0, confirm=2, cache_root=str(tmp_path / "cache"))
    report = run_session(
        store, device_info, gemm_kernel, WORKLOAD, gemm_table,
        strategy="random", budget=Budget(candidates=3), settings=settings, seed=4,
    )  # fmt: skip
    assert all(m.ok and len(m.times_s) >= 10 for m in report.confirmed)
    searched = sorted(
        (m for m in store.session_measurements(report.session_id) if m.ok),
        key=lambda m: m.median_s or math.inf,
    )
    fastest = searched[0].median_s or math.inf
    contenders = [m for m in searched[:2] if (m.median_s or math.inf) <= CONFIRM_WITHIN * fastest]
    assert [config_key(m.config) for m in report.confirmed] == [
        config_key(m.config) for m in contenders
    ]
    best = store.best(device_info.fingerprint, gemm_kernel.name, WORKLOAD.key)
    assert best is not None and best.session_id != report.session_id
    assert best.measured == 3  # confirmations are not counted as candidates
    assert store.session_record(best.session_id)["session"]["strategy"] == CONFIRM_STRATEGY


def test_a_config_is_confirmed_once(
    tmp_path: Path, gemm_kernel: KernelSpec, gemm_table: ConfigTable, device_info: DeviceInfo
) -> None:
    """A second session of the same workload confirms only the top configs no session has
    confirmed yet.
    """
    store = Store(f"sqlite:///{tmp_path / 'confirm.db'}")
    settings = Settings(jobs=0, confirm=2, cache_root=str(tmp_path / "cache"))
    reports = []
    for seed in (4, 5):
        report = run_session(
            store, device_info, gemm_kernel, WORKLOAD, gemm_table,
            strategy="random", budget=Budget(candidates=3), settings=settings, seed=seed,
        )  # fmt: skip
        reports.append(report)
    first, second = ({config_key(m.config) for m in r.confirmed} for r in reports)
    assert first and not first & second
    kernel = gemm_kernel
    scope = (
        store.device_id(device_info),
        store.kernel_version_id(
            kernel.name, kernel.sha256, kernel.source, kernel.space.source_text
        ),
        store.workload_id(WORKLOAD.problem, WORKLOAD.key, WORKLOAD.shape, WORKLOAD.dtype),
    )
    top = {config_key(c) for c in store.top_configs(*scope, 2, within=CONFIRM_WITHIN)}
    assert top <= first | second  # every top config confirmed, once


@pytest.mark.parametrize("memory", [False, True], ids=["database", "memory"])
def test_patience_stops_at_the_first_candidate_without_improvement(
    tmp_path: Path, device_info: DeviceInfo, memory: bool
) -> None:
    """On the database and on the in-memory store alike: the protocol is all a session needs."""
    kernel = fixture_kernel("naive")
    store = MemoryStore() if memory else Store(f"sqlite:///{tmp_path / 'patience.db'}")
    settings = Settings(jobs=0, confirm=0, cache_root=str(tmp_path / "cache"))
    report = run_session(
        store, device_info, kernel, WORKLOAD, kernel.space.enumerate(device_info.limits),
        strategy="exhaustive", budget=Budget(candidates=5, patience=1), settings=settings,
    )  # fmt: skip
    times = [m.median_s for m in store.session_measurements(report.session_id)]
    assert all(t is not None for t in times)
    improving = [i for i in range(1, len(times)) if times[i] < min(times[:i])]
    first_stall = next((i for i in range(1, 5) if i not in improving), None)
    expected = 5 if first_stall is None else first_stall + 1
    assert report.progress.tried == len(times) == expected


def test_program_cache_serves_a_second_runner_and_survives_a_corrupt_entry(
    tmp_path: Path,
    cl_device: cl.Device,
    gemm_kernel: KernelSpec,
    gemm_table: ConfigTable,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(programs, "SELF_CACHING_PLATFORMS", ())  # ours, even on PoCL
    cache = ProgramCache(tmp_path / "cache")
    config = gemm_table.config(0)
    options = gemm_kernel.build_options(config, WORKLOAD)
    first = DeviceRunner(cl_device, gemm_kernel, WORKLOAD, seed=1, cache=cache)
    assert first.measure(config).status is Status.OK
    entry = cache.path(first.info.fingerprint, gemm_kernel.source, options)
    assert entry.is_file() and entry.stat().st_size > 0

    entry.write_bytes(b"not a program binary")
    second = DeviceRunner(cl_device, gemm_kernel, WORKLOAD, seed=2, cache=cache)
    assert second.measure(config).status is Status.OK  # rebuilt from source, not an error
    assert entry.read_bytes() != b"not a program binary"


def test_a_driver_that_caches_programs_itself_is_left_to_it(
    tmp_path: Path, cl_device: cl.Device, gemm_kernel: KernelSpec, gemm_table: ConfigTable
) -> None:
    if not cl_device.platform.name.startswith(programs.SELF_CACHING_PLATFORMS):
        pytest.skip(f"{cl_device.platform.name} keeps no cache of its own")
    cache = ProgramCache(tmp_path / "cache")
    runner = DeviceRunner(cl_device, gemm_kernel, WORKLOAD, seed=1, cache=cache)
    assert runner.measure(gemm_table.config(0)).status is Status.OK
    assert not (tmp_path / "cache").exists()  # no binary asked of the driver, none written


def test_measurer_hands_a_candidate_over_and_its_result_back_later(
    tmp_path: Path, device_info: DeviceInfo
) -> None:
    kernel = fixture_kernel("naive")
    context = MeasuringContext(
        device_info.fingerprint, kernel, WORKLOAD, seed=3, cache_root=str(tmp_path)
    )
    measurer = Measurer(context, timeout=60)
    config = kernel.space.enumerate(device_info.limits).config(1)
    try:
        with pytest.raises(RuntimeError, match="start"):
            measurer.finish()
        measurer.start(config)
        with pytest.raises(RuntimeError, match="busy"):
            measurer.start(config)  # one candidate on the device at a time
        result = measurer.finish()
        assert result.status is Status.OK, result.message
        assert result.config == config
        assert measurer.measure(config).status is Status.OK  # ready for the next one
    finally:
        measurer.close()


@pytest.mark.parametrize(("jobs", "first_window"), [(0, 1), (1, 2), (8, FIRST_WINDOW)])
def test_pipeline_keeps_few_candidates_in_flight_at_first(
    tmp_path: Path, device_info: DeviceInfo, jobs: int, first_window: int
) -> None:
    """A learning strategy proposes blind to every candidate in flight: a session starts with
    a narrow window (one without builders, which measures each candidate alone), and every
    candidate submitted comes back as a result.
    """
    kernel = fixture_kernel("naive")
    context = MeasuringContext(
        device_info.fingerprint, kernel, WORKLOAD, seed=3, cache_root=str(tmp_path)
    )
    table = kernel.space.enumerate(device_info.limits)
    workers = Workers(device_info.fingerprint, str(tmp_path), jobs)
    pipeline = Pipeline(context, workers, timeout=60)
    try:
        assert pipeline.window == first_window
        rows = list(range(min(3, len(table))))
        for row in rows:
            pipeline.submit(row, table.config(row))
        results = [pipeline.next_result() for _ in rows]
        assert sorted(row for row, _ in results) == rows
        assert all(m.status is Status.OK for _, m in results), [m.message for _, m in results]
        assert pipeline.pending == 0
        assert pipeline.window <= max(1, 2 * jobs)  # widens, if at all, up to two per builder
    finally:
        pipeline.close()
        workers.close()


def test_one_set_of_workers_serves_the_sessions_of_several_kernels(
    tmp_path: Path, device_info: DeviceInfo
) -> None:
    """``octune tune`` starts its builders and measurer once per run: a session leaves the
    workers it was given running, switched to the next kernel's context in the same processes.
    """
    store = Store(f"sqlite:///{tmp_path / 'shared.db'}")
    settings = Settings(jobs=1, confirm=1, cache_root=str(tmp_path / "cache"))
    measurers, confirmed = set(), []
    with open_workers(device_info, settings) as workers:
        for kernel in (fixture_kernel("naive"), load_kernel("gemm"), fixture_kernel("naive")):
            report = run_session(
                store, device_info, kernel, WORKLOAD, kernel.space.enumerate(device_info.limits),
                strategy="random", budget=Budget(candidates=3), settings=settings, seed=5,
                workers=workers,
            )  # fmt: skip
            measured = store.session_measurements(report.session_id)
            assert measured and all(m.ok for m in measured), [m.message for m in measured]
            assert all(m.ok for m in report.confirmed)
            confirmed.append(len(report.confirmed))
            measurers.add(
                workers.measurer(
                    MeasuringContext(device_info.fingerprint, kernel, WORKLOAD), 60
                ).pid
            )
    assert len(measurers) == 1
    assert confirmed[:2] == [1, 1]  # the third session's top config may be confirmed already


def test_resume_counts_the_time_of_earlier_sessions_against_the_time_budget(
    tmp_path: Path, device_info: DeviceInfo
) -> None:
    kernel = fixture_kernel("naive")
    url = f"sqlite:///{tmp_path / 'resume.db'}"
    store = Store(url)
    table = kernel.space.enumerate(device_info.limits)
    settings = Settings(jobs=0, confirm=0, cache_root=str(tmp_path / "cache"))

    def tune(budget: Budget, settings: Settings) -> SessionReport:
        return run_session(
            store, device_info, kernel, WORKLOAD, table,
            strategy="exhaustive", budget=budget, settings=settings,
        )  # fmt: skip

    killed = tune(Budget(candidates=2), settings)
    with Session(create_engine(url)) as db, db.begin():  # it ran an hour, then was killed
        row = db.get(TuningSession, killed.session_id)
        assert row is not None
        row.started_at -= timedelta(hours=1)
        row.finished_at = None  # its end is then its last stored measurement

    resumed = tune(Budget(seconds=1800), replace(settings, resume=True))
    assert resumed.progress.tried == 0  # the hour already spent is over the half-hour budget
    assert 3600 <= resumed.progress.earlier_s < 3600 + 600
    again = tune(Budget(seconds=1800, candidates=1), settings)  # a new run starts its own clock
    assert again.progress.tried == 1 and again.progress.earlier_s == 0


def test_a_kernel_that_never_builds_stops_after_its_first_candidates(
    tmp_path: Path, device_info: DeviceInfo
) -> None:
    """Every build fails alike (as every build did on PoCL 3.0 on a Zen 5): the session stops
    after SYSTEMATIC_AFTER candidates instead of spending its budget, keeps what it measured,
    and `Store.failures` tells why the workload has no verified config.
    """
    gemm = load_kernel("gemm")
    broken = kernel_from_texts(
        "gemm", "#error octune-test never builds\n" + gemm.source, gemm.space.source_text
    )
    store = Store(f"sqlite:///{tmp_path / 'broken.db'}")
    table = broken.space.enumerate(device_info.limits)
    settings = Settings(jobs=0, confirm=3, cache_root=str(tmp_path / "cache"))
    with pytest.raises(SystematicFailure) as raised:
        run_session(
            store, device_info, broken, WORKLOAD, table,
            strategy="random", budget=Budget(candidates=50), settings=settings, seed=0,
        )  # fmt: skip
    message = str(raised.value)
    assert "\n" not in message and device_info.name in message
    assert (
        f"first {SYSTEMATIC_AFTER} candidates" in message and "octune-test never builds" in message
    )

    failures = store.failures(device_info.fingerprint, "gemm", WORKLOAD.key, broken.sha256)
    assert failures is not None and failures.measured == SYSTEMATIC_AFTER
    assert str(failures).startswith(f"all {SYSTEMATIC_AFTER} measured configs failed: build_error:")
    engine = create_engine(store.url)
    with Session(engine) as session:
        statuses = [row.status for row in session.query(TuningSession)]
    assert statuses == ["failed"]  # and no confirm session was started


def test_only_identical_opening_failures_count_as_systematic() -> None:
    def failed(message: str) -> Measurement:
        return Measurement({"X": 1}, Status.BUILD_ERROR, message=f"<kernel>:1:2: error: {message}")

    alike = Progress(space_size=10, already_measured=0)
    for _ in range(SYSTEMATIC_AFTER - 1):
        alike.record(failed("same"))
    assert alike.systematic_failure is None  # not yet: too few candidates
    alike.record(failed("same"))
    assert alike.systematic_failure == "build_error: error: same"

    mixed = Progress(space_size=10, already_measured=0)
    for index in range(SYSTEMATIC_AFTER):
        mixed.record(failed("same" if index else "other"))
    assert mixed.systematic_failure is None

    with_a_pass = Progress(space_size=10, already_measured=0)
    with_a_pass.record(Measurement({"X": 1}, Status.OK, times_s=(1e-3,), flops=10))
    for _ in range(SYSTEMATIC_AFTER):
        with_a_pass.record(failed("same"))
    assert with_a_pass.systematic_failure is None  # only the first candidates are judged


def test_a_kernel_that_extends_another_first_measures_its_fastest_tiles(
    tmp_path: Path, device_info: DeviceInfo
) -> None:
    """gemm_splitk_serial's space extends gemm's: its model search measures gemm's fastest
    config at the same shape (KSPLIT at its first value) before any config of its own choosing,
    and a kernel whose base has not been tuned there starts from its space's default, what a
    lookup answers an untuned shape with.
    """
    store = Store(f"sqlite:///{tmp_path / 'extends.db'}")
    settings = Settings(jobs=1, confirm=0, cache_root=str(tmp_path / "cache"))
    workload = gemm_workload(37, 45, 1003)
    base, extension = load_kernel("gemm"), load_kernel("gemm_splitk_serial")
    assert extension.space.extends == "gemm"
    sessions = []
    with open_workers(device_info, settings) as workers:
        for kernel, strategy, candidates in ((extension, "model", 1), (base, "random", 4),
                                             (extension, "model", 1)):  # fmt: skip
            report = run_session(
                store, device_info, kernel, workload, kernel.space.enumerate(device_info.limits),
                strategy=strategy, budget=Budget(candidates=candidates), settings=settings,
                seed=3, workers=workers,
            )  # fmt: skip
            sessions.append(store.session_measurements(report.session_id))
    cold, tiles, seeded = sessions
    fastest = min((m for m in tiles if m.ok), key=lambda m: m.median_s or 0.0)
    assert seeded[0].config == {**fastest.config, "KSPLIT": 4}
    assert cold[0].config != seeded[0].config
    default = extension.space.enumerate(device_info.limits).config(DEFAULT_ROW)
    assert cold[0].config == default
    first_legal = default_config(extension.space, device_info.limits)
    assert default == dict(zip(extension.space.parameter_names, first_legal, strict=True))


def test_a_gpu_s_starts_are_the_rows_legal_on_the_device(device_info: DeviceInfo) -> None:
    """The shipped starts of gemm for a GPU, as rows of a table with an NVIDIA GPU's limits
    (asynchronous copies legal): each start once, in its order; on a device without
    asynchronous copies the starts that use them are no rows; a CPU has none.
    """
    gemm = load_kernel("gemm")
    starts = config_starts(gemm, "gpu")
    gpu = {
        **device_info.limits,
        "async_copy": 1,
        "max_work_group_size": 1024,
        "max_work_item_size_0": 1024,
        "max_work_item_size_1": 1024,
        "local_mem_size": 49152,
    }
    table = gemm.space.enumerate(gpu)
    rows = start_rows(gemm, table, "gpu")
    assert [table.config(row) for row in rows] == starts
    plain = gemm.space.enumerate({**gpu, "async_copy": 0})
    kept = [plain.config(row) for row in start_rows(gemm, plain, "gpu")]
    assert kept == [start for start in starts if start["ASYNC"] == 0] and kept
    assert start_rows(gemm, table, "cpu") == []
