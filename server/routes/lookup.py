"""The runtime's question: which config for this kernel, this shape, on this device?

Answers are served as cached JSON bytes: a repeated question costs a dictionary lookup, no
database query and no serialisation (with open reads, ``octune.server.app.CachedLookups``
answers it before FastAPI's routing and validation).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from octune.server.lookups import LookupService
from octune.server.schemas import BatchAnswer, BatchLookup, LookupAnswer, LookupQuery

router = APIRouter(tags=["lookup"])

_JSON = "application/json"


@router.get("/lookup", response_model=LookupAnswer)
async def lookup(request: Request, query: Annotated[LookupQuery, Query()]) -> Response:
    """The best config for one workload: exact, else nearest tuned, else predicted, else
    the safe default; ``match`` says which.
    """
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
    bodies = service.cached(keys) or await run_in_threadpool(service.answers, keys)
    return Response(service.batch_body(bodies), media_type=_JSON)
