"""Where a runtime's configs come from: the config service, a firmware bundle, or a database,
all answering through ``octune.lookup.semantics`` (the server's lookup), so one model gets the
same kernels and configs from each. Each also hands over the exact kernel version an answer
names (its source and search space), since a config is only valid for the source it was tuned
with.

The config policies compared in benchmarks:

``tuned``
    each layer's own answer (exact, nearest, predicted or default).
``one-per-device``
    one config per kernel and device, as a library tuned once per device ships: every layer
    runs the config of the largest (most flops) layer of the model tuned exactly whose kernel
    takes it; a layer no such kernel takes keeps its own answer.
``default``
    what octune answers where nothing is tuned: each family's default kernel and config.
``confirmed``
    ``tuned``, then a first-use confirmation for each layer whose answer was not measured at
    its own shape (nearest, predicted or default): every kernel of the family that takes the
    layer answers for it, with the configs of its nearest few tuned shapes beside the answer
    (from a database, a bundle, or the service's ``GET /v1/neighbours``), each is run and
    verified on the device, and the fastest correct one is kept. A lookup compares kernels by
    estimated times, which are least reliable exactly where nothing was measured, and one
    neighbour's config suits a batch nobody tuned less often than one of the few nearest; a
    few milliseconds per candidate at load settle it (builds once, then from the cache). A
    database also offers its cost model's pick at the layer's own shape, beyond the tuned
    range too, where a lookup trusts no estimate: measured here, it needs no trust, and at a
    batch nobody tuned it is the one candidate whose work per tile was weighed at that batch
    (ResNet-50's strided convs at batch 32 from a batch-1 database: 2-3 x faster than the
    nearest shapes' configs, benchmarks/results/networks.md). Last come each kernel's shipped
    starts for the device's type (``catalogue.starts``), which were picked over batch 1 and
    16 alike: a database tuned at batch 1 holds no tile that suits batch 16, and a model
    trained on it only chooses among those. Given a store to record into
    (``octune run`` gives its database), a confirmation keeps what it measured there, passed
    and rejected alike, as a session of ``LOAD_STRATEGY``: the next load answers the layer as
    tuned at its shape and confirms nothing (ResNet-50 at batch 32 on the H200 took 134 s to
    confirm), and the cost model learns from the shapes that run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, TypeGuard

import pyopencl as cl

from octune.api.client import ClientError, OctuneClient
from octune.api.schemas import NeighboursOut
from octune.catalogue.family import OperandMemo, Workload
from octune.catalogue.registry import (
    KernelSpec,
    kernel_from_texts,
    load_kernel,
    resolve_kernels,
    retired_versions,
)
from octune.catalogue.starts import config_starts
from octune.core.errors import OctuneError, SpaceError
from octune.core.results import Measurement
from octune.db.queries import StoredDevice
from octune.db.store import Store
from octune.firmware.bundle_load import in_service, load_bundle
from octune.lookup.data import Answer, FollowUpSizes, Query, QueryError
from octune.lookup.semantics import KernelIndex
from octune.lookup.tables import StoreLookup
from octune.tuner.device import DeviceInfo
from octune.tuner.measure import RunnerChain
from octune.tuner.programs import ProgramCache
from octune.tuner.tuning_store import TuningStore, record_session
from octune.tuner.workers import build_all

if TYPE_CHECKING:
    from octune.lookup.predictor import ModelAnswers

Policy = Literal["tuned", "one-per-device", "default", "confirmed"]
POLICIES: tuple[Policy, ...] = ("tuned", "one-per-device", "default", "confirmed")
#: Timed runs per candidate of a first-use confirmation: at least, at most, and the kernel
#: time after which the least will do. Five runs of a 16 us kernel picked the slower of two
#: close kernels on the H100 (benchmarks/RESULTS.md); runs are cheap beside the builds.
CONFIRM_RUNS, CONFIRM_MOST_RUNS, CONFIRM_SECONDS = 5, 30, 0.05
#: Configs of the nearest tuned shapes a first-use confirmation also runs, per kernel (distinct,
#: legal for the layer). On the H200 at batch 16, with ResNet-50 tuned at batch 1 only, the
#: fastest config for a conv layer was the nearest shape's in 8 of 23 layers and among the four
#: nearest shapes' in 19 (benchmarks/results/networks.md, "Answers across batch sizes").
CONFIRM_NEIGHBOURS = 4
#: Workloads per batch request: the server's limit.
BATCH_LIMIT = 1024
#: The strategy a first-use confirmation's measurements are stored under.
LOAD_STRATEGY = "confirmed-at-load"


class ConfigSource(Protocol):
    """Answers for one family's layers in one request, and the kernel version an answer names."""

    where: str  # for messages: the URL, bundle or database

    def answers(
        self, family: str, shapes: Sequence[Mapping[str, int]], dtype: str = "float32"
    ) -> list[Answer]: ...

    def kernel(self, answer: Answer) -> KernelSpec: ...

    def neighbours(
        self, kernel: KernelSpec, shape: Mapping[str, int], dtype: str, count: int
    ) -> list[dict[str, int]]:
        """The configs of ``kernel`` tuned at the shapes nearest ``shape``, nearest first, at
        most ``count`` (``KernelIndex.neighbours``); none where the source has no table of
        that version.
        """
        ...

    def predicted(
        self, kernel: KernelSpec, shape: Mapping[str, int], dtype: str
    ) -> dict[str, int] | None:
        """The source's cost model's config of ``kernel`` for ``shape``, inside the tuned range
        or not; None where the source has no model of that version (a bundle; a service
        whose model is not trained yet, or an older one).
        """
        ...


