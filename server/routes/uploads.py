"""Tuning machines post their sessions here (write token required)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request

from octune.db.server_store import ServerStore, TokenRecord, UploadConflictError
from octune.db.store import StoredKernel
from octune.server.auth import require_write
from octune.server.schemas import UploadIn, UploadOut
from octune.tuner.device import DeviceInfo
from octune.tuner.kernels import PROBLEMS
from octune.tuner.lookup import kernel_version_sha256
from octune.tuner.results import Measurement
from octune.tuner.space import SearchSpace
from octune.tuner.workloads import GemmWorkload

router = APIRouter(tags=["uploads"])


@router.post("/sessions", response_model=UploadOut)
def upload_session(
    request: Request, upload: UploadIn, token: Annotated[TokenRecord, Depends(require_write)]
) -> UploadOut:
    """Store a session's measurements. Idempotent by ``uid``: repeating an upload, or sending
    the session again with more measurements (resuming), stores each measurement once.
    """
    sent = upload.kernel
    shape_names = {name for problem in PROBLEMS.values() for name in problem.shape_names}
    space = SearchSpace.from_yaml(sent.space_source, f"{sent.name}.yaml", shape_names)
    if kernel_version_sha256(sent.template_source, sent.space_source) != sent.sha256:
        raise HTTPException(
            422, "kernel.sha256 is not the hash of the template and space sent: send them as tuned"
        )
    if space.problem != upload.workload.problem:
        raise HTTPException(
            422, f"kernel {sent.name} solves '{space.problem}', not the workload's "
            f"'{upload.workload.problem}'",
        )  # fmt: skip
    parameters = set(space.parameter_names)
    for position, m in enumerate(upload.measurements):
        if set(m.config) != parameters:
            raise HTTPException(
                422, f"measurements.{position}.config must set exactly the space's parameters "
                f"{', '.join(sorted(parameters))}",
            )  # fmt: skip
    w = upload.workload
    workload = GemmWorkload(w.m, w.n, w.k, w.transa, w.transb)
    device = DeviceInfo(**upload.device.model_dump(), max_work_item_sizes=())
    store: ServerStore = request.app.state.store
    try:
        outcome = store.upload(
            uid=upload.uid,
            token_id=token.id,
            device=device,
            kernel=StoredKernel(sent.name, sent.sha256, sent.template_source, sent.space_source),
            problem=workload.problem,
            workload_key=workload.key,
            shape=workload.shape,
            dtype=workload.dtype,
            strategy=upload.session.strategy,
            seed=upload.session.seed,
            settings=upload.session.settings,
            status=upload.session.status,
            octune_version=upload.session.octune_version,
            measurements=[
                Measurement(
                    config=m.config,
                    status=m.status,
                    times_s=tuple(m.times_s),
                    flops=m.flops,
                    max_error=m.max_error,
                    message=m.message,
                    extra=m.extra,
                )
                for m in upload.measurements
            ],
        )
    except UploadConflictError as error:
        raise HTTPException(409, str(error)) from error
    if outcome.added:
        request.app.state.lookups.invalidate()
    return UploadOut(
        session_id=outcome.session_id, added=outcome.added, already_stored=outcome.already_stored
    )
