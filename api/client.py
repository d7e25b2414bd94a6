"""A small client of the config service, for inference runtimes and tuning machines.

    with OctuneClient("http://tuning-server:8000", token=...) as client:
        answer = client.lookup("677c4ca1092f9fd5", "gemm", {"m": 512, "n": 512, "k": 512})
        client.upload_session(store, session_id)   # after (or during) `octune tune`

Errors come back as one-line ``ClientError``s carrying the server's message.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Self

import httpx

from octune.api.schemas import (
    AgentOut,
    AgentStatusOut,
    BatchAnswer,
    DeviceOut,
    JobOut,
    JobUploadOut,
    KernelSourceOut,
    LeaseOut,
    LookupAnswer,
    NeighboursOut,
    NetworkIn,
    NetworkOut,
    Readiness,
    SubmitOut,
    UploadIn,
    UploadOut,
)
from octune.core.errors import OctuneError
from octune.db.store import Store

#: Measurements per upload request: well under the server's default body limit.
UPLOAD_CHUNK = 2000
_JSON = {"Content-Type": "application/json"}


class ClientError(OctuneError):
    """The server refused a request (``status``), or could not be reached (``status`` None)."""

    exit_code = 5

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class OctuneClient:
    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise ClientError(
                f"cannot reach the octune server at {self.base_url}: {error}; check the URL "
                "and that `octune serve` runs there"
            ) from error
        if response.is_error:
            try:
                message = response.json()["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text[:200] or response.reason_phrase
            raise ClientError(
                f"{method} {path}: server answered {response.status_code}: {message}",
                response.status_code,
            )
        return response.json()

    def ready(self) -> Readiness:
        return Readiness.model_validate(self._call("GET", "/v1/ready"))

    def devices(self) -> list[DeviceOut]:
        return [DeviceOut.model_validate(d) for d in self._call("GET", "/v1/devices")]

    def kernel_source(self, sha256: str) -> KernelSourceOut:
        return KernelSourceOut.model_validate(self._call("GET", f"/v1/kernels/{sha256}"))

    def lookup(
        self, device: str, kernel: str, shape: Mapping[str, int], dtype: str = "float32"
    ) -> LookupAnswer:
        """The answer for one shape (the family's shape keys, e.g. gemm's m, n, k, transa)."""
        params = {"device": device, "kernel": kernel, **shape, "dtype": dtype}
        return LookupAnswer.model_validate(self._call("GET", "/v1/lookup", params=params))

    def neighbours(
        self,
        device: str,
        kernel: str,
        kernel_sha256: str,
        shape: Mapping[str, int],
        dtype: str = "float32",
        count: int = 4,
    ) -> NeighboursOut:
        """One kernel version's configs tuned nearest ``shape``, nearest first, and the
        service's model pick there (none from a service without one, or an older one).
        """
        params = {"device": device, "kernel": kernel, "kernel_sha256": kernel_sha256, **shape,
                  "dtype": dtype, "count": count}  # fmt: skip
        return NeighboursOut.model_validate(self._call("GET", "/v1/neighbours", params=params))

    def lookup_batch(
        self, device: str, kernel: str, workloads: Sequence[Mapping[str, Any]]
    ) -> list[LookupAnswer]:
        """One answer per workload (dicts of the family's shape keys, and optionally dtype)."""
        body = {"device": device, "kernel": kernel, "workloads": list(workloads)}
        return BatchAnswer.model_validate(self._call("POST", "/v1/lookup/batch", json=body)).answers

    def upload_session(self, store: Store, session_id: int) -> UploadOut:
        """Send a locally stored session. Safe to call again at any point (after a crash, or
        after each new measurement): the server keeps each measurement once.
        """
        total = UploadOut(session_id=0, added=0, already_stored=0)
        for upload in session_uploads(store, session_id):
            done = UploadOut.model_validate(
                self._call("POST", "/v1/sessions", content=upload.model_dump_json(), headers=_JSON)
            )
            total = UploadOut(
                session_id=done.session_id,
                added=total.added + done.added,
                already_stored=total.already_stored + done.already_stored,
                answers=done.answers,
            )
        return total

    def upload_network(self, network: Mapping[str, Any]) -> int:
        """Send a network's layers (``networks.workloads.network_record``); its server id."""
        body = NetworkIn.model_validate(dict(network)).model_dump_json()
        done = self._call("POST", "/v1/networks", content=body, headers=_JSON)
        return NetworkOut.model_validate(done).network_id

    # -- the tuning farm (octune.farm) ------------------------------------------------------

    def submit_job(self, body: Mapping[str, Any]) -> SubmitOut:
        return SubmitOut.model_validate(self._call("POST", "/v1/jobs", json=dict(body)))

    def jobs(self, status: str | None = None) -> list[JobOut]:
        params = {"status": status} if status else {}
        return [JobOut.model_validate(j) for j in self._call("GET", "/v1/jobs", params=params)]

    def job(self, job_id: int) -> JobOut:
        return JobOut.model_validate(self._call("GET", f"/v1/jobs/{job_id}"))

    def cancel_job(self, job_id: int) -> JobOut:
        return JobOut.model_validate(self._call("POST", f"/v1/jobs/{job_id}/cancel"))

    def cancel_submission(self, submission_id: int) -> list[JobOut]:
        path = f"/v1/submissions/{submission_id}/cancel"
        return [JobOut.model_validate(j) for j in self._call("POST", path)]

    def agents(self) -> list[AgentStatusOut]:
        return [AgentStatusOut.model_validate(a) for a in self._call("GET", "/v1/agents")]

    def register_agent(
        self, name: str, host: str, devices: Sequence[Mapping[str, Any]]
    ) -> AgentOut:
        body = {"name": name, "host": host, "devices": list(devices)}
        return AgentOut.model_validate(self._call("POST", "/v1/agents", json=body))

    def lease(self, agent_id: int, fingerprint: str) -> LeaseOut:
        path = f"/v1/agents/{agent_id}/lease"
        return LeaseOut.model_validate(self._call("POST", path, json={"device": fingerprint}))

    def heartbeat(self, job_id: int, held: Mapping[str, Any]) -> LeaseOut:
        path = f"/v1/jobs/{job_id}/heartbeat"
        return LeaseOut.model_validate(self._call("POST", path, json=dict(held)))

    def upload_job_measurements(self, job_id: int, body: Mapping[str, Any]) -> JobUploadOut:
        """Idempotent: a repeat stores nothing twice (the server names the session by job,
        lease and ``session_key``); 409 once the lease has gone to another agent.
        """
        path = f"/v1/jobs/{job_id}/measurements"
        return JobUploadOut.model_validate(self._call("POST", path, json=dict(body)))

    def finish_job(self, job_id: int, held: Mapping[str, Any], error: str | None = None) -> JobOut:
        body = {**held, **({"error": error[:2000]} if error else {})}
        return JobOut.model_validate(self._call("POST", f"/v1/jobs/{job_id}/finish", json=body))


def session_body(
    record: Mapping[str, Any], measurements: list[dict[str, Any]], status: str
) -> dict[str, Any]:
    """A stored session (``Store.session_record``) as an upload's body, with ``measurements``
    (dicts of ``MeasurementIn``'s fields) and ``status``; without the uploader's ``uid``.
    """
    session = record["session"]
    return {
        "device": record["device"],
        "kernel": record["kernel"],
        "workload": record["workload"],
        "session": {
            "strategy": session["strategy"],
            "seed": session["seed"],
            "settings": session["settings"],
            "status": status,
            "octune_version": session["octune_version"],
        },
        "measurements": [
            {**m, "max_error": m["max_error"] if _finite(m["max_error"]) else None}
            for m in measurements
        ],
    }


def session_uploads(store: Store, session_id: int, chunk: int = UPLOAD_CHUNK) -> Iterator[UploadIn]:
    """A stored session as upload requests of at most ``chunk`` measurements; all but the last
    say the session is still running, so an interrupted upload never looks finished.
    """
    record = store.session_record(session_id)
    if record is None:
        raise ClientError(f"no tuning session {session_id} in {store.url}")
    session = record["session"]
    identity = "|".join(
        (record["device"]["name"], record["kernel"]["sha256"], str(session["id"]),
         session["started_at"], store.url)
    )  # fmt: skip
    uid = hashlib.sha256(identity.encode()).hexdigest()[:32]
    measurements = record["measurements"]
    parts = [measurements[i : i + chunk] for i in range(0, len(measurements), chunk)] or [[]]
    for position, part in enumerate(parts):
        last = position == len(parts) - 1
        status = session["status"] if last else "running"
        yield UploadIn.model_validate({"uid": uid, **session_body(record, part, status)})


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
