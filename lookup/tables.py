"""Lookup tables built from the database: the one source of ``LookupTable`` for the config
service (``StoreLookup``) and for ``octune export`` bundles, so both answer identically.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from octune.catalogue.limits import device_limits
from octune.catalogue.space import SearchSpace
from octune.core.errors import OctuneError, SpaceError
from octune.core.problem import Problem
from octune.db.queries import StoredDevice, StoredKernel
from octune.db.store import Store
from octune.lookup.data import (
    Answer,
    Entry,
    FollowUp,
    LookupTable,
    Predictor,
    Query,
    QueryError,
    TableError,
)
from octune.lookup.semantics import KernelIndex, best_answer
from octune.tuner.device_names import match_devices

if TYPE_CHECKING:
    from octune.catalogue.expr import Expression
    from octune.catalogue.family import Workload

#: Model answers for a freshly built table (``LookupTable.predictions``), e.g.
#: ``octune.lookup.predictor.ModelAnswers``: the server and ``octune export`` pass the same one.
TableModel = Callable[[Store, StoredDevice, LookupTable], Sequence[Entry]]


def problem_spec(name: str) -> Problem:
    """What the lookup must know of a problem family, as its family module declares it."""
    from octune.catalogue.registry import family

    return family(name).problem


class DeviceLimits(Protocol):
    """What a stored device and an uploaded one both say of their limits."""

    max_work_group_size: int
    local_mem_size: int
    global_mem_size: int
    compute_units: int
    platform_name: str
    extensions: str


def stored_device_limits(device: DeviceLimits) -> dict[str, int]:
    """The limits a space may name, of a device as the database keeps it (``device_limits``
    of a device at hand): the database keeps no per-dimension work-item sizes; the work-group
    size bounds them, and tuned configs have run on the device anyway.
    """
    return device_limits(
        max_work_group_size=device.max_work_group_size,
        max_work_item_sizes=(device.max_work_group_size,) * 3,
        local_mem_size=device.local_mem_size,
        compute_units=device.compute_units,
        global_mem_size=device.global_mem_size,
        platform_name=device.platform_name,
        extensions=device.extensions,
    )


def resolve_device(store: Store, choice: str) -> StoredDevice:
    """A stored device by fingerprint or name (`match_devices`): tuned elsewhere, so not
    necessarily present on this machine. A name that several stored devices have exactly
    names the newest of them (a driver update stores a device anew).
    """
    devices = store.stored_devices()
    matches = match_devices(
        choice, devices, fingerprint=lambda d: d.fingerprint, names=lambda d: (d.name,)
    )
    if len(matches) == 1:
        return matches[0]
    if matches and all(d.name.lower() == choice.strip().lower() for d in matches):
        # One name, several devices: a driver update (or a second board) stored a new one.
        # The newest answers, as it would have alone; its fingerprint is in every answer.
        return matches[-1]
    listed = ", ".join(f"{d.fingerprint} ({d.name})" for d in matches or devices) or "none"
    if matches:
        raise QueryError(
            f"device '{choice}' matches several stored devices: {listed}; pass a fingerprint"
        )
    raise QueryError(
        f"no device '{choice}' in database {store.url} (stored: {listed}); "
        "pass a fingerprint or name from that list, or tune the device first"
    )


def stored_space(kernel: StoredKernel) -> SearchSpace:
    """A stored kernel version's search space, parsed from the text that was tuned."""
    from octune.catalogue.registry import kernel_from_texts

    return kernel_from_texts(kernel.name, kernel.template_source, kernel.space_source).space


#: Partial configs the default's search may try: octune's own spaces need under 100; a space
#: whose rules reject nearly everything would otherwise hold a lookup for hours (issue 45).
DEFAULT_SEARCH_LIMIT = 20_000