def _neighbours(
    index: KernelIndex | None,
    kernel: KernelSpec,
    shape: Mapping[str, int],
    dtype: str,
    count: int,
) -> list[dict[str, int]]:
    """``ConfigSource.neighbours`` from a table the source holds."""
    if not _holds(index, kernel, dtype):
        return []
    try:
        found = index.neighbours(Query(kernel.name, dict(shape), dtype), count)
    except QueryError:
        return []
    return [index.table.entry_config(config) for config in found]


def _holds(index: KernelIndex | None, kernel: KernelSpec, dtype: str) -> TypeGuard[KernelIndex]:
    """Whether a source's table is of ``kernel``'s version and ``dtype``."""
    return index is not None and (index.table.sha256, index.table.dtype) == (kernel.sha256, dtype)


def _unshipped(answer: Answer, spec: KernelSpec, where: str, signed: bool) -> KernelSpec:
    """``spec``, sent by ``where`` for ``answer``, a version octune does not ship, if this client
    may compile it: a kernel source runs on the user's device (under PoCL, in this process), so
    only one whose signature the user's public key verified (``signed``) is compiled.
    """
    if spec.sha256 != answer.kernel_sha256:
        raise OctuneError(
            f"{where} sent {answer.kernel} texts whose hash {spec.sha256[:12]} is not the version "
            f"{answer.kernel_sha256[:12]} it answered: not compiled"
        )
    if not signed:
        raise OctuneError(
            f"{where} answers {answer.kernel} version {answer.kernel_sha256[:12]}, which this "
            "octune does not ship: compile it only signed (pass the signer's --public-key), or "
            "install the octune or kernel folder it was tuned with"
        )
    return spec


def _installed(answer: Answer) -> KernelSpec | None:
    """The installed kernel, when it is the version the answer was tuned with."""
    try:
        spec = load_kernel(answer.kernel)
    except OctuneError:
        return None
    return spec if spec.sha256 == answer.kernel_sha256 else None


