"""The devices the database knows and the kernel versions tuned on each."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Request

from octune.api.schemas import DeviceOut

router = APIRouter(tags=["devices"])


@router.get("/devices")
def list_devices(request: Request) -> list[DeviceOut]:
    return [DeviceOut.model_validate(asdict(d)) for d in request.app.state.store.devices()]
