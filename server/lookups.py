"""Lookups for the server: ``octune.lookup.tables.StoreLookup`` (the semantics shared with
offline bundles) plus a cache of answers already serialised to JSON, and 404s that name the
closest known device or kernel.

Invalidation: every cached answer belongs to one *stamp* of the database, its newest
measurement id. A request checks the stamp at most every ``check_every_s`` seconds (one
indexed query) and drops every answer when it moved, so measurements that a tuner writes
straight into the database show up within that delay; an upload through this server drops
the cache at once, and so does a cost model finishing its (background) training.
``StoreLookup`` rebuilds its tables on the same stamp.
"""

from __future__ import annotations

import difflib
import json
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from cachetools import FIFOCache
from pydantic import ValidationError

from octune.api.schemas import BatchLookup, NeighboursOut, NeighboursQuery, ShapeFields
from octune.catalogue.registry import available_kernels, families
from octune.db.queries import StoredDevice
from octune.db.server_store import ServerStore
from octune.lookup.data import Entry, Predictor, Query, QueryError
from octune.lookup.semantics import KernelIndex, check_shape
from octune.lookup.tables import StoreLookup

if TYPE_CHECKING:  # importing it loads XGBoost
    from octune.lookup.predictor import BackgroundModelAnswers

#: Answers kept serialised, the oldest dropped first past this many (a runtime asks a few
#: hundred shapes, a benchmark a few thousand).
MAX_ANSWERS = 200_000

#: Batch bodies whose validated keys are kept (a runtime sends a few), and their bytes: few
#: objects for the garbage collector to scan. A small body counts as its share of the bytes.
MAX_BATCHES, MAX_BATCH_BYTES = 1024, 16 << 20

K = TypeVar("K")
V = TypeVar("V")

#: device, kernel, dtype, then the shape's (key, value) pairs in key order
AnswerKey = tuple[str, str, str, tuple[tuple[str, int], ...]]


def _peek(cache: FIFOCache[K, V], key: K) -> V | None:
    """``cache[key]``, or None: also when a worker thread drops it between the check and the
    read (``cache.get`` checks, then reads).
    """
    try:
        return cache[key]
    except KeyError:
        return None


class NotFoundError(Exception):
    """An unknown device or kernel; the message names the closest known ones."""


