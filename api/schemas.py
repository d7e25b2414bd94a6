"""The API's request and response bodies. Every field that comes from a request is bounded
here, so nothing unchecked reaches the database, a file path or a compiler.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Annotated, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    model_validator,
)

from octune.core.results import Measurement, Status

KernelName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$")]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]
Text255 = Annotated[str, Field(max_length=255)]
ShapeKey = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


def _flag(value: object) -> object:
    """A flag key sent as true/false (a query string's ``transa=true``) reads as 1/0."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return int(value.lower() == "true")
    return value


ShapeValue = Annotated[int, BeforeValidator(_flag), Field(ge=-(2**62), le=2**62)]
MAX_SHAPE_KEYS = 32
Count = Annotated[int, Field(ge=0, le=2**62)]


def _finite(values: list[float]) -> list[float]:
    if not all(math.isfinite(value) and value >= 0 for value in values):
        raise ValueError("times must be finite and non-negative")
    return values


def _examples(*examples: dict[str, object]) -> ConfigDict:
    """``examples`` in a schema's OpenAPI (Swagger UI's "Try it out" starts from the first)."""
    return ConfigDict(json_schema_extra={"examples": list(examples)})


_CONV = {"n": 1, "c": 64, "h": 56, "w": 56, "k": 64, "r": 3, "s": 3, "pad": 1}
_ANSWER = {
    "match": "nearest",
    "kernel": "gemm_panel",
    "entry": "gemm_panel",
    "kernel_sha256": "5d2c" + "0" * 60,
    "device_fingerprint": "81b3bb555d22d3bf",
    "shape": {"m": 500, "n": 512, "k": 512, "transa": 0, "transb": 0},
    "dtype": "float32",
    "config": {"MWG": 64, "NWG": 64, "VW": 8},
    "defines": {"M": 500, "N": 512, "K": 512, "MWG": 64, "NWG": 64, "VW": 8},
    "build_options": "-DM=500 -DN=512 -DK=512 -DMWG=64 -DNWG=64 -DVW=8 -cl-mad-enable",
    "global_size": [64, 64],
    "local_size": [8, 8],
    "time_s": 0.00171,
    "gflops": 153.1,
    "estimated": True,
    "source": {
        "workload_key": "gemm:m=512,n=512,k=512,transa=0,transb=0",
        "shape": {"m": 512, "n": 512, "k": 512, "transa": 0, "transb": 0},
        "time_s": 0.00172,
        "gflops": 156.2,
    },
    "then": [],
    "workspace_bytes": 0,
}


def _utf8(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be UTF-8 text: it holds a lone surrogate") from None
    return value


def _printable(value: str) -> str:
    """No control or format characters (NUL, ESC, BEL, U+202E...): names are shown as sent,
    on dashboards and terminals.
    """
    if not _utf8(value).isprintable():
        raise ValueError("must be printable: no control or format characters")
    return value


#: Text stored as sent: it must be text a database can hold.
Utf8 = AfterValidator(_utf8)
Printable = AfterValidator(_printable)
#: A name shown as sent: a device's or an agent's.
Name255 = Annotated[str, Field(min_length=1, max_length=255), Printable]
PrintableText255 = Annotated[str, Field(max_length=255), Printable]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProblemDetails(Strict):
    model_config = _examples(
        {"message": "unknown device 'xeon': closest: Intel(R) Xeon(R) Processor"}
    )

    message: str = Field(description="what is wrong and how to fix it")


class ShapeFields(BaseModel):
    """A workload's shape keys as fields (gemm: m, n, k, transa...; conv2d: n, c, h, w...).
    Only their form is checked here; the family's own rules (ranges, possible shapes) are
    checked by the lookup, with the same one-line messages offline bundles give.
    """

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, ShapeValue]

    dtype: Literal["float32", "float16", "int8"] = "float32"  # core.precision.DTYPES

    @model_validator(mode="after")
    def _shape_keys(self) -> Self:
        extra = self.model_extra or {}
        if len(extra) > MAX_SHAPE_KEYS:
            raise ValueError(f"a shape has at most {MAX_SHAPE_KEYS} keys")
        for key in extra:
            if not ShapeKey.match(key):
                raise ValueError(f"'{key[:40]}' is no shape key: use lower-case letters, digits, _")
        return self

    def shape(self) -> dict[str, int]:
        return {key: int(value) for key, value in (self.model_extra or {}).items()}


class LookupQuery(ShapeFields):
    device: Text255 = Field(description="device fingerprint or name, as `octune devices` shows")
    kernel: KernelName = Field(description="a family (its fastest kernel answers) or a kernel")


#: Neighbour configs one request may ask for: each is a k-d tree step and a launch check.
MAX_NEIGHBOURS = 16


class NeighboursQuery(LookupQuery):
    """``GET /v1/neighbours``: one kernel version's configs tuned nearest a shape."""

    kernel_sha256: str | None = Field(
        default=None, pattern="^[0-9a-f]{64}$",
        description="the version, as an answer's kernel_sha256 names it; default: the one "
        "the device's lookups answer with",
    )  # fmt: skip
    count: int = Field(default=4, ge=1, le=MAX_NEIGHBOURS, description="configs at most")


class NeighboursOut(BaseModel):
    """Distinct configs of the tuned shapes nearest the query, nearest first, each legal for
    it, and the service's cost-model pick at the query's own shape (inside the tuned range or
    not; none until a model of the version is trained): what a runtime's first-use
    confirmation runs beside the answer.
    """

    kernel: str
    kernel_sha256: str
    configs: list[dict[str, int]]
    predicted: dict[str, int] | None = None


class BatchLookup(Strict):
    model_config = _examples(
        {
            "device": "81b3bb555d22d3bf",
            "kernel": "conv2d",
            "workloads": [_CONV, {**_CONV, "dtype": "int8"}],
        }
    )

    device: Text255 = Field(description="device fingerprint or name")
    kernel: KernelName = Field(description="a family (its fastest kernel answers) or a kernel")
    workloads: list[ShapeFields] = Field(min_length=1, max_length=1024)


class SourceOut(BaseModel):
    """The tuned workload an exact or nearest answer's config was measured on."""

    workload_key: str
    shape: dict[str, int]
    time_s: float
    gflops: float


class FollowUpOut(BaseModel):
    entry: str
    global_size: list[int]
    local_size: list[int]


class LookupAnswer(BaseModel):
    """Everything a runtime needs to build and launch the kernel for the queried shape; the
    same fields, with the same values, as an offline bundle's answer.
    """

    model_config = _examples(_ANSWER)

    match: Literal["exact", "nearest", "predicted", "default"]
    kernel: str
    entry: str = Field(description="the OpenCL kernel function to launch")
    kernel_sha256: str = Field(description="fetch the source with GET /v1/kernels/{sha256}")
    device_fingerprint: str
    shape: dict[str, int]
    dtype: str
    config: dict[str, int]
    defines: dict[str, int]
    build_options: str
    global_size: list[int]
    local_size: list[int]
    time_s: float | None = Field(description="measured (exact) or expected time; null if unknown")
    gflops: float | None = Field(description="measured (exact) or expected GFLOP/s at this shape")
    estimated: bool = Field(
        description="time_s and gflops are estimates for this shape (nearest: the source "
        "workload's GFLOP/s at this shape's flops; predicted: the cost model's), not "
        "measurements; the source's own figures are under source"
    )
    source: SourceOut | None
    then: list[FollowUpOut] = Field(
        default_factory=list,
        description="launches after the entry's, in order, with the same arguments (e.g. the "
        "sum of split-K partial products)",
    )
    workspace_bytes: int = Field(
        0,
        description="scratch buffer the launches share, passed as each one's last argument; "
        "zero-fill it once when allocating it",
    )


class BatchAnswer(BaseModel):
    model_config = _examples({"answers": [_ANSWER]})

    answers: list[LookupAnswer]


class TunedKernelOut(BaseModel):
    name: str
    sha256: str
    workloads: int


class DeviceOut(BaseModel):
    model_config = _examples(
        {
            "fingerprint": "81b3bb555d22d3bf",
            "name": "Intel(R) Xeon(R) Processor",
            "platform": "Intel(R) OpenCL",
            "driver_version": "2026.22.10.0.01_160000",
            "compute_units": 2,
            "device_type": "cpu",
            "kernels": [{"name": "gemm_panel", "sha256": "5d2c" + "0" * 60, "workloads": 18}],
        }
    )

    fingerprint: str
    name: str
    platform: str
    driver_version: str
    compute_units: int
    device_type: str
    kernels: list[TunedKernelOut]


class ShapeKeyOut(BaseModel):
    name: str = Field(description="the query parameter or workload field")
    help: str
    minimum: int
    maximum: int
    default: int | None = Field(description="taken when the key is left out; null: required")


class FamilyOut(BaseModel):
    """A problem family a lookup's ``kernel`` may name, with the shape keys it takes."""

    model_config = _examples(
        {
            "name": "gemm",
            "dtypes": ["float32", "float16", "int8"],
            "kernels": ["gemm_panel", "gemm_int8"],
            "shape": [
                {"name": "m", "help": "rows of op(A) and C", "minimum": 1,
                 "maximum": 1048576, "default": None},
            ],
            "flops": "2 * M * N * K",
            "example": "/v1/lookup?device=DEVICE&kernel=gemm&m=512&n=512&k=512",
        }
    )  # fmt: skip

    name: str
    dtypes: list[str]
    kernels: list[str] = Field(description="the kernels that compute it; the fastest answers")
    shape: list[ShapeKeyOut]
    flops: str = Field(description="floating-point operations of one workload, in shape keys")
    example: str = Field(description="a lookup of this family, DEVICE to be replaced")


class KernelSourceOut(BaseModel):
    name: str
    sha256: str
    template_source: str
    space_source: str
    signature: str | None = Field(
        default=None, description="Ed25519 over 'octune kernel version {sha256}', base64"
    )


class Health(BaseModel):
    model_config = _examples({"status": "ok"})

    status: Literal["ok"]


class Readiness(BaseModel):
    model_config = _examples(
        {
            "status": "ready",
            "database": "sqlite:///octune.db",
            "schema_revision": "0006",
            "models_training": 0,
        }
    )

    status: Literal["ready"]
    database: str | None = Field(
        description="the database URL, password hidden; null on a server that requires read "
        "tokens, since /v1/ready answers without one"
    )
    schema_revision: str
    models_training: int = Field(
        description="cost models queued or training; lookups answer without them meanwhile"
    )


# --- uploads --------------------------------------------------------------------------------


class DeviceIn(Strict):
    platform_name: PrintableText255
    platform_version: PrintableText255
    vendor: PrintableText255
    name: Name255
    driver_version: PrintableText255
    compute_units: Annotated[int, Field(ge=1, le=1 << 20)]
    max_work_group_size: Annotated[int, Field(ge=1, le=1 << 31)]
    local_mem_size: Annotated[int, Field(ge=0, le=1 << 40)]
    global_mem_size: Annotated[int, Field(ge=0, le=1 << 60)]
    device_type: Literal["gpu", "cpu", "accelerator", "other"]
    extensions: Annotated[str, Field(max_length=8192, pattern=r"^[A-Za-z0-9_ ]*$")] = Field(
        default="", description="CL_DEVICE_EXTENSIONS, space-separated"
    )


class KernelIn(Strict):
    name: KernelName
    sha256: Sha256
    template_source: Annotated[str, Field(min_length=1, max_length=1 << 20)]
    space_source: Annotated[str, Field(min_length=1, max_length=1 << 18)]


class WorkloadIn(ShapeFields):
    problem: KernelName = Field(description="the kernel family, e.g. gemm")


class SessionIn(Strict):
    strategy: Identifier
    seed: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)] | None = None
    settings: Annotated[dict[Identifier, JsonValue], Field(max_length=64)] = Field(
        default_factory=dict
    )
    status: Literal["running", "completed", "interrupted", "failed"]
    octune_version: Annotated[str, Field(max_length=64)]


