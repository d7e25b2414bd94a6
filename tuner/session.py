"""A tuning session: a strategy proposes, builders compile ahead, a supervised worker measures,
every result is committed, and the top candidates are confirmed at the end.

Each measurement is committed while the next one is taken, so a killed session loses only
the candidates in flight, and a repeated session skips configs already stored for the same
device, kernel version and workload.
"""

from __future__ import annotations

import logging
import math
import os
import re
import sys
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field, replace
from importlib.metadata import version

from octune.catalogue.family import Workload
from octune.catalogue.registry import KernelSpec, load_kernel
from octune.catalogue.space import ConfigTable
from octune.catalogue.starts import config_starts
from octune.core.errors import OctuneError
from octune.core.results import (
    CONFIRM_STRATEGY,
    OBJECTIVES,
    Config,
    Measurement,
    Objective,
    Status,
    config_key,
    failure_signature,
)
from octune.tuner.device import INSTALL_HINT, DeviceInfo
from octune.tuner.disk import full_disk
from octune.tuner.measure import first_lines
from octune.tuner.strategies.base import Strategy, get_strategy, proposals_due
from octune.tuner.tuning_store import Scope, TuningStore
from octune.tuner.workers import Measurer, MeasuringContext, Workers, default_timeout

#: ``octune --verbose`` shows what is logged here: each candidate's config and outcome.
log = logging.getLogger(__name__)

#: How the confirm phase re-measures the top candidates (``MeasuringContext`` fields).
CONFIRM = {"repeats": 30, "min_repeats": 10, "max_seconds": 3.0}
#: ... and which: those within this factor of the best search time (a config measured far
#: slower cannot plausibly win; in a network run of short sessions, confirming every config
#: measured cost as long as the search itself on a CPU).
CONFIRM_WITHIN = 1.25
#: Candidates a pipeline with builders keeps in flight at first, and how many more each time
#: the device finishes one with none built to follow (``Pipeline``).
FIRST_WINDOW, WIDEN = 4, 2
#: A session whose first this-many candidates all fail to build or launch with the same reason
#: stops: the device or its driver is at fault, not the configs, and the budget would be lost.
SYSTEMATIC_AFTER = 5
_SYSTEMATIC_STATUSES = frozenset({Status.BUILD_ERROR, Status.LAUNCH_ERROR})
#: Failures a full disk causes: checked for one before they are recorded (``octune.tuner.disk``).
_DISK_STATUSES = frozenset({Status.BUILD_ERROR, Status.CRASH})

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds in '90s', '30m', '1h30m' or '8h'."""
    compact = text.replace(" ", "").lower()
    parts = _DURATION.findall(compact)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != compact:
        raise OctuneError(f"cannot read duration '{text}': write it like 90s, 30m, 1h30m or 8h")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


#: Seeds go to numpy (non-negative) and the database (64-bit), and a confirm uses seed + 1.
MAX_SEED = 2**62


def check_seed(seed: int | None) -> None:
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise OctuneError(f"--seed {seed} is out of range: use a whole number from 0 to 2^62")


@dataclass(frozen=True)
class Budget:
    """When to stop: after `candidates` measurements, `seconds` of wall time, or `patience`
    candidates in a row without improvement, whichever comes first.
    """

    candidates: int | None = None
    seconds: float | None = None
    patience: int | None = None

    def __post_init__(self) -> None:
        if self.candidates is not None and self.candidates < 1:
            raise OctuneError(f"budget of {self.candidates} candidates: use --budget 1 or more")
        if self.seconds is not None and self.seconds <= 0:
            raise OctuneError("time budget must be positive: use e.g. --time 30m")
        if self.patience is not None and self.patience < 1:
            raise OctuneError(f"patience of {self.patience}: use --patience 1 or more")

    def timed_out(self, elapsed: float) -> bool:
        return self.seconds is not None and elapsed >= self.seconds

    def describe(self) -> str:
        """The limits as a user reads them: ``40 candidates or 90 s``; ``no limit``."""
        seconds = self.seconds
        parts = [
            f"{self.candidates:,} candidate" + ("s" if self.candidates != 1 else "")
            if self.candidates is not None else "",
            "" if seconds is None else f"{seconds:.1f} s" if seconds < 10 else f"{seconds:,.0f} s",
        ]  # fmt: skip
        text = " or ".join(part for part in parts if part) or "no limit"
        if self.patience is not None:
            text += f", {self.patience} without gain"
        return text

    def room(self, started: int, elapsed: float) -> int:
        """How many more candidates may start, after `started` and `elapsed` seconds."""
        if self.timed_out(elapsed):
            return 0
        if self.candidates is None:
            return sys.maxsize
        return max(0, self.candidates - started)


@dataclass(frozen=True)
class Settings:
    """How candidates are measured; the defaults suit an overnight run."""

    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    timeout: float | None = None  # per candidate; None: derived from the workload
    confirm: int = 3  # top candidates re-measured at the end, at most (CONFIRM_WITHIN)
    objective: Objective = "time"
    energy: bool = False  # read the device's energy sensor for every measurement
    resume: bool = False  # count stored measurements against --budget
    cache_root: str | None = None

    def __post_init__(self) -> None:
        if self.jobs < 0:
            raise OctuneError(f"--jobs {self.jobs}: use 0 (build in the measurer) or more")
        if self.timeout is not None and self.timeout <= 0:
            raise OctuneError("--timeout must be positive, e.g. --timeout 60")
        if self.objective not in OBJECTIVES:
            raise OctuneError(
                f"unknown objective '{self.objective}': use one of {', '.join(OBJECTIVES)}"
            )
        if self.objective != "time" and not self.energy:
            raise ValueError("an energy objective needs energy readings")


class SystematicFailure(OctuneError):
    """Every one of a session's first candidates failed alike: the device cannot run the kernel."""

    def __init__(self, message: str, report: SessionReport) -> None:
        super().__init__(message)
        self.report = report  # the stopped session, so a run of many workloads can go on


