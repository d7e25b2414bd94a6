"""The runtime's question: which config for this kernel, this shape, on this device?

Answers are served as cached JSON bytes: a repeated question costs a dictionary lookup, no
database query and no serialisation.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from octune.server.lookups import LookupService
from octune.server.schemas import BatchAnswer, BatchLookup, GemmShape, LookupAnswer, LookupQuery

router = APIRouter(tags=["lookup"])

_JSON = "application/json"


def _shape(shape: GemmShape) -> dict[str, int]:
    return {
        "m": shape.m,
        "n": shape.n,
        "k": shape.k,
        "transa": int(shape.transa),
        "transb": int(shape.transb),
    }


@router.get("/lookup", response_model=LookupAnswer)
async def lookup(request: Request, query: Annotated[LookupQuery, Query()]) -> Response:
    """The best config for one workload: exact, else nearest tuned, else predicted, else
    the safe default; ``match`` says which.
    """
    service: LookupService = request.app.state.lookups
    key = service.key(query.device, query.kernel, _shape(query), query.dtype)
    body = service.cached(key)
    if body is None:
        body = await run_in_threadpool(service.answer, key)
    service.remember_query(request.scope["query_string"], body)
    return Response(body, media_type=_JSON)


@router.post("/lookup/batch", response_model=BatchAnswer)
async def lookup_batch(request: Request, batch: BatchLookup) -> Response:
    """Many workloads of one kernel on one device (all layers of a network) in one request;
    answers come in the order of ``workloads``.
    """
    service: LookupService = request.app.state.lookups
    keys = [service.key(batch.device, batch.kernel, _shape(w), w.dtype) for w in batch.workloads]
    bodies = [body for key in keys if (body := service.cached(key)) is not None]
    if len(bodies) < len(keys):
        bodies = await run_in_threadpool(service.answers, keys)
    return Response(b'{"answers":[' + b",".join(bodies) + b"]}", media_type=_JSON)