MESSAGE_CHARS = 2000  # what a measurement keeps of a failure message


class MeasurementIn(Strict):
    config: Annotated[
        dict[Identifier, Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]],
        Field(min_length=1, max_length=64),
    ]
    status: Status
    times_s: Annotated[list[float], Field(max_length=10_000), AfterValidator(_finite)] = Field(
        default_factory=list
    )
    flops: Count = 0
    max_error: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    message: Annotated[str, Field(max_length=MESSAGE_CHARS)] = ""
    extra: Annotated[
        dict[Identifier, Annotated[float, Field(allow_inf_nan=False)]], Field(max_length=32)
    ] = Field(default_factory=dict)

    @classmethod
    def of(cls, m: Measurement) -> Self:
        """A measurement as uploads carry it: a non-finite max_error (a NaN output) as null."""
        finite = m.max_error is not None and math.isfinite(m.max_error)
        return cls(
            config=dict(m.config), status=m.status, times_s=list(m.times_s), flops=int(m.flops),
            max_error=m.max_error if finite else None, message=m.message[:MESSAGE_CHARS],
            extra=dict(m.extra),
        )  # fmt: skip

    def measurement(self) -> Measurement:
        return Measurement(
            config=dict(self.config), status=self.status, times_s=tuple(self.times_s),
            flops=self.flops, max_error=self.max_error, message=self.message,
            extra=dict(self.extra),
        )  # fmt: skip


