"""Liveness (the process answers) and readiness (the database answers too)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from octune.api.schemas import Health, Readiness

router = APIRouter(tags=["health"])


@router.get("/health")
async def health() -> Health:
    return Health(status="ok")


@router.get("/ready")
def ready(request: Request) -> Readiness:
    """503 with the database's own words when it is down or unreachable."""
    store, model = request.app.state.store, request.app.state.lookups.model
    private = request.app.state.settings.require_read_token  # then where the data lives is too
    return Readiness(
        status="ready",
        database=None if private else store.url,
        schema_revision=store.revision(),
        models_training=model.training if model is not None else 0,
    )
