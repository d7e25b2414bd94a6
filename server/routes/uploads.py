"""Tuning machines post their sessions here (write token required), and the networks whose
layers they tuned (``POST /v1/networks``, for the dashboard). Every measurement is
kept; only a trusted token's answer lookups (``octune.db.queries.answering``): a write token's
holder could send any time, and a fast enough one would crown its config.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request

from octune.api.schemas import (
    MeasurementIn,
    NetworkIn,
    NetworkOut,
    SessionBody,
    UploadIn,
    UploadOut,
)
from octune.catalogue.family import Workload
from octune.catalogue.registry import families, family, kernel_from_texts, load_kernel
from octune.catalogue.space import SearchSpace
from octune.core.errors import OctuneError, SpaceError
from octune.core.problem import kernel_version_sha256
from octune.core.results import Measurement, Status
from octune.db.queries import StoredKernel
from octune.db.server_store import ServerStore, UploadConflictError
from octune.db.tokens import TokenRecord
from octune.lookup.tables import stored_device_limits
from octune.server.auth import require_write
from octune.tuner.device import DeviceInfo

router = APIRouter(tags=["uploads"])

#: FLOP/s no compute unit of any device reaches: 1024 lanes x 2 (fused multiply-add) x 5 GHz.
#: Five to twenty times what today's do (an H100 SM: 128 x 2 x 1.98 GHz), so it refuses only
#: the impossible, such as the 1e-300 s that once made a config "best" at 5e296 GFLOP/s.
MAX_FLOPS_PER_COMPUTE_UNIT = 1024 * 2 * 5e9


@router.post("/networks", response_model=NetworkOut)
def upload_network(
    request: Request, network: NetworkIn, _token: Annotated[TokenRecord, Depends(require_write)]
) -> NetworkOut:
    """Keep a network's layers (`tune --model --upload` sends them), for its dashboard page:
    each layer's shape checked by its family first. Sending the same network again keeps one.
    """
    known = families()
    for i, layer in enumerate(network.layers):
        found = known.get(layer.family)
        if found is None:
            families_known = ", ".join(known)
            raise HTTPException(
                422, f"layers[{i}].family: no family '{layer.family}': use one of {families_known}"
            )
        try:
            found.workload(layer.shape, layer.dtype)
        except OctuneError as error:
            raise HTTPException(422, f"layers[{i}]: {error}") from None
    store: ServerStore = request.app.state.store
    network_id = store.save_network(
        network.name, [layer.model_dump() for layer in network.layers], network.not_tuned,
        network.left_out,
    )  # fmt: skip
    return NetworkOut(network_id=network_id)


@router.post("/sessions", response_model=UploadOut)
def upload_session(
    request: Request, upload: UploadIn, token: Annotated[TokenRecord, Depends(require_write)]
) -> UploadOut:
    """Store a session's measurements. Idempotent by ``uid``: repeating an upload, or sending
    the session again with more measurements (resuming), stores each measurement once.
    """
    store: ServerStore = request.app.state.store
    device, kernel, workload, measurements = checked_session(upload, store)
    try:
        outcome = store.upload(
            uid=upload.uid,
            token_id=token.id,
            device=device,
            kernel=kernel,
            problem=workload.problem,
            workload_key=workload.key,
            shape=workload.shape,
            dtype=workload.dtype,
            strategy=upload.session.strategy,
            seed=upload.session.seed,
            settings=upload.session.settings,
            status=upload.session.status,
            octune_version=upload.session.octune_version,
            measurements=measurements,
        )
    except UploadConflictError as error:
        raise HTTPException(409, str(error)) from error
    if outcome.added and token.answers:  # what a write token sends changes no answer
        request.app.state.lookups.invalidate()
    return UploadOut(
        session_id=outcome.session_id,
        added=outcome.added,
        already_stored=outcome.already_stored,
        answers=token.answers,
    )


def _registered(store: ServerStore, name: str, sha256: str) -> bool:
    """Whether the server trusts a kernel version: the installed version of an installed
    kernel (octune's, and those of the folders it serves with --kernel-dir), or one already in
    its database (tuned where the database is, or registered before).
    """
    try:
        if load_kernel(name).sha256 == sha256:
            return True
    except OctuneError:
        pass  # not installed here
    return store.kernel_source(sha256) is not None


def checked_session(
    upload: SessionBody, store: ServerStore
) -> tuple[DeviceInfo, StoredKernel, Workload, list[Measurement]]:
    """An uploaded session's parts, each checked as a tuner would have made it; first of all,
    before its space is parsed, that the server serves its kernel version.
    """
    name, sha256 = upload.kernel.name, upload.kernel.sha256
    if not _registered(store, name, sha256):
        raise HTTPException(
            422,
            f"kernel {name} version {sha256[:16]} is not one this server serves (neither "
            "installed with it nor in its database): its source would reach every client that "
            "looks it up. Register it on the server: serve its folder (`octune --kernel-dir DIR "
            "serve`), or tune it once where the server's database is; for octune's own "
            "kernels, run the same octune version on both sides",
        )
    sent = upload.kernel
    w = upload.workload
    try:
        workload = family(w.problem).workload(w.shape(), w.dtype)
        space = kernel_from_texts(sent.name, sent.template_source, sent.space_source).space
    except OctuneError as error:
        raise HTTPException(422, str(error)) from error
    if kernel_version_sha256(sent.template_source, sent.space_source) != sent.sha256:
        raise HTTPException(
            422, "kernel.sha256 is not the hash of the template and space sent: send them as tuned"
        )
    if space.problem != upload.workload.problem:
        raise HTTPException(
            422, f"kernel {sent.name} solves '{space.problem}', not the workload's "
            f"'{upload.workload.problem}'",
        )  # fmt: skip
    device = DeviceInfo(**upload.device.model_dump(), max_work_item_sizes=())
    measurements = _checked(
        upload.measurements, space, stored_device_limits(upload.device), workload
    )
    return (
        device,
        StoredKernel(sent.name, sent.sha256, sent.template_source, sent.space_source),
        workload,
        measurements,
    )


def _checked(
    sent: list[MeasurementIn], space: SearchSpace, limits: dict[str, int], workload: Workload
) -> list[Measurement]:
    """The upload's measurements, each a config the kernel version's space allows on the
    device and, if it passed, a verified result the device could physically have produced:
    a write token must not be able to crown a config by sending a fast enough time.
    """
    parameters = set(space.parameter_names)
    floor_s = workload.flops / (limits["compute_units"] * MAX_FLOPS_PER_COMPUTE_UNIT)
    checked = []
    for position, m in enumerate(sent):
        where = f"measurements.{position}"
        if set(m.config) != parameters:
            raise HTTPException(
                422, f"{where}.config must set exactly the space's parameters "
                f"{', '.join(sorted(parameters))}",
            )  # fmt: skip
        try:
            space.check(m.config, limits)
        except SpaceError as error:
            raise HTTPException(422, f"{where}.config: {error}") from error
        if m.status == Status.OK:
            if m.flops != workload.flops:
                raise HTTPException(422, f"{where}.flops must be the workload's {workload.flops}")
            if not m.times_s or min(m.times_s) < floor_s:
                raise HTTPException(
                    422, f"{where}.times_s: a passing result needs run times of at least "
                    f"{floor_s:.3g} s, what {limits['compute_units']} compute units could do "
                    "at most",
                )  # fmt: skip
            if m.max_error is not None and not m.max_error < 1:
                raise HTTPException(
                    422, f"{where}.max_error: a passing result was verified (max_error < 1)"
                )
        checked.append(m.measurement())
    return checked
