"""The runtime's question: which config for this kernel, this shape, on this device?

Answers are served as cached JSON bytes: a repeated question costs a dictionary lookup, no
database query and no serialisation (with open reads, ``octune.server.app.CachedLookups``
answers it before FastAPI's routing and validation).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from octune.api.schemas import (
    BatchAnswer,
    BatchLookup,
    LookupAnswer,
    LookupQuery,
    NeighboursOut,
    NeighboursQuery,
)
from octune.catalogue.registry import families
from octune.core.precision import DTYPES
from octune.server.lookups import LookupService
from octune.server.routes.families import shape_parameters

router = APIRouter(tags=["lookup"])

_JSON = "application/json"


_QUERY_DOC: dict[str, Any] = {
    "parameters": [
        {"name": "device", "in": "query", "required": True, "schema": {"type": "string"},
         "description": "device fingerprint or name, as GET /v1/devices lists them"},
        {"name": "kernel", "in": "query", "required": True,
         "schema": {"type": "string", "examples": ["gemm", "conv2d"]},
         "description": "a family (its fastest kernel answers), e.g. gemm, conv2d; or a kernel"},
        {"name": "dtype", "in": "query",
         "schema": {"type": "string", "enum": list(DTYPES), "default": "float32"},
         "description": "element type: an answer tuned for one dtype is never given for another"},
    ],
    "description": "Plus the family's shape keys as query parameters (GET /v1/families lists "
    "each family's keys, ranges and defaults).",
}  # fmt: skip


def document_shape_keys() -> None:
    """Declare every registered family's shape keys on ``GET /lookup`` (families are plug-ins,
    all known once an app is built): the route itself reads them from the query string.
    """
    doc = {**_QUERY_DOC, "parameters": [*_QUERY_DOC["parameters"], *shape_parameters(families())]}
    for route in router.routes:
        if isinstance(route, APIRoute) and route.path == "/lookup":
            route.openapi_extra = doc


@router.get("/lookup", response_model=LookupAnswer, openapi_extra=_QUERY_DOC)
async def lookup(request: Request) -> Response:
    """The best config for one workload: exact, else nearest tuned, else predicted, else
    the safe default; ``match`` says which.
    """
    params = request.query_params
    if len(params.multi_items()) != len(params) or len(params) > 40:
        raise RequestValidationError([{"loc": ("query",), "msg": "give each parameter once"}])
    try:
        query = LookupQuery.model_validate(dict(params))
    except ValidationError as error:
        raise RequestValidationError(error.errors()) from None
    service: LookupService = request.app.state.lookups
    keys = [service.key(query.device, query.kernel, query)]
    bodies = service.cached(keys) or await run_in_threadpool(service.answers, keys)
    service.remember_query(request.scope["query_string"], bodies[0])
    return Response(bodies[0], media_type=_JSON)


@router.post("/lookup/batch", response_model=BatchAnswer)
async def lookup_batch(request: Request, batch: BatchLookup) -> Response:
    """Many workloads of one kernel on one device (all layers of a network) in one request;
    answers come in the order of ``workloads``.
    """
    service: LookupService = request.app.state.lookups
    keys = service.batch_keys(batch)
    bodies = service.cached(keys) or await run_in_threadpool(service.answers, keys, True)
    return Response(service.batch_body(bodies), media_type=_JSON)


@router.get("/neighbours", response_model=NeighboursOut, openapi_extra=_QUERY_DOC)
async def neighbours(request: Request) -> NeighboursOut:
    """One kernel version's configs tuned at the shapes nearest this one (distinct, legal for
    it, nearest first; ``count`` at most 16): what a runtime runs beside the answer at first
    use, where its layer was not tuned. ``kernel`` names a kernel, not a family; add
    ``kernel_sha256`` to pin the version an answer named.
    """
    params = request.query_params
    if len(params.multi_items()) != len(params) or len(params) > 42:
        raise RequestValidationError([{"loc": ("query",), "msg": "give each parameter once"}])
    try:
        query = NeighboursQuery.model_validate(dict(params))
    except ValidationError as error:
        raise RequestValidationError(error.errors()) from None
    service: LookupService = request.app.state.lookups
    return await run_in_threadpool(service.neighbours, query)