@dataclass
class Progress:
    """What a progress display needs after each measurement."""

    space_size: int
    already_measured: int
    objective: Objective = "time"
    tried: int = 0
    since_improvement: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    best: Measurement | None = None
    best_score: float = math.inf
    elapsed_s: float = 0.0
    strategy_s: float = 0.0  # of elapsed_s, spent proposing and learning from results
    earlier_s: float = 0.0  # spent by earlier sessions, counted against the budget on --resume
    # "status: reason" of each of the first SYSTEMATIC_AFTER candidates; None for the others.
    opening: list[str | None] = field(default_factory=list)

    def record(self, measurement: Measurement) -> None:
        self.tried += 1
        if len(self.opening) < SYSTEMATIC_AFTER:
            self.opening.append(
                failure_signature(measurement.status.value, measurement.message)
                if measurement.status in _SYSTEMATIC_STATUSES
                else None
            )
        self.since_improvement += 1
        if not measurement.ok:
            self.failures[measurement.status.value] += 1
        value = measurement.score(self.objective)
        if value is not None and value < self.best_score:
            self.best, self.best_score, self.since_improvement = measurement, value, 0

    @property
    def systematic_failure(self) -> str | None:
        """The one failure all of the first SYSTEMATIC_AFTER candidates met, if they met one."""
        reasons = set(self.opening)
        if len(self.opening) < SYSTEMATIC_AFTER or len(reasons) != 1 or None in reasons:
            return None
        return self.opening[0]


@dataclass(frozen=True)
class SessionReport:
    session_id: int
    progress: Progress
    interrupted: bool
    confirmed: tuple[Measurement, ...] = ()
    confirm_session_id: int | None = None

    @property
    def session_ids(self) -> tuple[int, ...]:
        """The search session and, where one ran, its confirm session."""
        if self.confirm_session_id is None:
            return (self.session_id,)
        return (self.session_id, self.confirm_session_id)

    @property
    def within_noise(self) -> bool:
        """The two best confirmed candidates differ by less than their spread."""
        ok = sorted((m for m in self.confirmed if m.ok), key=lambda m: m.median_s or math.inf)
        if len(ok) < 2:
            return False
        first, second = ok[0], ok[1]
        gap = (second.median_s or 0) - (first.median_s or 0)
        return gap <= max(first.spread_s or 0, second.spread_s or 0)