class LookupService:
    def __init__(
        self,
        store: ServerStore,
        check_every_s: float,
        model: BackgroundModelAnswers | None = None,
    ) -> None:
        """``model``: the cost model's answers for far shapes, as bundles carry them."""
        self.store = store
        self.check_every_s = check_every_s
        self.model = model
        self.lookup = self._tables()
        self._lock = threading.Lock()
        self._checked = -float("inf")
        self._stamp = -1
        self._generation = 0  # bumped whenever answers are dropped
        # First in, first out: a read leaves the order alone, so the event loop reads these
        # while worker threads write them (under the lock) as it reads any dict.
        self._answers: FIFOCache[AnswerKey, bytes] = FIFOCache(MAX_ANSWERS)
        self._raw: FIFOCache[bytes, bytes] = FIFOCache(MAX_ANSWERS)  # GET query -> answer
        # valid batch body -> (its size, its keys); read and written by the event loop only
        self._batches: FIFOCache[bytes, tuple[int, list[AnswerKey]]] = FIFOCache(
            MAX_BATCH_BYTES, getsizeof=lambda entry: max(entry[0], MAX_BATCH_BYTES // MAX_BATCHES)
        )
        self._devices: dict[str, StoredDevice] = {}
        self._kernels: frozenset[str] = frozenset()
        if model is not None:
            model.subscribe(self._model_trained)

    @staticmethod
    def key(device: str, kernel: str, shape: ShapeFields) -> AnswerKey:
        return (device, kernel, shape.dtype, tuple(sorted(shape.shape().items())))

    @staticmethod
    def batch_keys(batch: BatchLookup) -> list[AnswerKey]:
        return [LookupService.key(batch.device, batch.kernel, w) for w in batch.workloads]

    @staticmethod
    def batch_body(answers: Sequence[bytes]) -> bytes:
        """``BatchAnswer`` JSON from answers already serialised."""
        return b'{"answers":[' + b",".join(answers) + b"]}"

    def _fresh(self) -> bool:
        return time.monotonic() - self._checked < self.check_every_s

    def cached(self, keys: Sequence[AnswerKey]) -> list[bytes] | None:
        """The answers without touching the database, if all are cached and not due a check."""
        if not self._fresh():
            return None
        answers, found = self._answers, []
        for key in keys:
            answer = _peek(answers, key)
            if answer is None:
                return None
            found.append(answer)
        return found

    def cached_query(self, query_string: bytes) -> bytes | None:
        """The answer to a query string answered before (so already validated), if fresh."""
        return _peek(self._raw, query_string) if self._fresh() else None

    def cached_batch(self, body: bytes) -> bytes | None:
        """The answer to a raw ``BatchLookup`` body whose answers are all cached; None when the
        app must answer it (or say why it is invalid). The body is validated in one call on
        the bytes, and only once: a runtime sends the same batch again and again, and its
        validation costs more than the answers.
        """
        if not self._fresh():
            return None
        entry = self._batches.get(body)
        if entry is None:
            try:
                entry = (len(body), self.batch_keys(BatchLookup.model_validate_json(body)))
            except ValidationError:
                return None
            if len(body) <= MAX_BATCH_BYTES:
                self._batches[body] = entry
        found = self.cached(entry[1])
        return None if found is None else self.batch_body(found)

    def remember_query(self, query_string: bytes, body: bytes) -> None:
        with self._lock:
            self._raw[query_string] = body

    def invalidate(self) -> None:
        """After an upload: forget every table and answer now, not at the next stamp check."""
        with self._lock:
            self.lookup = self._tables()
            self._checked = -float("inf")
            self._stamp = -1
            self._drop()

    def _tables(self) -> StoreLookup:
        return StoreLookup(self.store, check_every_s=self.check_every_s, model=self.model)

    def close(self) -> None:
        """Stop training models: call before closing the store."""
        if self.model is not None:
            self.model.close()

    def answers(self, keys: Sequence[AnswerKey], batch: bool = False) -> list[bytes]:
        """Answers as JSON bytes, in order; may query the database (call from a worker thread).
        ``batch``: a shape's error names its item (``workloads[3]: ...``).
        """
        self._refresh()
        generation = self._generation
        out = []
        for i, key in enumerate(keys):
            found = _peek(self._answers, key)
            if found is None:
                choice, kernel, dtype, items = key
                self._check_kernel(kernel)
                query = Query(kernel, dict(items), dtype)
                try:
                    if kernel in families():  # a bad shape is a 422 whatever the device
                        check_shape(families()[kernel].problem, query)
                    device = self.device(choice)
                    answer = self.lookup.lookup(device, query)
                except QueryError as error:
                    if not batch:
                        raise
                    raise QueryError(f"workloads[{i}]: {error}") from None
                found = json.dumps(answer.to_dict(), separators=(",", ":")).encode()
                with self._lock:
                    if generation == self._generation:  # not answered from dropped tables
                        self._answers[key] = found
            out.append(found)
        return out

    def neighbours(self, query: NeighboursQuery) -> NeighboursOut:
        """One kernel version's configs tuned nearest the query's shape (``KernelIndex.
        neighbours``); may query the database (call from a worker thread). Not cached: a
        runtime asks once per untuned layer at load.
        """
        self._refresh()
        self._check_kernel(query.kernel)
        if query.kernel in families() and query.kernel not in available_kernels():
            raise QueryError(
                f"'{query.kernel}' is a family: ask for one of its kernels, as an answer's "
                "'kernel' names it"
            )
        device = self.device(query.device)
        index = self.lookup.index(device, query.kernel, query.kernel_sha256)
        asked = Query(query.kernel, query.shape(), query.dtype)
        found = index.neighbours(asked, query.count)
        parameters = index.table.parameters
        return NeighboursOut(
            kernel=query.kernel,
            kernel_sha256=index.table.sha256,
            configs=[dict(zip(parameters, config, strict=True)) for config in found],
            predicted=self._predicted(index, asked),
        )

    def _predicted(self, index: KernelIndex, query: Query) -> dict[str, int] | None:
        """The live model's config at the query's shape where it launches there, also outside
        the tuned range: a confirmation measures it, so its estimate needs no trust.
        """
        model = self.lookup.predictor_of(index.table)
        found = index.predict(query, model) if model and index.table.tuned else None
        return None if found is None else index.table.entry_config(found[0].config)

    def _drop(self) -> None:
        """Forget every answer; the caller holds the lock."""
        self._answers.clear()
        self._raw.clear()
        self._generation += 1

    def _model_trained(
        self, device: str, kernel_sha256: str, answers: Sequence[Entry], live: Predictor | None
    ) -> None:
        """A model finished training (on its own thread): it and its answers replace the old."""
        self.lookup.swap_predictions(device, kernel_sha256, answers, live)
        with self._lock:
            self._drop()

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < self.check_every_s:
            return
        stamp = self.store.measurement_stamp()
        with self._lock:
            if stamp != self._stamp:
                self._drop()
                self._devices.clear()
                self._kernels = frozenset(
                    {*self.store.kernel_names(), *available_kernels(), *families()}
                )
                self._stamp = stamp
            self._checked = now

    def device(self, choice: str) -> StoredDevice:
        """A stored device by fingerprint or name; ``NotFoundError`` (404) naming the closest
        for an unknown one, ``QueryError`` (422) listing them for an ambiguous one.
        """
        found = self._devices.get(choice)
        if found is not None:
            return found
        try:
            found = self.lookup.device(choice)
        except QueryError:
            devices = self.store.stored_devices()
            needle = choice.lower()
            if any(needle in d.name.lower() or d.fingerprint.startswith(needle) for d in devices):
                raise  # ambiguous: its message lists the devices that match
            known = sorted({d.name for d in devices} | {d.fingerprint for d in devices})
            close = difflib.get_close_matches(choice, known, n=3, cutoff=0.3)
            hint = f"closest: {', '.join(close)}" if close else "see GET /v1/devices"
            raise NotFoundError(f"unknown device '{choice}': {hint}") from None
        self._devices[choice] = found
        return found

    def _check_kernel(self, kernel: str) -> None:
        if kernel not in self._kernels:
            close = difflib.get_close_matches(kernel, sorted(self._kernels), n=3, cutoff=0.3)
            hint = f"closest: {', '.join(close)}" if close else "known: " + ", ".join(self._kernels)
            raise NotFoundError(f"unknown kernel '{kernel}': {hint}")