class SessionBody(Strict):
    """A tuning session's device, kernel, workload and measurements, as uploads carry them."""

    device: DeviceIn
    kernel: KernelIn
    workload: WorkloadIn
    session: SessionIn
    measurements: Annotated[list[MeasurementIn], Field(max_length=100_000)]


class UploadIn(SessionBody):
    """One tuning session as a tuning machine sends it. ``uid`` is the uploader's name for the
    session: the same uid sent again adds only measurements the server does not have yet.
    """

    uid: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{8,64}$")]


class UploadOut(BaseModel):
    session_id: int
    added: int = Field(description="measurements stored by this request")
    already_stored: int = Field(description="measurements the server had from an earlier upload")
    answers: bool = Field(
        True,
        description="whether these measurements may answer lookups: false for a write token's "
        "uploads, which are kept but answer only once made with a trusted token",
    )


# --- networks ---------------------------------------------------------------------------


class NetworkLayerIn(Strict):
    family: Identifier
    shape: Annotated[dict[str, ShapeValue], Field(max_length=MAX_SHAPE_KEYS)]
    dtype: Literal["float32", "float16", "int8"] = "float32"
    count: Annotated[int, Field(ge=1, le=1 << 20)]
    nodes: Annotated[list[PrintableText255], Field(min_length=1, max_length=4096)]