class Pipeline:
    """Builds ahead in a process pool and measures, one at a time, in a supervised process.

    With builders, the next built candidate goes to the device before a result is handed
    back, so storing it and proposing more overlap the device's work. Without them (a CPU
    device, whose timings the main loop's work would disturb) each candidate is measured alone.
    """

    def __init__(self, context: MeasuringContext, workers: Workers, timeout: float) -> None:
        self.context = context
        self.builds = workers.builds
        self.measurer = workers.measurer(context, timeout)
        # Candidates in flight (building, built, on the device). A learning strategy proposes
        # blind to all of them, so the window starts small and widens only while the device
        # has to wait for builds, up to two per builder (replayed on nine H100 recordings, 32
        # in flight from the start needed 1.1-2.7 times the measurements to 95 % of one at a
        # time; benchmarks/RESULTS.md).
        self.widest = 2 * self.builds.jobs if self.builds is not None else 1
        self.window = min(self.widest, FIRST_WINDOW)
        self._building: dict[Future[str | None], tuple[int, Config]] = {}
        self._ready: deque[tuple[int, Config, str | None]] = deque()
        self._failed: deque[tuple[int, Measurement]] = deque()  # never reached the device
        self._measuring: int | None = None  # the row on the device now

    @property
    def pending(self) -> int:
        on_device = self._measuring is not None
        return len(self._building) + len(self._ready) + len(self._failed) + on_device

    def submit(self, row: int, config: Config) -> None:
        if self.builds is None:
            self._ready.append((row, config, None))  # the measurer builds it itself
            return
        options = self.context.kernel.build_options(config, self.context.workload)
        self._building[self.builds.submit(self.context.kernel.source, options)] = (row, config)

    def next_result(self) -> tuple[int, Measurement]:
        """The next finished candidate, in the order builds complete."""
        if not self._failed and self._measuring is None:
            self._start_next(wait_for_builds=True)
        if self._failed:
            return self._failed.popleft()
        row = self._measuring
        assert row is not None, "next_result() with nothing pending"
        measurement = self.measurer.finish()
        self._measuring = None
        if self.builds is not None:
            self._start_next(wait_for_builds=False)
            if self._measuring is None and self._building:  # the device waits for a build
                self.window = min(self.widest, self.window + WIDEN)
        return row, measurement

    def _start_next(self, *, wait_for_builds: bool) -> None:
        """Put the next built candidate on the device; failed builds queue as results."""
        while self._measuring is None:
            if wait_for_builds and self._building and not self._ready and not self._failed:
                wait(self._building, return_when=FIRST_COMPLETED)
            for future in [f for f in self._building if f.done()]:
                row, config = self._building.pop(future)
                self._ready.append((row, config, future.result()))
            if not self._ready:
                return
            row, config, build_error = self._ready.popleft()
            if build_error is None:
                self.measurer.start(config)
                self._measuring = row
            else:
                failed = Measurement(
                    dict(config),
                    Status.BUILD_ERROR,
                    flops=self.context.workload.flops,
                    message=first_lines(build_error),
                )
                self._failed.append((row, failed))

    def close(self, *, interrupted: bool = False) -> None:
        """Drop this session's queued builds and the candidate on the device (waited for, so
        the measurer is free for the next session; killed with it on an interrupt). The
        processes are the ``Workers``' owner's to stop.
        """
        for future in self._building:
            future.cancel()
        if self._measuring is not None:
            if interrupted:
                self.measurer.close()
            else:
                self.measurer.finish()
            self._measuring = None


def open_workers(device: DeviceInfo, settings: Settings) -> Workers:
    """The processes ``settings`` asks for, to pass to every ``run_session`` of a run."""
    return Workers(device.fingerprint, settings.cache_root, settings.jobs)


#: Configs of the kernel a space extends that a search of the extension measures first.
BASE_TILES = 3
#: The row of a config table that holds its space's default config: its first legal one.
DEFAULT_ROW = 0


def base_tiles(
    store: TuningStore, device_id: int, workload_id: int, kernel: KernelSpec, table: ConfigTable
) -> list[int]:
    """Rows of ``table`` holding the fastest configs that the kernel ``kernel``'s space extends
    found on this device and workload, with the extension's own parameters at their first
    value. Its tiles mean the same in the extension, so a search of a new kernel starts where
    the other one got to instead of from random configs: gemm_packed alone took 203 s of an
    H100 to reach what gemm's best tiles at 4096³ give it at once (benchmarks/RESULTS.md).
    """
    if kernel.space.extends is None:
        return []
    try:
        base = load_kernel(kernel.space.extends)
    except OctuneError:  # a space from elsewhere (a farm job) whose base is not installed here
        return []
    base_id = store.stored_kernel_version_id(base.name, base.sha256)
    if base_id is None:  # never tuned here
        return []
    own = {p.name: p.values[0] for p in kernel.space.parameters}
    rows: list[int] = []
    for config in store.top_configs(device_id, base_id, workload_id, BASE_TILES):
        merged = {**own, **config}
        row = table.index({name: merged[name] for name in table.names})
        if row is not None and row not in rows:
            rows.append(row)
    return rows