def default_config(space: SearchSpace, limits: Mapping[str, int]) -> tuple[int, ...]:
    """The first legal config in the space's value order (parameters in file order, each
    value list in order): a depth-first search that checks each rule as soon as the
    parameters it reads are bound, so it skips the millions that a plain scan would try;
    bounded, so whatever space is stored, a lookup finishes.
    """
    names = space.parameter_names
    depth = {name: i for i, name in enumerate(names)}
    reads: dict[str, int] = {}  # derived name -> depth after which it can be computed

    def ready(expression: Expression) -> int:
        return max((depth.get(n, reads.get(n, -1)) for n in expression.names), default=-1)

    derived_at: dict[int, list[tuple[str, Expression]]] = {}
    for name, expression in space.derived:
        reads[name] = ready(expression)
        derived_at.setdefault(reads[name], []).append((name, expression))
    rules_at: dict[int, list[Expression]] = {}
    for expression in space.constraints:
        rules_at.setdefault(ready(expression), []).append(expression)
    env: dict[str, int | float | bool] = dict(limits)
    tries = 0

    def legal(at: int) -> bool:
        nonlocal tries
        tries += 1
        if tries > DEFAULT_SEARCH_LIMIT:
            raise SpaceError(
                f"search space {space.origin}: no legal config among the first "
                f"{DEFAULT_SEARCH_LIMIT} partial ones (octune's spaces need under 100): its "
                "rules reject nearly every combination; list fewer values or relax a rule"
            )
        for name, expression in derived_at.get(at, ()):
            value, bad = expression.evaluate_masked(env)
            if bad:
                return False
            env[name] = value
        return all(rule.holds(env) for rule in rules_at.get(at, ()))

    def search(at: int) -> bool:
        if at == len(names):
            return True
        for value in space.parameters[at].values:
            env[names[at]] = value
            if legal(at) and search(at + 1):
                return True
        return False

    if not (legal(-1) and search(0)):
        space.enumerate(limits)  # raises the SpaceError that names the rule to relax
    config = tuple(int(env[name]) for name in names)
    space.check(dict(zip(names, config, strict=True)), limits)
    return config


def build_table(
    store: Store,
    device: StoredDevice,
    kernel_name: str,
    kernel_sha256: str | None = None,
    predictions: Iterable[Entry] = (),
    model: TableModel | None = None,
) -> LookupTable:
    """One device's table for one kernel version: the pinned one, else the version last tuned
    on the device, else the installed kernel (then only the default can answer). Retired
    versions are never answered from. ``model`` adds its answers to ``predictions``.
    """
    from octune.catalogue.registry import KernelSpec

    stored = _version(store, device, kernel_name, kernel_sha256)
    space = stored_space(stored)
    spec = KernelSpec(stored.name, stored.template_source, space)
    problem = problem_spec(space.problem)
    limits = stored_device_limits(device)
    default = default_config(space, limits)
    sample = problem_sample(problem)
    defines = spec.defines(dict(zip(space.parameter_names, default, strict=True)), sample)
    options = spec.build_options(dict(zip(space.parameter_names, default, strict=True)), sample)
    table = LookupTable(
        kernel=stored.name,
        sha256=stored.sha256,
        entry=space.entry,
        device_fingerprint=device.fingerprint,
        problem=problem,
        parameters=space.parameter_names,
        launch_global=tuple(space.written_out(e) for e in space.launch_global),
        launch_local=tuple(space.written_out(e) for e in space.launch_local),
        workspace=None if space.workspace is None else space.written_out(space.workspace),
        then=tuple(
            FollowUp(
                step.entry,
                tuple(space.written_out(e) for e in step.global_),
                tuple(space.written_out(e) for e in step.local),
            )
            for step in space.follow_ups
        ),
        limits=_named_limits(space, limits),
        default_config=default,
        extra_build_options=tuple(options[len(defines) :]),
        tuned=_tuned_entries(store, device, stored, space, problem, limits),
        predictions=tuple(predictions),
        requires=(
            *(expression.text for expression in space.requires),
            *default_layouts(problem, stored),
        ),
        fit=space.fit(device.device_type),
        dtype=space.dtype,
    )
    if model is None:
        return table
    return replace(table, predictions=(*table.predictions, *model(store, device, table)))