class ServerConfigs:
    """The config service over REST: one batch lookup per family of the model."""

    def __init__(
        self, url: str, device: DeviceInfo, token: str | None = None, public_key: str | None = None
    ) -> None:
        self.where = url
        self.device = device
        self.client = OctuneClient(url, token)
        self.public_key = public_key
        self._kernels: dict[str, KernelSpec] = {}
        # Each GET /v1/neighbours answered, by kernel version, shape and dtype: its count and
        # body (None: refused, or a server without it).
        self._asked: dict[tuple[str, tuple[tuple[str, int], ...], str],
                          tuple[int, NeighboursOut | None]] = {}  # fmt: skip

    def answers(
        self, family: str, shapes: Sequence[Mapping[str, int]], dtype: str = "float32"
    ) -> list[Answer]:
        found = []
        for start in range(0, len(shapes), BATCH_LIMIT):
            part = [{**shape, "dtype": dtype} for shape in shapes[start : start + BATCH_LIMIT]]
            for answer in self.client.lookup_batch(self.device.fingerprint, family, part):
                fields = answer.model_dump(exclude={"estimated"})  # Answer derives it
                sizes = {key: tuple(fields[key]) for key in ("global_size", "local_size")}
                then = tuple(
                    FollowUpSizes(step.entry, tuple(step.global_size), tuple(step.local_size))
                    for step in answer.then
                )
                found.append(Answer(**{**fields, **sizes, "then": then}))
        return found

    def kernel(self, answer: Answer) -> KernelSpec:
        spec = self._kernels.get(answer.kernel_sha256) or _installed(answer)
        if spec is None:
            text = self.client.kernel_source(answer.kernel_sha256)
            sent = kernel_from_texts(answer.kernel, text.template_source, text.space_source)
            if self.public_key is not None:
                from octune.firmware.signing import verify_kernel

                verify_kernel(answer.kernel_sha256, text.signature, self.public_key, self.where)
            spec = _unshipped(answer, sent, self.where, signed=self.public_key is not None)
        self._kernels[answer.kernel_sha256] = spec
        return spec

    def neighbours(
        self, kernel: KernelSpec, shape: Mapping[str, int], dtype: str, count: int
    ) -> list[dict[str, int]]:
        """``GET /v1/neighbours`` for the version the service answered with; none from a
        server without it (an older one) or one that refuses: the answer alone is confirmed.
        """
        found = self._near(kernel, shape, dtype, count)
        return [] if found is None else found.configs

    def predicted(
        self, kernel: KernelSpec, shape: Mapping[str, int], dtype: str
    ) -> dict[str, int] | None:
        """The service's model pick, from the same ``GET /v1/neighbours`` (asked once)."""
        found = self._near(kernel, shape, dtype, 1)
        return None if found is None else found.predicted

    def _near(
        self, kernel: KernelSpec, shape: Mapping[str, int], dtype: str, count: int
    ) -> NeighboursOut | None:
        key = (kernel.sha256, tuple(sorted(shape.items())), dtype)
        asked = self._asked.get(key)
        if asked is None or asked[0] < count:
            try:
                found = self.client.neighbours(
                    self.device.fingerprint, kernel.name, kernel.sha256, shape, dtype, count
                )
            except ClientError:
                found = None
            asked = self._asked[key] = (count, found)
        return asked[1]


class BundleConfigs:
    """A firmware bundle exported for this device; it carries the kernel sources."""

    def __init__(self, path: Path, device: DeviceInfo, public_key: str | None = None) -> None:
        self.bundle = in_service(load_bundle(path, public_key))
        self.signed = public_key is not None  # load_bundle verified it
        # One exported before a kernel version was retired: its other kernels answer.
        self.where = str(path) + "".join(
            f" (without {name}: a retired version)" for name in self.bundle.retired
        )
        tuned_on = self.bundle.device.get("fingerprint")
        if tuned_on != device.fingerprint:
            raise OctuneError(
                f"bundle {path} was exported for device {tuned_on} "
                f"({self.bundle.device.get('name')}), not {device.fingerprint} ({device.name}) "
                "that runs the model: export one for this device, or pick it with --device"
            )

    def answers(
        self, family: str, shapes: Sequence[Mapping[str, int]], dtype: str = "float32"
    ) -> list[Answer]:
        answers = []
        for shape in shapes:
            try:
                answers.append(self.bundle.lookup(Query(family, dict(shape), dtype)))
            except QueryError as error:
                described = dict(shape) if dtype == "float32" else f"{dict(shape)} {dtype}"
                raise OctuneError(
                    f"bundle {self.where} has no kernel for the {family} layer {described} "
                    f"({error}): tune a kernel that takes it, then export again"
                ) from None
        return answers

    def kernel(self, answer: Answer) -> KernelSpec:
        installed = _installed(answer)
        if installed is not None:
            return installed
        template, space = self.bundle.sources[answer.kernel]
        sent = kernel_from_texts(answer.kernel, template, space)
        return _unshipped(answer, sent, f"bundle {self.where}", self.signed)

    def neighbours(
        self, kernel: KernelSpec, shape: Mapping[str, int], dtype: str, count: int
    ) -> list[dict[str, int]]:
        return _neighbours(self.bundle.indexes.get(kernel.name), kernel, shape, dtype, count)

    def predicted(
        self, kernel: KernelSpec, shape: Mapping[str, int], dtype: str
    ) -> dict[str, int] | None:
        return None  # a bundle carries tables, not models