def start_rows(kernel: KernelSpec, table: ConfigTable, device_type: str) -> list[int]:
    """Rows of ``table`` holding the kernel's starts for the device type (those legal on this
    device), best first.
    """
    rows = (table.index(config) for config in config_starts(kernel, device_type))
    return list(dict.fromkeys(row for row in rows if row is not None))


#: What happens to each measurement once taken, in order (TVM's ``measure_callback``): a
#: session stores it, hands it to its caller (a farm agent uploads it), lets the search learn
#: from it and counts it; the confirm phase stores it and hands it over. Arguments: the session
#: id, the measurement, its row in the config table (None in the confirm phase).
MeasureCallback = Callable[[int, Measurement, int | None], None]


@dataclass
class _Opened:
    """A search session as opened: where it writes, what proposes, how it measures."""

    session_id: int
    scope: Scope
    search: Strategy
    context: MeasuringContext
    timeout: float
    progress: Progress
    started: float = 0.0  # when the search began measuring (the pipeline set up)


def run_session(
    store: TuningStore,
    device: DeviceInfo,
    kernel: KernelSpec,
    workload: Workload,
    table: ConfigTable,
    *,
    strategy: str,
    budget: Budget,
    settings: Settings | None = None,
    seed: int | None = None,
    on_result: Callable[[Progress], None] | None = None,
    workers: Workers | None = None,
    on_measurement: Callable[[int, Measurement], None] | None = None,
) -> SessionReport:
    """Tune one kernel on one workload: open a session, search, confirm the top. ``workers``:
    processes shared with the caller's other sessions (``open_workers``); without them the
    session starts its own. ``on_measurement`` sees each measurement (with its session id, the
    confirm session's too) once it is stored: a farm agent uploads it then.
    """
    settings = settings or Settings()
    if workers is None:
        with open_workers(device, settings) as own:
            return run_session(
                store, device, kernel, workload, table, strategy=strategy, budget=budget,
                settings=settings, seed=seed, on_result=on_result, workers=own,
                on_measurement=on_measurement,
            )  # fmt: skip
    check_seed(seed)
    opened = _open(store, device, kernel, workload, table, strategy, budget, settings, seed)
    handed: list[MeasureCallback] = [_stored(store)]
    if on_measurement is not None:
        handed.append(lambda session_id, m, _row: on_measurement(session_id, m))
    callbacks = [*handed, _learned(opened), _counted(opened, on_result)]
    interrupted, systematic, disk = _search(
        store, opened, table, budget, settings, workers, callbacks
    )
    if disk is not None:
        raise OctuneError(disk)
    if systematic is not None:
        raise SystematicFailure(
            f"stopped {kernel.name} for {workload} on {device.name} after its first "
            f"{SYSTEMATIC_AFTER} candidates all failed with {systematic}; they are stored. The "
            "device cannot run this kernel: see `octune devices`, pick another with --device, "
            f"or {INSTALL_HINT}",
            SessionReport(opened.session_id, opened.progress, interrupted=False),
        )
    confirmed: tuple[Measurement, ...] = ()
    confirm_session_id = None
    top = [] if interrupted else _to_confirm(store, opened.scope, settings)
    if top:
        fresh_seed = None if seed is None else seed + 1  # fresh inputs, reproducibly
        confirm_session_id = store.start_session(
            *opened.scope, strategy=CONFIRM_STRATEGY, seed=fresh_seed,
            settings={"repeats": CONFIRM["repeats"], "octune_version": version("octune")},
        )  # fmt: skip
        try:
            context = replace(opened.context, seed=fresh_seed, **CONFIRM)
            measurer = workers.measurer(context, opened.timeout)
            confirmed = _confirm(store, measurer, confirm_session_id, top, handed)
        except KeyboardInterrupt:
            interrupted = True
            workers.close()
    return SessionReport(
        opened.session_id, opened.progress, interrupted, confirmed, confirm_session_id
    )


