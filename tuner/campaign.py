"""Many workloads in one run: a YAML list of workloads and one budget shared among them.

The budget is shared in two rounds, largest weight first (equal unless an entry says
``weight:``, e.g. a network layer's estimated share of the network's time). In the first, every
workload gets an even part of ``EVEN_SHARE`` of the total, so each is measured before any gets
more, and where a device's first candidates cost more than their part (a CPU compiling for
seconds), the workloads left without a turn are the smallest. In the second, each gets its
weight's part of what is left (``share``) and its search goes on, skipping what it measured.
Where every workload is a network's layer (``launches:`` per forward pass), the second round
weighs each by what the first measured instead of the estimate (``measured_weights``): at
batch 1 launches and small layers weigh more than their flops say, at batch 32 the large
convolutions take the time. A workload's second part goes to its kernels by how their first
turns compare (``kernel_shares``): a kernel far slower than the workload's fastest searches on,
with less. A workload that stops early (patience, an exhausted space) leaves
its unused part to the ones after it. The first round confirms nothing: a workload's second
turn re-measures what either turn brought to the top, and one the budget gives no second turn
keeps its best verified but unconfirmed. ``tune_in_turn`` is that loop, and ``tune_one`` one
turn's session with its progress shown, for `octune tune` and for a farm agent's job alike.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    FiniteFloat,
    StrictBool,
    StrictInt,
    ValidationError,
)
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from octune.catalogue.family import Workload
from octune.catalogue.limits import missing_extensions
from octune.catalogue.registry import KernelSpec, families, resolve_kernels
from octune.catalogue.safe_yaml import YamlLimitError, safe_load
from octune.core.console import console
from octune.core.errors import OctuneError, validation_message
from octune.core.results import Measurement
from octune.tuner.device import DeviceInfo
from octune.tuner.session import (
    Budget,
    SessionReport,
    Settings,
    SystematicFailure,
    open_workers,
    run_session,
)
from octune.tuner.session import Progress as SessionProgress
from octune.tuner.tuning_store import TuningStore
from octune.tuner.workers import Workers

EXAMPLE = (
    "workloads: [{kernel: gemm, m: 1024, n: 1024, k: 1024, transb: true}, "
    "{kernel: conv2d, n: 1, c: 64, h: 56, w: 56, k: 64, r: 3, s: 3, pad: 1}]"
)

#: The part of what is left that ``share`` splits evenly among the remaining tasks; the rest
#: goes by weight. Weights are estimates, and a task they underrate still needs candidates to
#: find a config that verifies: by weight alone, ResNet-50's fc layer (1 % of the estimate,
#: halved between its two kernels) got about one candidate, which failed, and it then ran on
#: the untuned default at 17 % of the network's time.
EVEN_SHARE = 0.25
#: Candidates per workload when a run sets neither a candidate nor a time budget.
DEFAULT_CANDIDATES = 100
#: A kernel whose first-round best is more than this many times its workload's fastest
#: kernel's gets less of the workload's second round (``kernel_shares``).
CONTENDER = 1.5
#: ... judged only once it measured this many candidates in the first round.
JUDGED_AFTER = 4


class _WorkloadEntry(BaseModel):
    """A kernel (or family) and its shape keys, which the family checks."""

    model_config = ConfigDict(extra="allow", strict=True)
    __pydantic_extra__: dict[str, StrictInt | StrictBool]

    kernel: str
    dtype: str = "float32"
    weight: FiniteFloat = Field(default=1.0, gt=0)
    launches: StrictInt | None = Field(default=None, ge=1)
    batched: StrictBool = False


class _WorkloadFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workloads: list[_WorkloadEntry] = Field(min_length=1)


@dataclass(frozen=True)
class Task:
    kernel: KernelSpec
    workload: Workload
    weight: float = 1.0  # its share of the budget, relative to the other tasks'
    nodes: tuple[str, ...] = ()  # the network's nodes of this shape, if it comes from one
    launches: int | None = None  # launches of this shape per forward pass, if from a network
    batched: bool = False  # the launches are a batched MatMul's matrices (measured_weights)
    from_family: bool = False  # one of a family's kernels, not a kernel named on its own

    @property
    def label(self) -> str:
        """The workload as messages name it, with the network's nodes that have it: a user
        knows a layer by its node's name, not by its shape.
        """
        if not self.nodes:
            return str(self.workload)
        more = f" and {len(self.nodes) - 1} more" if len(self.nodes) > 1 else ""
        return f"{self.workload} ({self.nodes[0]}{more})"


def load_tasks(path: Path) -> list[Task]:
    """The workloads of a file, validated whole before anything is measured."""
    try:
        data = safe_load(path.read_text(encoding="utf-8"))
    except YamlLimitError as error:
        raise OctuneError(f"{path}: {error}; list the workloads plainly") from None
    except OSError as error:
        raise OctuneError(f"cannot read workloads file {path}: {error.strerror}") from error
    except UnicodeDecodeError as error:
        raise OctuneError(
            f"{path}: byte {error.start} is not UTF-8 text; save the file as UTF-8"
        ) from error
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise OctuneError(f"{path}: not valid YAML{where}; write it like: {EXAMPLE}") from error
    return tasks_from(data, str(path))


def tasks_from(data: object, source: str) -> list[Task]:
    """The workloads of a parsed workloads file (or of a job that carries one), validated
    whole; ``source`` names it in messages.
    """
    try:
        parsed = _WorkloadFile.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        place = ".".join(str(part) for part in first["loc"]) or "the file"
        raise OctuneError(
            f"{source}: {place}: {validation_message(first).lower()} "
            f"({error.error_count()} problem(s)); "
            f"write it like: {EXAMPLE}"
        ) from error
    tasks = []
    for index, entry in enumerate(parsed.workloads):
        try:
            found = tasks_for(entry.kernel, entry.model_extra or {}, entry.dtype, entry.weight)
            tasks += [
                replace(task, launches=entry.launches, batched=entry.batched) for task in found
            ]
        except OctuneError as error:
            raise OctuneError(f"{source}: workloads.{index}: {error}") from None
    keys = [(task.kernel.name, task.workload.key) for task in tasks]
    if len(set(keys)) != len(keys):
        raise OctuneError(f"{source}: a workload is listed twice: list each one once")
    return tasks


def tasks_for(
    name: str, shape: Mapping[str, int], dtype: str = "float32", weight: float = 1.0
) -> list[Task]:
    """What tuning a kernel, or a family (every kernel of it that takes the shape), means; the
    workload's weight is split evenly among its kernels.
    """
    kernels = resolve_kernels(name)
    workload = kernels[0].family.workload(shape, dtype)
    takers = [kernel for kernel in kernels if kernel.takes(workload) is None]
    if not takers:
        reasons = "; ".join(str(kernel.takes(workload)) for kernel in kernels)
        raise OctuneError(f"no {name} kernel takes {workload}: {reasons}")
    from_family = name in families()
    part = weight / len(takers)
    return [Task(kernel, workload, part, from_family=from_family) for kernel in takers]


def extension_notes(tasks: Sequence[Task], device: str, limits: Mapping[str, int]) -> list[str]:
    """One line per kernel whose variants need an extension the device lacks (a float16
    kernel's half arithmetic without cl_khr_fp16): those variants are not enumerated, so they
    cost no build failures, and the user learns why they are missing.
    """
    notes = {}
    for task in tasks:
        space = task.kernel.space
        missing = missing_extensions(space.limit_names, limits)
        if missing:
            notes[task.kernel.name] = (
                f"{device} has no {', '.join(missing)}: {task.kernel.name} tunes its "
                f"{space.dtype} storage with float arithmetic only"
            )
    return list(notes.values())


def for_device(tasks: Sequence[Task], device_type: str) -> tuple[list[Task], list[str]]:
    """The tasks to tune on a device of ``device_type``, and the kernels left out. Of a family's
    kernels for a workload, those whose space is written for this type (``devices:``) are
    tuned, with the workload's weight; where none is, those written for any device; a kernel
    written for other types only where nothing else takes the workload. Under PoCL a CPU
    compiles gemm.cl's GPU tiles for 1-30 s a candidate and runs them at a twentieth of
    gemm_panel's rate (benchmarks/RESULTS.md): a first budget spent there is lost.
    """

    def fit(task: Task) -> int:
        return task.kernel.space.fit(device_type)

    groups: dict[str, list[Task]] = {}
    for task in tasks:
        if task.from_family:
            groups.setdefault(task.workload.key, []).append(task)
    dropped: set[int] = set()
    weights: dict[int, float] = {}
    for group in groups.values():
        best = max(fit(task) for task in group)
        chosen = [task for task in group if fit(task) == best]
        dropped.update(id(task) for task in group if fit(task) < best)
        weights.update({id(task): sum(t.weight for t in group) / len(chosen) for task in chosen})
    kept = [replace(t, weight=weights.get(id(t), t.weight)) for t in tasks if id(t) not in dropped]
    left_out = list(dict.fromkeys(t.kernel.name for t in tasks if id(t) in dropped))
    return kept, left_out


def share(
    total: Budget,
    weights: Sequence[float],
    used_candidates: int,
    used_seconds: float,
    even: float = EVEN_SHARE,
) -> Budget | None:
    """The part of what is left of the total budget the next task gets: ``even`` of it split
    evenly among the remaining tasks, the rest by ``weights`` (its own, then those of the tasks
    after it); at least one candidate while any is left; None when nothing is.
    """
    part = even / len(weights) + (1 - even) * weights[0] / sum(weights)
    candidates = seconds = None
    if total.candidates is not None:
        left = total.candidates - used_candidates
        if left < 1:
            return None
        candidates = max(1, int(left * part))
    if total.seconds is not None:
        seconds = (total.seconds - used_seconds) * part
        if seconds <= 0:
            return None
    return replace(total, candidates=candidates, seconds=seconds)


def first_share(
    total: Budget, count: int, used_candidates: int, used_seconds: float
) -> Budget | None:
    """A task's part in the first round: ``EVEN_SHARE`` of the total over ``count`` tasks (at
    least one candidate), as far as what is left allows; None when nothing is.
    """
    even = share(total, [1.0] * count, 0, 0.0, even=1.0)
    left = share(total, [1.0], used_candidates, used_seconds)
    if even is None or left is None:
        return None
    candidates = seconds = None
    if total.candidates is not None and even.candidates is not None:
        candidates = min(max(1, int(even.candidates * EVEN_SHARE)), left.candidates or 1)
    if total.seconds is not None and even.seconds is not None and left.seconds is not None:
        seconds = min(even.seconds * EVEN_SHARE, left.seconds)
    return replace(total, candidates=candidates, seconds=seconds)


@dataclass(frozen=True)
class Turn:
    """One session of a workload in a run that tunes many in turn."""

    task: Task
    report: SessionReport
    # The device could not run the task's kernel; the run went on with the other tasks.
    failure: SystematicFailure | None = None


#: One turn's session: the task, its part of the budget, the workers, the turn's settings, and
#: where the turn stands in the run (``3/18``, ``3/18, second turn``) for its heading.
Tune = Callable[[Task, Budget, Workers, Settings, str], SessionReport]


def kernel_shares(tasks: Sequence[Task], turns: Sequence[Turn]) -> list[float]:
    """Each task's part of its workload's second round (a workload's parts sum to 1): even
    among its kernels whose first-round best is within ``CONTENDER`` x of the workload's
    fastest, and those nothing verified yet; a slower kernel's part falls as
    (``CONTENDER`` / its ratio)^2, so it still searches, more slowly. On the H200's held-out
    GEMMs and convs the kernel that won at the end was within 1.25 x of the best after a
    quarter of its seconds in 32 of 35 workloads, while the losers sat at up to 9.8 x; one
    winner was 4.5 x then, hence a smaller part and not none (benchmarks/kernel_split.py). A
    kernel that measured fewer than ``JUDGED_AFTER`` candidates is judged as one nothing
    verified: a first turn that went on starting the run's builders measured one, the space's
    first config, and the kernel that won at 1500x2048x512 looked 3.5 x behind.
    """
    best: dict[int, float] = {}
    for turn in turns:
        found = turn.report.progress.best
        if found is not None and found.median_s and turn.report.progress.tried >= JUDGED_AFTER:
            best[id(turn.task)] = min(best.get(id(turn.task), math.inf), found.median_s)
    groups: dict[str, list[Task]] = {}
    for task in tasks:
        groups.setdefault(task.workload.key, []).append(task)
    parts: dict[int, float] = {}
    for group in groups.values():
        fastest = min((best[id(t)] for t in group if id(t) in best), default=None)
        raw = {
            id(t): 1.0 if fastest is None or id(t) not in best
            else min(1.0, (CONTENDER * fastest / best[id(t)]) ** 2)
            for t in group
        }  # fmt: skip
        total = sum(raw.values())
        parts.update({key: value / total for key, value in raw.items()})
    return [parts[id(task)] for task in tasks]


def measured_weights(tasks: Sequence[Task], turns: Sequence[Turn]) -> list[float]:
    """Each task's weight for the second round: its workload's, split among the workload's
    kernels by ``kernel_shares``. A workload's weight is its own (the sum of its tasks'),
    unless every task is a network layer (``launches``) and one was measured: then the
    layer's measured share of the network's time, its launches per pass times the fastest
    verified time any of its kernels reached in ``turns``. A layer nothing verified yet keeps
    its estimate, scaled as the measured layers' estimates compare with their times; so does a
    batched MatMul's: its matrices' launches are what the tuned config would run, not what
    runs where the runtime's one launch for them all is faster (on NVIDIA's OpenCL 6-14 x at
    BERT's attention), and counted as launches they took 37-43 % of a ViT's or BERT layer's
    minutes.
    """
    fastest: dict[str, float] = {}
    for turn in turns:
        best = turn.report.progress.best
        if best is not None and best.median_s and not turn.task.batched:
            key = turn.task.workload.key
            fastest[key] = min(fastest.get(key, math.inf), best.median_s)
    estimated: Counter[str] = Counter()
    for task in tasks:
        estimated[task.workload.key] += task.weight
    weight = dict(estimated)
    if fastest and all(task.launches is not None for task in tasks):
        launches = {task.workload.key: task.launches or 1 for task in tasks}
        measured = {key: launches[key] * seconds for key, seconds in fastest.items()}
        scale = sum(measured.values()) / sum(estimated[key] for key in measured)
        weight = {key: measured.get(key, value * scale) for key, value in estimated.items()}
    shares = kernel_shares(tasks, turns)
    return [weight[task.workload.key] * part for task, part in zip(tasks, shares, strict=True)]


def tune_in_turn(
    tasks: Sequence[Task],
    total: Budget,
    tune: Tune,
    *,
    device: DeviceInfo,
    settings: Settings,
    count_earlier_time: bool = True,
    workers: Workers | None = None,
) -> Iterator[Turn]:
    """Tune ``tasks`` in the two rounds the module describes (one session with the whole
    budget for a single task; ``DEFAULT_CANDIDATES`` a task when it sets no limit), through
    one set of workers: the run of `octune tune` and of a farm agent's job, so both share a
    budget alike. ``tune`` runs one session under the settings it is given. The turns stop
    when the budget is spent or after an interrupted session. A systematic failure is raised
    when there is one task; with more, its turn carries it, the task gets no second turn,
    and the others still get their chance.

    With ``settings.resume`` the configs earlier runs measured count against the candidates
    of the first round; ``count_earlier_time`` counts their time too. A farm agent passes
    False: it has taken its earlier leases' time (the job's ``tried_s``) off ``total`` already.

    ``workers``: a set opened for more than this call (a run that tunes workloads one call at
    a time), left open; by default the call opens its own: their start (builders' processes,
    each its OpenCL context) took 5-14 s of a 25-45 s share on the H200's host.

    A generator: close it (``contextlib.closing``) when not iterating it to the end, so the
    workers stop at once.
    """
    if total.candidates is None and total.seconds is None:
        total = replace(total, candidates=DEFAULT_CANDIDATES * len(tasks))
    ordered = sorted(tasks, key=lambda task: -task.weight)  # stable: equal weights keep order
    weights = [task.weight for task in ordered]
    used_candidates, used_earlier, started = 0, 0.0, time.monotonic()
    failed: set[int] = set()
    rounds = [True] if len(ordered) == 1 else [True, False]
    turns: list[Turn] = []
    with nullcontext(workers) if workers is not None else open_workers(device, settings) as pool:
        for first in rounds:
            if not first:
                by_weight = sorted(
                    zip(measured_weights(ordered, turns), ordered, strict=True),
                    key=lambda pair: -pair[0],
                )
                weights, ordered = [w for w, _ in by_weight], [task for _, task in by_weight]
            for index, task in enumerate(ordered):
                if id(task) in failed:
                    continue
                used_seconds = used_earlier + time.monotonic() - started
                if first and len(rounds) > 1:
                    part = first_share(total, len(ordered), used_candidates, used_seconds)
                else:
                    part = share(total, weights[index:], used_candidates, used_seconds, even=0.0)
                if part is None:
                    break
                # A second turn goes on from the first: its part is new candidates. A first
                # turn of two confirms nothing: the second confirms what either brought to the
                # top (each confirm binds fresh inputs: a third of ResNet-50's first round at
                # batch 16 on the H200's host went to switching to them).
                if not first:
                    turn_settings = replace(settings, resume=False)
                elif len(rounds) > 1:
                    turn_settings = replace(settings, confirm=0)
                else:
                    turn_settings = settings
                failure: SystematicFailure | None = None
                place = f"{index + 1}/{len(ordered)}" + ("" if first else ", second turn")
                try:
                    report = tune(task, part, pool, turn_settings, place)
                except SystematicFailure as error:
                    if len(tasks) == 1:
                        raise
                    failure, report = error, error.report
                    failed.add(id(task))
                progress = report.progress
                # On a resume, what earlier runs spent on this workload is part of what it used.
                used_candidates += progress.tried + (
                    progress.already_measured if turn_settings.resume else 0
                )
                if count_earlier_time and turn_settings.resume:
                    used_earlier += progress.earlier_s
                turns.append(Turn(task, report, failure))
                yield turns[-1]
                if report.interrupted:
                    return


def unverified(
    store: TuningStore, device: DeviceInfo, tasks: Sequence[Task]
) -> tuple[list[tuple[str, str]], int]:
    """The workloads none of whose kernels has a verified config, each with how many
    candidates failed and the most common reason; and how many workloads there were. A
    workload, not a kernel: a lookup answers a family's workload with its fastest kernel.
    """
    groups: dict[str, list[Task]] = {}
    for task in tasks:
        groups.setdefault(task.workload.key, []).append(task)
    found_none = []
    for group in groups.values():
        found = [
            store.best(device.fingerprint, t.kernel.name, t.workload.key, t.kernel.sha256)
            for t in group
        ]
        if any(found):
            continue
        failed = 0
        reasons: Counter[str] = Counter()
        for t in group:
            failures = store.failures(
                device.fingerprint, t.kernel.name, t.workload.key, t.kernel.sha256
            )
            if failures is not None:
                failed += failures.measured
                reasons.update(failures.reasons)
        why = (
            f"{failed} candidates failed ({reasons.most_common(1)[0][0]})"
            if reasons
            else "no candidate was measured"
        )
        found_none.append((group[0].label, why))
    return found_none, len(groups)


def tune_one(
    store: TuningStore,
    info: DeviceInfo,
    task: Task,
    strategy: str,
    budget: Budget,
    settings: Settings,
    seed: int | None,
    workers: Workers,
    on_measurement: Callable[[int, Measurement], None] | None = None,
    place: str = "",
) -> SessionReport:
    """One task's session with a heading (its ``place`` in the run, its part of the budget), a
    progress bar and a closing line: `octune tune` shows each workload this way, and a farm
    agent shows its jobs' workloads alike in its log.
    """
    table = task.kernel.space.enumerate(info.limits)
    heading = f"[{place}] " if place else ""
    console.print(
        f"{heading}[bold]{escape(task.label)}[/] with {task.kernel.name}: {len(table):,} legal "
        f"configs; this turn: {budget.describe()}"
    )
    # A time budget alone: the bar runs over its seconds, and says how many were tried.
    by_time = budget.candidates is None and budget.seconds is not None
    total = budget.seconds if by_time else budget.candidates
    seconds = TextColumn("{task.completed:.1f}/{task.total:.1f} s")
    count = seconds if by_time else MofNCompleteColumn()
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        count,
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as bar:
        bar_task = bar.add_task("seconds" if by_time else "configs", total=total, status="")

        def show(progress: SessionProgress) -> None:
            failures = sum(progress.failures.values())
            best = progress.best.gflops if progress.best else None
            status = f"failures {failures}  best " + (f"{best:,.1f} GFLOP/s" if best else "-")
            if by_time:
                status = f"{progress.tried} tried  {status}"
            done = min(progress.elapsed_s, total or 0.0) if by_time else progress.tried
            bar.update(bar_task, completed=done, status=status)

        report = run_session(
            store, info, task.kernel, task.workload, table,
            strategy=strategy, budget=budget, settings=settings, seed=seed, on_result=show,
            workers=workers, on_measurement=on_measurement,
        )  # fmt: skip
    progress = report.progress
    failures = ", ".join(f"{count} {status}" for status, count in progress.failures.items())
    console.print(
        f"Session {report.session_id}: measured {progress.tried} config"
        + ("s" if progress.tried != 1 else "")
        + (f" ({failures})" if failures else "")
        + (
            f", skipped {progress.already_measured} measured before"
            if progress.already_measured
            else ""
        )
        + f"; the {strategy} strategy took {progress.strategy_s:.1f} s"
        + f" of the {progress.elapsed_s:.1f} s"
        + (  # the session of its own a confirmation is stored as: why numbers skip
            f"; session {report.confirm_session_id} re-measured the top {len(report.confirmed)}"
            if report.confirm_session_id is not None
            else ""
        )
    )
    if report.within_noise:
        console.print("The top candidates are within noise of each other: either will do.")
    return report