class StoreConfigs:
    """A database, answered by ``StoreLookup`` as the server answers (without its cost model):
    the device need not be in it, a device nobody tuned gets the defaults. Its cost models
    (``predicted``) are trained on first ask, once per kernel version.
    """

    def __init__(self, store: Store, device: DeviceInfo) -> None:
        self.where = store.url
        self.store = store
        self.device = StoredDevice.of(device)
        self.lookup = StoreLookup(store)
        self._models: ModelAnswers | None = None

    def answers(
        self, family: str, shapes: Sequence[Mapping[str, int]], dtype: str = "float32"
    ) -> list[Answer]:
        return [
            self.lookup.lookup(self.device, Query(family, dict(shape), dtype)) for shape in shapes
        ]

    def kernel(self, answer: Answer) -> KernelSpec:
        spec = _installed(answer)
        if spec is None:
            stored = self.store.lookup_kernel(
                self.device.fingerprint, answer.kernel, answer.kernel_sha256
            )
            if stored is None:
                raise OctuneError(f"kernel version {answer.kernel_sha256} is not in {self.where}")
            spec = kernel_from_texts(stored.name, stored.template_source, stored.space_source)
        return spec

    def neighbours(
        self, kernel: KernelSpec, shape: Mapping[str, int], dtype: str, count: int
    ) -> list[dict[str, int]]:
        index = self.lookup.index(self.device, kernel.name, kernel.sha256)
        return _neighbours(index, kernel, shape, dtype, count)

    def predicted(
        self, kernel: KernelSpec, shape: Mapping[str, int], dtype: str
    ) -> dict[str, int] | None:
        index = self.lookup.index(self.device, kernel.name, kernel.sha256)
        if not _holds(index, kernel, dtype) or not index.table.tuned:
            return None
        if self._models is None:
            from octune.lookup.predictor import ModelAnswers  # xgboost: only when asked

            self._models = ModelAnswers()
        model = self._models.model(self.store, self.device, index.table)
        try:
            found = index.predict(Query(kernel.name, dict(shape), dtype), model) if model else None
        except QueryError:
            return None
        return None if found is None else index.table.entry_config(found[0].config)


def default_configs(device: DeviceInfo) -> StoreConfigs:
    """The answers of an empty database: octune's defaults, whatever is tuned anywhere."""
    return StoreConfigs(Store("sqlite://"), device)


@dataclass(frozen=True)
class Choice:
    """The kernel version and config one conv or GEMM layer runs with, and why."""

    kernel: KernelSpec
    config: dict[str, int]
    # The answer's match, or "device" (one-per-device: another layer's config); ", timed" when
    # a first-use confirmation chose it.
    match: str