def _open(
    store: TuningStore,
    device: DeviceInfo,
    kernel: KernelSpec,
    workload: Workload,
    table: ConfigTable,
    strategy: str,
    budget: Budget,
    settings: Settings,
    seed: int | None,
) -> _Opened:
    """The session's rows and its search: what earlier sessions measured is skipped, and a
    search that learns starts from the history of the kernel version.
    """
    strategy_class = get_strategy(strategy)
    store.close_dead_sessions()
    device_id = store.device_id(device)
    kernel_id = store.kernel_version_id(
        kernel.name, kernel.sha256, kernel.source, kernel.space.source_text
    )
    workload_id = store.workload_id(workload.problem, workload.key, workload.shape, workload.dtype)
    done_keys = store.measured_config_keys(device_id, kernel_id, workload_id)
    done_rows = {row for row in (table.index_json(key) for key in done_keys) if row is not None}
    # --resume finishes the budget: what any session measured or is measuring now, and how
    # long the earlier ones took, counts against it.
    earlier_s = store.search_seconds(device_id, kernel_id, workload_id) if settings.resume else 0.0
    if strategy_class.learns_from_history:
        from octune.tuner.cost_model import Context  # loads XGBoost: only when a model searches

        history = store.history(kernel.name, kernel.sha256)
        target = Context(device.to_dict(), workload.shape)
        # What a lookup answers an untuned shape with is measured first: the nearest tuned
        # shape's fastest config, else the space's default (the table's first row,
        # ``lookup.tables.default_config``), the other right after; so a search's best is never
        # worse than either (on an H200, ResNet-50's layers ran 7.1 ms unfused on what a
        # minute's search without the default found, 5.2 ms on the defaults; at batch 16 from
        # a batch-1 database, a layer given one candidate ran the default at 495 us where its
        # batch-1 config took 276: benchmarks/RESULTS.md).
        search = strategy_class(
            table, seed=seed, skip=done_rows, history=history, target=target,
            first=base_tiles(store, device_id, workload_id, kernel, table), default=DEFAULT_ROW,
            starts=start_rows(kernel, table, device.device_type),
        )  # fmt: skip
    else:
        search = strategy_class(table, seed=seed, skip=done_rows)
    timeout = settings.timeout or default_timeout(workload)
    context = MeasuringContext(
        device_fingerprint=device.fingerprint, kernel=kernel, workload=workload, seed=seed,
        cache_root=settings.cache_root, energy=settings.energy,
    )  # fmt: skip
    session_id = store.start_session(
        device_id, kernel_id, workload_id, strategy=strategy, seed=seed,
        settings={
            "budget_candidates": budget.candidates, "budget_seconds": budget.seconds,
            "patience": budget.patience, "jobs": settings.jobs, "timeout_s": timeout,
            "objective": settings.objective, "octune_version": version("octune"),
        },
    )  # fmt: skip
    log.info(
        "session %d: %s on %s, %s, %d configs (%d measured before), strategy %s, timeout %.0f s",
        session_id, kernel.name, device.name, workload, len(table), len(done_rows), strategy,
        timeout,
    )  # fmt: skip
    progress = Progress(
        space_size=len(table), already_measured=len(done_rows), objective=settings.objective,
        earlier_s=earlier_s,
    )  # fmt: skip
    scope = (device_id, kernel_id, workload_id)
    return _Opened(session_id, scope, search, context, timeout, progress)


