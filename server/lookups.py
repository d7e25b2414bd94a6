"""Lookups for the server: ``octune.db.lookup_tables.StoreLookup`` (the semantics shared with
offline bundles) plus a cache of answers already serialised to JSON, and 404s that name the
closest known device or kernel.

Invalidation: every cached answer belongs to one *stamp* of the database, its newest
measurement id. A request checks the stamp at most every ``check_every_s`` seconds (one
indexed query) and drops every answer when it moved, so measurements that a tuner writes
straight into the database show up within that delay; an upload through this server drops
the cache at once. ``StoreLookup`` rebuilds its tables on the same stamp.
"""

from __future__ import annotations

import difflib
import json
import threading
import time
from collections.abc import Mapping, Sequence

from octune.db.lookup_tables import StoreLookup, TableModel
from octune.db.server_store import ServerStore
from octune.db.store import StoredDevice
from octune.tuner.kernels import available_kernels
from octune.tuner.lookup import Predictor, Query, QueryError

#: Answers kept serialised; past this many the cache starts over (a runtime asks a few
#: hundred shapes, a benchmark a few thousand).
MAX_ANSWERS = 200_000

AnswerKey = tuple[str, str, tuple[tuple[str, int], ...], str]


class NotFoundError(Exception):
    """An unknown device or kernel; the message names the closest known ones."""


class LookupService:
    def __init__(
        self,
        store: ServerStore,
        check_every_s: float,
        predictor: Predictor | None = None,
        model: TableModel | None = None,
    ) -> None:
        """``model``: the cost model's answers for far shapes, as bundles carry them."""
        self.store = store
        self.check_every_s = check_every_s
        self.lookup = StoreLookup(store, predictor, check_every_s, model)
        self._lock = threading.Lock()
        self._checked = -float("inf")
        self._stamp = -1
        self._answers: dict[AnswerKey, bytes] = {}
        self._raw: dict[bytes, bytes] = {}  # GET /v1/lookup query string -> answer
        self._devices: dict[str, StoredDevice] = {}
        self._kernels: frozenset[str] = frozenset()

    @staticmethod
    def key(device: str, kernel: str, shape: Mapping[str, int], dtype: str) -> AnswerKey:
        return (device, kernel, tuple(shape.items()), dtype)

    def cached(self, key: AnswerKey) -> bytes | None:
        """The answer without touching the database, if it is cached and not due a check."""
        if time.monotonic() - self._checked >= self.check_every_s:
            return None
        return self._answers.get(key)

    def cached_query(self, query_string: bytes) -> bytes | None:
        """The answer to a query string answered before (so already validated), if fresh."""
        if time.monotonic() - self._checked >= self.check_every_s:
            return None
        return self._raw.get(query_string)

    def remember_query(self, query_string: bytes, body: bytes) -> None:
        if len(self._raw) >= MAX_ANSWERS:
            self._raw.clear()
        self._raw[query_string] = body

    def invalidate(self) -> None:
        """After an upload: forget every table and answer now, not at the next stamp check."""
        with self._lock:
            old = self.lookup
            self.lookup = StoreLookup(self.store, old.predictor, self.check_every_s, old.model)
            self._checked = -float("inf")
            self._stamp = -1

    def answers(self, keys: Sequence[AnswerKey]) -> list[bytes]:
        """Answers as JSON bytes, in order; may query the database (call from a worker thread)."""
        self._refresh()
        out = []
        for key in keys:
            found = self._answers.get(key)
            if found is None:
                choice, kernel, shape, dtype = key
                device = self._device(choice)
                self._check_kernel(kernel)
                answer = self.lookup.lookup(device, Query(kernel, dict(shape), dtype))
                found = json.dumps(answer.to_dict(), separators=(",", ":")).encode()
                if len(self._answers) >= MAX_ANSWERS:
                    self._answers.clear()
                    self._raw.clear()
                self._answers[key] = found
            out.append(found)
        return out

    def answer(self, key: AnswerKey) -> bytes:
        return self.answers([key])[0]

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < self.check_every_s:
            return
        stamp = self.store.measurement_stamp()
        with self._lock:
            if stamp != self._stamp:
                self._answers.clear()
                self._raw.clear()
                self._devices.clear()
                self._kernels = frozenset({*self.store.kernel_names(), *available_kernels()})
                self._stamp = stamp
            self._checked = now

    def _device(self, choice: str) -> StoredDevice:
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