class NetworkIn(Strict):
    """A network's layers as `tune --model` read them: what the dashboard shows of a network
    tuned elsewhere. Each layer's shape is checked by its family, as a lookup's is.
    """

    name: Name255
    layers: Annotated[list[NetworkLayerIn], Field(min_length=1, max_length=10_000)]
    not_tuned: Annotated[list[PrintableText255], Field(max_length=1000)] = []
    left_out: Annotated[list[PrintableText255], Field(max_length=1000)] = []


class NetworkOut(BaseModel):
    network_id: int


# --- the tuning farm ------------------------------------------------------------------------


DevicePattern = Annotated[str, Field(min_length=1, max_length=255), Printable]
Fingerprint = Annotated[str, Field(pattern=r"^[0-9a-f]{16}$")]
Id = Annotated[int, Field(ge=1, le=2**62)]
Seconds = Annotated[float, Field(ge=0, le=366 * 86400, allow_inf_nan=False)]


class JobWorkloadIn(ShapeFields):
    """One entry of a workloads file: a kernel or family, its shape keys, a weight."""

    kernel: KernelName
    weight: Annotated[float, Field(gt=0, le=1e9, allow_inf_nan=False)] = 1.0


class JobSubmitIn(Strict):
    """What to tune (a built-in network, or workloads as a workloads file lists them), on
    which devices (a fingerprint or a glob over name and driver), with which budget.
    """

    model_config = _examples(
        {"devices": "*Mali-G78*", "model": "mobilenet_v2", "batch": 1, "time_s": 28800}
    )

    devices: DevicePattern
    model: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")] | None = Field(
        default=None, description="a built-in network, e.g. squeezenet1.1"
    )
    batch: Annotated[int, Field(ge=1, le=4096)] | None = None
    workloads: Annotated[list[JobWorkloadIn], Field(min_length=1, max_length=1024)] | None = None
    time_s: Annotated[float, Field(gt=0, le=366 * 86400, allow_inf_nan=False)] | None = None
    budget: Annotated[int, Field(ge=1, le=10**7)] | None = None
    strategy: Identifier = "model"
    max_attempts: Annotated[int, Field(ge=1, le=100)] = 3
    wait_for_device: bool = False

    @model_validator(mode="after")
    def _one_workload_set(self) -> Self:
        if (self.model is None) == (self.workloads is None):
            raise ValueError("give either model or workloads")
        if self.batch is not None and self.model is None:
            raise ValueError("batch sizes a model: give one")
        if self.time_s is None and self.budget is None:
            raise ValueError("give time_s or budget (or both): without either, a job never ends")
        return self