def _search(
    store: TuningStore,
    opened: _Opened,
    table: ConfigTable,
    budget: Budget,
    settings: Settings,
    workers: Workers,
    callbacks: list[MeasureCallback],
) -> tuple[bool, str | None, str | None]:
    """Propose, claim, build ahead and measure until the budget, patience, a systematic
    failure, a full disk or an interrupt ends it; each result through ``callbacks``. Whether
    it was interrupted, the systematic failure and why the disk stopped it, if so.
    """
    session_id, scope, progress = opened.session_id, opened.scope, opened.progress
    interrupted = False
    systematic: str | None = None
    disk: str | None = None
    # The budget is the search's: switching the measurer to this workload (its inputs and
    # their float64 reference) is the run's cost, not the session's, or a short share of a
    # large layer would be spent before its first candidate.
    pipeline = Pipeline(opened.context, workers, opened.timeout)
    opened.started = time.monotonic()

    def elapsed() -> float:
        return progress.earlier_s + time.monotonic() - opened.started

    try:
        while True:
            due = proposals_due(pipeline.window, pipeline.pending)
            proposed: list[int] = []
            if due:
                done = store.taken(scope) if settings.resume else progress.tried + pipeline.pending
                room = budget.room(done, elapsed())
                thinking = time.monotonic()
                if room > 0:
                    proposed = opened.search.propose(min(due, room))
                progress.strategy_s += time.monotonic() - thinking
                for row in proposed:  # a config another search is measuring is left to it
                    if store.claim(session_id, scope, table.config(row)):
                        pipeline.submit(row, table.config(row))
            if pipeline.pending == 0:
                if proposed:  # all of them claimed by another search: ask for more
                    continue
                break
            row, measurement = pipeline.next_result()
            if measurement.status in _DISK_STATUSES and (disk := full_disk()) is not None:
                break
            for callback in callbacks:
                callback(session_id, measurement, row)
            systematic = progress.systematic_failure
            if systematic is not None:
                break
            if budget.timed_out(elapsed()) or (
                budget.patience is not None and progress.since_improvement >= budget.patience
            ):
                break  # builds still in flight are dropped, never stored
    except KeyboardInterrupt:
        interrupted = True
    finally:
        pipeline.close(interrupted=interrupted)
        ending = "interrupted" if interrupted or disk else "failed" if systematic else "completed"
        store.finish_session(session_id, ending)
    return interrupted, systematic, disk


def _stored(store: TuningStore) -> MeasureCallback:
    """Commits each measurement as it comes, so a killed session loses only those in flight."""

    def store_it(session_id: int, measurement: Measurement, _row: int | None) -> None:
        store.add_measurement(session_id, measurement)
        _log_candidate(session_id, measurement)

    return store_it


def _learned(opened: _Opened) -> MeasureCallback:
    """The search (its cost model, for ``model``) learns from each result; timed as its own."""

    def learn(_session_id: int, measurement: Measurement, row: int | None) -> None:
        thinking = time.monotonic()
        if row is not None:
            opened.search.observe(row, measurement)
        opened.progress.strategy_s += time.monotonic() - thinking

    return learn


def _counted(opened: _Opened, on_result: Callable[[Progress], None] | None) -> MeasureCallback:
    """The progress a display and the stopping rules read, shown after each result."""
    progress = opened.progress

    def count(_session_id: int, measurement: Measurement, _row: int | None) -> None:
        progress.elapsed_s = time.monotonic() - opened.started
        progress.record(measurement)
        if on_result is not None:
            on_result(progress)

    return count


def _log_candidate(session_id: int, measurement: Measurement) -> None:
    if not log.isEnabledFor(logging.DEBUG):
        return
    config = " ".join(f"{key}={value}" for key, value in measurement.config.items())
    if measurement.ok and measurement.median_s is not None:
        outcome = f"{measurement.median_s * 1e3:.4g} ms median of {len(measurement.times_s)}"
    else:
        outcome = f"{measurement.status.value}: {first_lines(measurement.message, 200)}"
    log.debug("session %d: %s -> %s", session_id, config, outcome)


def _to_confirm(store: TuningStore, scope: Scope, settings: Settings) -> list[dict[str, int]]:
    """The top configs no session has confirmed yet: a second turn of a run, a --resume or a
    new run confirms only what it brought to the top (a run's sessions re-confirmed the same
    configs turn after turn: a fifth of an H200 network run went to confirm sessions).
    """
    if settings.confirm == 0:
        return []
    done = store.confirmed_config_keys(*scope)
    top = store.top_configs(*scope, settings.confirm, settings.objective, within=CONFIRM_WITHIN)
    return [config for config in top if config_key(config) not in done]


def _confirm(
    store: TuningStore,
    measurer: Measurer,
    session_id: int,
    top: list[dict[str, int]],
    callbacks: list[MeasureCallback],
) -> tuple[Measurement, ...]:
    """Re-measure the top candidates with more repeats (on fresh inputs), in a session of their
    own, so that a lucky run cannot crown a config: `best` prefers confirmed results.
    """
    results: list[Measurement] = []
    status = "interrupted"
    try:
        for config in top:
            result = measurer.measure(config)
            for callback in callbacks:
                callback(session_id, result, None)
            results.append(result)
        status = "completed"
    finally:
        store.finish_session(session_id, status)
    return tuple(results)
