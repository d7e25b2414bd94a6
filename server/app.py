"""The FastAPI app factory: one migrated store, the routers under /v1, and errors that always
come back as a 4xx (or 503 for a database that is down) with a one-line ``message``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlencode

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi_offline import FastAPIOffline
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from octune.api.schemas import ProblemDetails
from octune.core.errors import OctuneError, StoreError
from octune.db.job_queue import QueueError
from octune.db.server_store import ServerStore
from octune.firmware.signing import private_key
from octune.server.auth import require_read
from octune.server.lookups import LookupService, NotFoundError
from octune.server.routes import (
    dashboard,
    devices,
    families,
    health,
    jobs,
    kernels,
    lookup,
    uploads,
)
from octune.server.settings import ServerSettings

#: Documented on every operation, so clients (and schemathesis) know each error's body.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ProblemDetails, "description": description}
    for code, description in (
        (400, "malformed request"),
        (401, "missing or unknown token"),
        (403, "token lacks the scope"),
        (404, "unknown device, kernel or resource; the message names the closest ones"),
        (409, "conflicts with what is stored"),
        (413, "request body too large"),
        (422, "invalid field: the message says which and why"),
        (503, "database unavailable"),
    )
}


async def _sweep_leases(store: ServerStore, every_s: float) -> None:
    """Take back expired leases as they expire, whether or not an agent asks for a job."""
    while True:
        await asyncio.sleep(every_s)
        try:
            await asyncio.to_thread(store.sweep_expired)
        except (StoreError, SQLAlchemyError):  # the database is away: the next turn tries again
            continue


def create_app(settings: ServerSettings, store: ServerStore | None = None) -> FastAPI:
    """An app over ``settings.database_url``, or over ``store`` when the caller owns one."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if store is None:
            _attach(app, ServerStore(settings.database_url))
        app.state.store.renew_leases(settings.lease_s)  # agents waited out the restart
        sweeper = asyncio.create_task(_sweep_leases(app.state.store, settings.lease_s / 3))
        try:
            yield
        finally:
            sweeper.cancel()
            app.state.lookups.close()  # before the store: training reads it
            if store is None:
                app.state.store.close()

    app = FastAPIOffline(  # Swagger UI and ReDoc from the package: no CDN an air-gapped lab lacks
        title="octune config service",
        summary="Best verified OpenCL kernel configs for a device and a workload.",
        version="1",
        lifespan=lifespan,
        responses=ERROR_RESPONSES,
    )
    app.state.settings = settings
    key = settings.sign_key
    app.state.signer = private_key(key.get_secret_value()) if key else None
    if store is not None:
        _attach(app, store)
    reads = [Depends(require_read)] if settings.require_read_token else []
    app.include_router(health.router, prefix="/v1")
    app.include_router(uploads.router, prefix="/v1")
    app.include_router(jobs.writes, prefix="/v1")
    lookup.document_shape_keys()
    for router in (devices.router, families.router, kernels.router, lookup.router, jobs.reads):
        app.include_router(router, prefix="/v1", dependencies=reads)
    app.include_router(dashboard.router, dependencies=reads)
    app.include_router(dashboard.public)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(NotFoundError, _not_found)
    app.add_exception_handler(QueueError, _queue_error)
    app.add_exception_handler(StoreError, _store_error)
    app.add_exception_handler(OctuneError, _bad_input)
    if not settings.require_read_token:
        app.add_middleware(CachedLookups)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    if "*" not in settings.allowed_hosts:  # outermost: a foreign Host is refused first
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(settings.allowed_hosts))
    return app


def _attach(app: FastAPI, store: ServerStore) -> None:
    settings, model = app.state.settings, None
    if settings.predict:
        from octune.lookup.predictor import BackgroundModelAnswers  # loads XGBoost: only if used

        model = BackgroundModelAnswers()
    app.state.store = store
    app.state.lookups = LookupService(store, settings.cache_check_s, model=model)


def _problem(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"message": message}, status_code=status, headers=headers)


async def _invalid(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    problems = []
    for item in error.errors()[:5]:
        where = "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}"
            for part in item.get("loc", ())
            if part not in ("body", "query", "path")
        ).lstrip(".")
        problems.append(f"{where or 'body'}: {item.get('msg', 'invalid')}")
    return _problem(422, "; ".join(problems) or "invalid request")


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    if error.status_code == 401 and _browser_page(request):  # a person, not a runtime
        return RedirectResponse(f"/login?{urlencode({'next': request.url.path})}", 303)
    return _problem(error.status_code, str(error.detail), getattr(error, "headers", None))


def _browser_page(request: Request) -> bool:
    """A dashboard page asked for by a browser (it accepts HTML), not an API call."""
    return (
        request.method == "GET"
        and not request.url.path.startswith("/v1/")
        and "text/html" in request.headers.get("accept", "")
    )


async def _not_found(_request: Request, error: Exception) -> JSONResponse:
    return _problem(404, str(error))


async def _queue_error(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, QueueError)
    return _problem(error.status, str(error))


async def _store_error(_request: Request, error: Exception) -> JSONResponse:
    return _problem(503, str(error))


async def _bad_input(_request: Request, error: Exception) -> JSONResponse:
    return _problem(422, str(error))


class CachedLookups:
    """Lookups whose answers are all cached, answered before FastAPI routes and validates them:
    a runtime repeats its questions, and that machinery costs more than the answers.
    ``GET /v1/lookup`` by its query string, byte for byte (answered before, so valid);
    ``POST /v1/lookup/batch`` by validating the body in one pydantic call on the raw bytes
    (once per distinct body) and joining each workload's cached answer. Anything else (an
    invalid body, an answer not cached) goes on to the app, a batch with its body replayed.
    Only with open reads: a token check must not be skipped. Inside ``BodyLimit``, which has
    checked the declared length.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/lookup"):
            lookups: LookupService = scope["app"].state.lookups
            body = None
            if scope["method"] == "GET" and scope["path"] == "/v1/lookup":
                body = lookups.cached_query(scope["query_string"])
            elif scope["method"] == "POST" and scope["path"] == "/v1/lookup/batch":
                request = await _json_body(scope, receive)
                if request is not None:
                    body = lookups.cached_batch(request)
                    receive = _replay(request, receive)
            if body is not None:
                headers = [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


_JSON_HEADERS = [(b"content-type", b"application/json")]


async def _json_body(scope: Scope, receive: Receive) -> bytes | None:
    """The whole body of a request that declares its length and JSON (or no) content type,
    as FastAPI would parse it; None for any other, which the app reads itself.
    """
    headers = dict(scope["headers"])
    kind = headers.get(b"content-type", b"application/json").split(b";")[0].strip().lower()
    if b"content-length" not in headers or kind != b"application/json":
        return None
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` with ``body`` already read: the body once, then whatever follows."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes with 413 before anything parses them: by the
    declared Content-Length when there is one, else by counting the chunks as they arrive.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = f"request body over {self.limit} bytes: send less, e.g. split the upload"
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _problem(413, too_large)(scope, receive, send)
            return
        received = 0

        async def counting() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise HTTPException(413, too_large)
            return message

        await self.app(scope, counting, send)