def _version(
    store: Store, device: StoredDevice, kernel_name: str, kernel_sha256: str | None
) -> StoredKernel:
    """The kernel version a table answers for: the pinned one, else the one last tuned on the
    device, else the installed one; never a retired one.
    """
    from octune.catalogue.registry import load_kernel, retired_versions

    retired = retired_versions(kernel_name)
    if kernel_sha256 in retired:
        raise QueryError(
            f"{kernel_name} version {kernel_sha256[:12]} is retired ({retired[kernel_sha256]}); "
            "omit the hash to use the latest version in service"
        )
    stored = store.lookup_kernel(device.fingerprint, kernel_name, kernel_sha256, skip=retired)
    if stored is not None:
        return stored
    installed = load_kernel(kernel_name)  # unknown names: one line with the closest match
    if kernel_sha256 not in (None, installed.sha256):
        raise QueryError(
            f"no {kernel_name} kernel version {kernel_sha256} in database {store.url}; "
            "omit the hash to use the latest"
        )
    return StoredKernel(
        installed.name, installed.sha256, installed.source, installed.space.source_text
    )


def _tuned_entries(
    store: Store,
    device: StoredDevice,
    stored: StoredKernel,
    space: SearchSpace,
    problem: Problem,
    limits: Mapping[str, int],
) -> tuple[Entry, ...]:
    """Each tuned workload's best config the space, as it stands, can still launch."""
    entries = []
    for row in store.best_per_workload(device.fingerprint, stored.name, stored.sha256):
        if row.problem != problem.name:
            continue
        try:
            space.check(row.config, limits)
        except SpaceError:
            continue  # cannot be launched as the space stands (e.g. a parameter was dropped)
        entries.append(
            Entry(
                shape=stored_shape(problem, row.shape),
                dtype=row.dtype,
                config=tuple(int(row.config[name]) for name in space.parameter_names),
                time_s=row.median_s,
                spread_s=row.spread_s,
                gflops=row.gflops,
                workload_key=row.workload_key,
            )
        )
    return tuple(entries)


def _named_limits(space: SearchSpace, limits: Mapping[str, int]) -> dict[str, int]:
    """The device limits the lookup checks launches against: the work-group and work-item
    limits, those the launch and workspace expressions name, and the largest buffer.
    """
    dims = max(len(step.local) for step in space.launch_steps)
    sizes = [e for step in space.launch_steps for e in (*step.global_, *step.local)]
    if space.workspace is not None:
        sizes.append(space.workspace)
    named = {
        "max_work_group_size",
        *(f"max_work_item_size_{i}" for i in range(dims)),
        *(n for e in sizes for n in e.names if n in limits),
        *(["max_buffer_bytes"] if space.workspace is not None else []),  # one buffer holds it
    }
    return {name: limits[name] for name in sorted(named)}


def stored_shape(problem: Problem, shape: Mapping[str, int]) -> tuple[int, ...]:
    """A stored workload's shape in ``Problem.keys`` order: keys its family gained after it
    was stored (conv2d's ``nhwc``) take their defaults, which is what the workload ran with.
    """
    full = {**dict(problem.defaults), **shape}
    return tuple(int(full[key]) for key in problem.keys)


def default_layouts(problem: Problem, kernel: StoredKernel) -> tuple[str, ...]:
    """``FLAG == default`` for each 0/1 define of the problem that neither the kernel's
    template nor its space names: a version written before its family gained a layout flag
    (conv2d's NHWC) computes in the default layout, and must not answer the other one.
    """
    text = kernel.template_source + kernel.space_source
    defaults = dict(problem.defaults)
    return tuple(
        f"{var} == {defaults[key]}"
        for var, key in problem.flag_defines.items()
        if key in defaults
        and problem.ranges[problem.keys.index(key)] == (0, 1)
        and not re.search(rf"\b{var}\b", text)
    )


def problem_sample(problem: Problem) -> Workload:
    """A smallest possible workload of the problem, for asking which options a kernel adds."""
    from octune.catalogue.registry import family

    owner = family(problem.name)
    for scale in (1, 2, 4, 8, 16, 32, 64):
        shape = {p.name: p.default if p.default is not None else scale for p in owner.params}
        try:
            return owner.workload(shape)
        except OctuneError:
            continue
    raise TableError(f"family {problem.name} has no small possible shape to sample")