def choose(
    source: ConfigSource,
    workloads: Sequence[Workload],
    answers: Sequence[Answer],
    policy: Policy,
    limits: Mapping[str, int],
) -> list[Choice]:
    """Each layer's choice under ``policy`` (``default``: ``answers`` came from
    ``default_configs``), from the layers' answers in order.
    """
    own = [Choice(_kernel(source, a), dict(a.config), a.match) for a in answers]
    if policy != "one-per-device":
        return own
    tuned = sorted(
        (pair for pair in zip(workloads, own, strict=True) if pair[1].match == "exact"),
        key=lambda pair: -pair[0].flops,
    )
    chosen = []
    for workload, choice in zip(workloads, own, strict=True):
        donors = (
            Choice(donor.kernel, donor.config, "device")
            for _, donor in tuned
            if _runs(donor, workload, limits)
        )
        chosen.append(next(donors, choice))
    return chosen


def _kernel(source: ConfigSource, answer: Answer) -> KernelSpec:
    """The kernel version an answer names, unless it is retired (an older server's answer)."""
    why = retired_versions(answer.kernel).get(answer.kernel_sha256)
    if why is not None:
        raise OctuneError(
            f"{source.where} answers {answer.kernel} version {answer.kernel_sha256[:12]}, which "
            f"is retired ({why}); update octune where the configs come from, so it skips it"
        )
    return source.kernel(answer)


def _runs(choice: Choice, workload: Workload, limits: Mapping[str, int]) -> bool:
    """Whether the choice's kernel takes the workload and its config launches for it."""
    if choice.kernel.takes(workload) is not None:
        return False
    try:
        choice.kernel.space.launches(choice.config, workload.shape_vars(), limits)
        choice.kernel.space.workspace_elements(choice.config, workload.shape_vars(), limits)
    except SpaceError:
        return False
    return True


def _legal(
    kernel: KernelSpec, config: Mapping[str, int], workload: Workload, limits: Mapping[str, int]
) -> bool:
    """Whether ``config`` is one of the kernel's on a device of ``limits`` and runs there."""
    try:
        kernel.space.check(config, limits)
    except SpaceError:
        return False
    return _runs(Choice(kernel, dict(config), "start"), workload, limits)


def confirm(
    source: ConfigSource,
    family: str,
    workload: Workload,
    choice: Choice,
    device: cl.Device,
    cache: ProgramCache | None = None,
    neighbours: int = CONFIRM_NEIGHBOURS,
    predicted: bool = True,
    record: TuningStore | None = None,
    starts: bool = True,
) -> Choice:
    """The ``confirmed`` policy for one layer: ``choice`` if it was measured at this shape
    (exact), else the fastest verified of its ``confirm_candidates`` (recorded in ``record``),
    each built ahead into ``cache`` (``build_ahead``); ``choice`` itself when none verifies.
    """
    if choice.match == "exact":
        return choice
    info = DeviceInfo.from_cl(device) if starts else None
    candidates = confirm_candidates(source, family, workload, choice, neighbours, predicted, info)
    cache = ProgramCache() if cache is None else cache
    build_ahead([(workload, candidates)], device, cache)
    return fastest(candidates, workload, device, cache, record) or choice


def confirm_candidates(
    source: ConfigSource,
    family: str,
    workload: Workload,
    choice: Choice,
    neighbours: int = CONFIRM_NEIGHBOURS,
    predicted: bool = True,
    device: DeviceInfo | None = None,
) -> list[Choice]:
    """What a confirmation runs, distinct, ``choice`` first: the answers of every kernel of
    ``family`` that takes the layer and (with ``neighbours``) each one's configs of the
    ``neighbours`` nearest tuned shapes and (with ``predicted``) its cost model's pick, where
    the source has one; then (given the ``device``) each kernel's shipped starts for its type
    that are legal there (``catalogue.starts``): tiles measured on many shapes and batches of
    devices of the type, where a database tuned at one batch holds only that batch's tiles.
    """
    candidates = [choice]
    for kernel in resolve_kernels(family):
        if kernel.takes(workload) is not None:
            continue
        spec = choice.kernel
        if kernel.name != choice.kernel.name:
            try:
                (answer,) = source.answers(kernel.name, [workload.shape], workload.dtype)
            except OctuneError:  # a source without that kernel: the installed one's starts
                candidates += _starts(kernel, workload, device)
                continue
            candidates.append(Choice(_kernel(source, answer), dict(answer.config), answer.match))
            spec = candidates[-1].kernel
        if neighbours:
            found = source.neighbours(spec, workload.shape, workload.dtype, neighbours)
            candidates += [Choice(spec, config, "nearest") for config in found]
            pick = source.predicted(spec, workload.shape, workload.dtype) if predicted else None
            if pick is not None:
                candidates.append(Choice(spec, pick, "predicted"))
        candidates += _starts(spec, workload, device)
    distinct: dict[tuple[str, tuple[tuple[str, int], ...]], Choice] = {}
    for candidate in candidates:  # the first of equal ones keeps its match
        distinct.setdefault(
            (candidate.kernel.sha256, tuple(sorted(candidate.config.items()))), candidate
        )
    return list(distinct.values())