class JobOut(BaseModel):
    id: int
    submission_id: int
    devices: str = Field(description="the submission's device pattern")
    device_fingerprint: str
    device_name: str
    spec: dict[str, JsonValue]
    strategy: str
    status: Literal["queued", "running", "completed", "failed", "cancelled"]
    agent: str | None = Field(description="the agent holding a running job")
    lease_epoch: int = Field(description="leases granted so far; the holder names it")
    candidates: int = Field(description="configs measured by its search sessions")
    best_gflops: float | None
    budget_seconds: float | None
    budget_candidates: int | None
    tried_s: float = Field(description="tuning time spent, over all its attempts")
    time_left_s: float | None
    failures: int = Field(description="attempts that failed (lease expired or reported)")
    max_attempts: int
    reason: str = Field(description="why the last attempt failed")
    created_at: datetime
    finished_at: datetime | None


class SubmitOut(BaseModel):
    submission_id: int
    jobs: list[JobOut]
    waiting: bool = Field(description="no device matches yet: a job appears when one registers")


class AgentIn(Strict):
    name: Name255
    host: PrintableText255
    devices: Annotated[list[DeviceIn], Field(min_length=1, max_length=64)]


class AgentOut(BaseModel):
    agent_id: int
    lease_s: float = Field(description="a lease lasts this long unless renewed")


class AgentStatusOut(BaseModel):
    id: int
    name: str
    host: str
    last_seen_at: datetime
    online: bool
    devices: list[str] = Field(description="fingerprints of the devices it drives")
    jobs: list[int] = Field(description="jobs it holds")


class LeaseIn(Strict):
    device: Fingerprint


class DoneSessionOut(BaseModel):
    kernel_name: str
    kernel_sha256: str
    workload_key: str
    strategy: str
    measurements: list[MeasurementIn]


class LeaseOut(BaseModel):
    job: JobOut | None = Field(description="null: no job for the device now, ask again later")
    lease_s: float
    done: list[DoneSessionOut] = Field(
        default_factory=list, description="sessions earlier leases uploaded: resume from them"
    )


class HeldIn(Strict):
    """Names the lease a call is made under: the agent and the lease epoch it was granted."""

    agent_id: Id
    epoch: Id
    tried_s: Seconds = 0.0


class FinishIn(HeldIn):
    error: Annotated[str, Field(min_length=1, max_length=2000), Utf8] | None = Field(
        default=None, description="why the attempt failed; absent: the job is done"
    )


class JobUploadIn(SessionBody, HeldIn):
    """Measurements of one of the holder's sessions; ``session_key`` numbers its sessions."""

    session_key: Id


class JobUploadOut(BaseModel):
    session_id: int
    added: int
