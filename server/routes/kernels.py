"""Kernel versions by hash: a runtime builds exactly the source a config was tuned with, when
the server's signature (``serve --sign-key``) tells it the server vouches for that source.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Request

from octune.api.schemas import KernelSourceOut
from octune.firmware.signing import sign_kernel

router = APIRouter(tags=["kernels"])


@router.get("/kernels/{sha256}")
def kernel_source(
    request: Request,
    sha256: Annotated[str, Path(pattern=r"^[0-9a-f]{64}$", description="kernel version hash")],
) -> KernelSourceOut:
    found = request.app.state.store.kernel_source(sha256)
    if found is None:
        raise HTTPException(
            404,
            f"no kernel version {sha256[:16]}... is stored: take kernel_sha256 from a lookup "
            "answer or from GET /v1/devices",
        )
    signer = request.app.state.signer
    signature = sign_kernel(found.sha256, signer) if signer else None
    return KernelSourceOut.model_validate({**asdict(found), "signature": signature})