def _starts(kernel: KernelSpec, workload: Workload, device: DeviceInfo | None) -> list[Choice]:
    """The kernel's shipped starts for the device's type that are legal there and run the
    workload; none without a device.
    """
    if device is None:
        return []
    return [
        Choice(kernel, config, "start")
        for config in config_starts(kernel, device.device_type)
        if _legal(kernel, config, workload, device.limits)
    ]


def build_ahead(
    layers: Sequence[tuple[Workload, Sequence[Choice]]],
    device: cl.Device,
    cache: ProgramCache,
    jobs: int | None = None,
) -> None:
    """Fill the program cache with every candidate's build (``build_all``), so that the
    measuring that follows only loads. A confirmation at load is mostly builds: ResNet-50's
    at batch 32 on the H200, 257 s.
    """
    build_all(device, cache, (
        (c.kernel.source, c.kernel.build_options(c.config, workload))
        for workload, candidates in layers
        for c in candidates
    ), jobs)  # fmt: skip


def fastest(
    candidates: Sequence[Choice],
    workload: Workload,
    device: cl.Device,
    cache: ProgramCache | None = None,
    record: TuningStore | None = None,
) -> Choice | None:
    """The fastest verified of ``candidates`` on the device, marked ``timed``; None when
    none verifies. Each kernel's measurements go to ``record`` as they are taken. The kernels
    share one OpenCL context and one draw of the inputs and their float64 reference (the
    family's operands are the layer's): a bind cost a batch-16 layer 1.3 s on the H200's host.
    """
    timed = []
    info = DeviceInfo.from_cl(device) if record is not None else None
    chain = RunnerChain(OperandMemo(size=1))
    for kernel_candidates in _by_kernel(candidates):
        kernel = kernel_candidates[0].kernel
        runner = chain.runner(
            device, kernel, workload, seed=0, repeats=CONFIRM_MOST_RUNS,
            min_repeats=CONFIRM_RUNS, max_seconds=CONFIRM_SECONDS, cache=cache,
        )  # fmt: skip
        measured = [runner.measure(candidate.config) for candidate in kernel_candidates]
        if record is not None and info is not None:
            _record(record, info, kernel, workload, measured)
        for candidate, measurement in zip(kernel_candidates, measured, strict=True):
            if measurement.ok and measurement.median_s:
                timed.append((measurement.median_s, candidate.kernel.name, candidate))
    if not timed:
        return None
    best = min(timed, key=lambda entry: entry[:2])[2]
    return replace(best, match=f"{best.match}, timed")


def _record(
    store: TuningStore,
    device: DeviceInfo,
    kernel: KernelSpec,
    workload: Workload,
    measured: Sequence[Measurement],
) -> None:
    """A completed session of ``LOAD_STRATEGY`` holding what a confirmation measured."""
    record_session(
        store, store.device_id(device), kernel, workload, measured,
        strategy=LOAD_STRATEGY, seed=0, settings={"candidates": len(measured)},
    )  # fmt: skip


def _by_kernel(candidates: Sequence[Choice]) -> list[list[Choice]]:
    """Candidates grouped by kernel version, in order: one runner (its programs) serves each
    group.
    """
    groups: dict[str, list[Choice]] = {}
    for candidate in candidates:
        groups.setdefault(candidate.kernel.sha256, []).append(candidate)
    return list(groups.values())