class StoreLookup:
    """Lookups against a live database: tables are built on first use and rebuilt when a new
    measurement lands (checked at most every ``check_every_s`` seconds). ``model`` fills each
    table's predictions when it is built; a model trained later swaps its answers, and itself as
    the live ``Predictor`` of its device and kernel version, in with ``swap_predictions``.
    """

    def __init__(
        self,
        store: Store,
        predictor: Predictor | None = None,
        check_every_s: float = 1.0,
        model: TableModel | None = None,
    ) -> None:
        self.store = store
        self.predictor = predictor
        self.model = model
        self.check_every_s = check_every_s
        self._lock = threading.Lock()
        self._indexes: dict[tuple[str, str, str | None], KernelIndex] = {}
        self._live: dict[tuple[str, str], Predictor] = {}  # (device, kernel sha256) -> model
        self._problems: dict[tuple[str, str], str] = {}  # (device, kernel) -> its family
        self._stamp = -1
        self._checked = -float("inf")

    def device(self, choice: str) -> StoredDevice:
        return resolve_device(self.store, choice)

    def index(
        self, device: StoredDevice, kernel_name: str, kernel_sha256: str | None = None
    ) -> KernelIndex:
        key = (device.fingerprint, kernel_name, kernel_sha256)
        with self._lock:
            now = time.monotonic()
            if now - self._checked >= self.check_every_s:
                self._checked = now
                stamp = self.store.measurement_stamp()
                if stamp != self._stamp:
                    self._stamp = stamp
                    self._indexes.clear()
            found = self._indexes.get(key)
            if found is None:
                table = build_table(
                    self.store, device, kernel_name, kernel_sha256, model=self.model
                )
                found = self._indexes[key] = KernelIndex(table, self.predictor_of(table))
            return found

    def predictor_of(self, table: LookupTable) -> Predictor | None:
        """The live model of the table's device and kernel version, else ``predictor``."""
        return self._live.get((table.device_fingerprint, table.sha256), self.predictor)

    def lookup(
        self, device: StoredDevice, query: Query, kernel_sha256: str | None = None
    ) -> Answer:
        """A kernel's answer; for a family's name, its fastest kernel's (``best_answer``)."""
        kernels = self.family_kernels(device, query.kernel)
        if kernels and kernel_sha256 is None:
            return best_answer([self.index(device, name) for name in kernels], query)
        return self.index(device, query.kernel, kernel_sha256).lookup(query)

    def family_kernels(self, device: StoredDevice, name: str) -> list[str]:
        """The kernels of family ``name``, installed or tuned on the device; [] if no family
        has that name.
        """
        from octune.catalogue.registry import families, kernels_of, problem_of

        if name not in families():
            return []
        stored = []
        for kernel_name in self.store.tuned_kernel_names(device.fingerprint):
            key = (device.fingerprint, kernel_name)
            if key not in self._problems:
                found = self.store.lookup_kernel(device.fingerprint, kernel_name)
                self._problems[key] = problem_of(found.space_source) if found else ""
            if self._problems[key] == name:
                stored.append(kernel_name)
        return sorted({*kernels_of(name), *stored})

    def swap_predictions(
        self,
        device_fingerprint: str,
        kernel_sha256: str,
        predictions: Sequence[Entry],
        live: Predictor | None = None,
    ) -> None:
        """New model answers (and the ``live`` model) for the tables of one device and kernel
        version, without reading the database again. Under the lock, so a table being built
        with the old answers is swapped once it is in.
        """
        with self._lock:
            if live is not None:
                self._live[(device_fingerprint, kernel_sha256)] = live
            for key, index in self._indexes.items():
                table = index.table
                if (table.device_fingerprint, table.sha256) == (device_fingerprint, kernel_sha256):
                    table = replace(table, predictions=tuple(predictions))
                    self._indexes[key] = KernelIndex(table, self.predictor_of(table))
