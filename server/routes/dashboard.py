"""The dashboard, server-rendered HTML (Jinja2) with Plotly charts drawn by the plotly.js the
plotly package ships (served here, no CDN):

- ``/``: devices (and how they compare on the workloads they share), the tuning farm, recent
  search sessions with their confirmations folded in, tuned workloads as lookups answer them;
- ``/dashboard/sessions/{id}``: every candidate of a session, failures by kind, best so far;
- ``/dashboard/devices/{fingerprint}``: how lookups answer shapes around what was tuned, and
  the cost model's estimates against measurements on shapes held out of its fit;
- ``/dashboard/models/{name}``: a built-in network layer by layer (`octune report --html`);
- ``/dashboard/networks/{id}``: the same for a network tuned from any ONNX file, from the
  layers the database kept (``db.networks``);
- ``/login``: where a browser trades a token for a cookie when reads need a token.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import parse_qs

from cachetools import LRUCache
from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from octune.api.job_spec import spec_label
from octune.catalogue.registry import describe_shape, families
from octune.core.charts import MATCH_COLOURS, plotly_js
from octune.db.dashboard_views import SessionRow, recent_sessions, session_detail
from octune.db.queries import StoredDevice
from octune.db.server_store import BestSummary, ServerStore, TunedKernel
from octune.lookup.data import Query as LookupQuery
from octune.server.auth import COOKIE, known_token
from octune.server.dashboard_charts import (
    KINDS,
    coverage_figure,
    devices_figure,
    model_check_figure,
    session_figure,
)
from octune.server.lookups import LookupService

if TYPE_CHECKING:  # the module loads XGBoost
    from octune.lookup.predictor import HeldOut

router = APIRouter(tags=["dashboard"])
#: Pages anyone may load: the sign-in form and the charting library.
public = APIRouter(tags=["dashboard"])
templates = Jinja2Templates(directory=str(resources.files("octune.server") / "templates"))

SESSIONS = 30
JOBS = 100
WORKLOADS = 500
#: Token bytes a sign-in form may carry, and the lifetime of the cookie it sets.
MAX_FORM_BYTES, COOKIE_MAX_AGE_S = 4096, 12 * 3600


@dataclass(frozen=True)
class TunedRow:
    """One tuned workload on one device: the fastest kernel, and the others tuned for it."""

    best: BestSummary
    others: list[BestSummary]
    label: str


def label(problem: str, shape: dict[str, int], key: str) -> str:
    """A workload as its family describes it (``conv2d 64→128 3x3 56x56 s2``), else its key."""
    return describe_shape(problem, shape, key)


def tuned_rows(rows: list[BestSummary]) -> list[TunedRow]:
    """Rows of one (device, workload) merged, fastest kernel first: a workload's flops are the
    same for every kernel, so the highest GFLOP/s is the shortest time.
    """
    grouped: dict[tuple[str, str], list[BestSummary]] = {}
    for row in rows:
        grouped.setdefault((row.device_fingerprint, row.workload), []).append(row)
    merged = [sorted(group, key=lambda r: -r.best_gflops) for group in grouped.values()]
    return [TunedRow(g[0], g[1:], label(g[0].problem, g[0].shape, g[0].workload)) for g in merged]


def _page(request: Request, name: str, context: dict[str, Any]) -> HTMLResponse:
    signed_in = COOKIE in request.cookies
    common = {"match_colours": MATCH_COLOURS, "signed_in": signed_in, "standalone": False}
    return templates.TemplateResponse(request, name, {**common, **context})


def _session_labels(sessions: list[SessionRow]) -> dict[int, str]:
    return {s.session_id: label(s.problem, s.shape, s.workload) for s in sessions}


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def dashboard(request: Request) -> HTMLResponse:
    from octune.networks.builtin import BUILTIN  # loads ONNX: only once a page is asked for

    store: ServerStore = request.app.state.store
    tuned = store.tuned_workloads(WORKLOADS)
    sessions = recent_sessions(store, SESSIONS)
    labels = _session_labels(sessions)
    return _page(
        request,
        "dashboard.html",
        {
            "devices": store.devices(),
            "compared": devices_figure(tuned, lambda r: label(r.problem, r.shape, r.workload)),
            "agents": store.agents(2 * request.app.state.settings.lease_s),
            "jobs": [(job, spec_label(job.spec)) for job in store.jobs(limit=JOBS)],
            "waiting": store.waiting_submissions(),
            "models": list(BUILTIN),
            "networks": store.stored_networks(),
            "sessions": sessions,
            "labels": labels,
            "workloads": tuned_rows(tuned),
            "limit": WORKLOADS,
        },
    )


@router.get(
    "/dashboard/sessions/{session_id}", response_class=HTMLResponse, include_in_schema=False
)
def session_page(
    request: Request, session_id: Annotated[int, Path(ge=1, le=2**62)]
) -> HTMLResponse:
    """A search session's every candidate; a confirm session shows the search it confirms."""
    detail = session_detail(request.app.state.store, session_id)
    if detail is None:
        raise HTTPException(404, f"no session {session_id}: the dashboard's home lists them")
    labels = _session_labels([detail.row])
    row = detail.row
    return _page(
        request,
        "session.html",
        {
            "row": row,
            "label": labels[row.session_id],
            "key": row.workload,
            "candidates": detail.candidates,
            "truncated": detail.truncated,
            "figure": session_figure(detail),
        },
    )


@router.get(
    "/dashboard/devices/{fingerprint}", response_class=HTMLResponse, include_in_schema=False
)
def device_page(
    request: Request, fingerprint: Annotated[str, Path(pattern=r"^[0-9a-f]{16}$")]
) -> HTMLResponse:
    """One device: per tuned family and dtype, how its lookups answer the shapes around the
    shape tuned most recently (exact, nearest, predicted or default).
    """
    from octune.networks.builtin import BUILTIN

    store: ServerStore = request.app.state.store
    found = [d for d in store.devices() if d.fingerprint == fingerprint]
    if not found:
        raise HTTPException(404, f"no device {fingerprint}: the dashboard's home lists them")
    lookups: LookupService = request.app.state.lookups
    stored = lookups.device(fingerprint)
    latest: dict[tuple[str, str], dict[str, int]] = {}
    for row in store.tuned_workloads(WORKLOADS):
        if row.device_fingerprint == fingerprint and row.problem in families():
            latest.setdefault((row.problem, row.dtype), row.shape)
    coverage = []
    for (problem, dtype), shape in sorted(latest.items()):

        def answer(query: dict[str, int], problem: str = problem, dtype: str = dtype) -> str:
            return lookups.lookup.lookup(stored, LookupQuery(problem, query, dtype)).match

        figure = coverage_figure(families()[problem], shape, dtype, answer)
        if figure is not None:
            coverage.append((f"coverage-{problem}-{dtype}", figure))
    checks = [
        (f"model-{kernel.name}", figure)
        for kernel in found[0].kernels
        if (figure := model_check_figure(kernel.name, _model_check(request, stored, kernel)))
    ]
    return _page(
        request,
        "device.html",
        {"device": found[0], "coverage": coverage, "checks": checks, "kinds": KINDS,
         "models": list(BUILTIN)},
    )  # fmt: skip


#: Held-out checks of the cost model kept (the least recently shown dropped first), by device,
#: kernel version and data stamp.
MODEL_CHECKS = 64


def _model_check(request: Request, device: StoredDevice, kernel: TunedKernel) -> list[HeldOut]:
    """The cost model's held-out check of a kernel version on a device, fit once per state of
    its measurements (an XGBoost fit: a fraction of a second to a few).
    """
    from octune.lookup.predictor import held_out_check  # loads XGBoost

    store: ServerStore = request.app.state.store
    key = (device.fingerprint, kernel.sha256, store.version_stamp(device.fingerprint,
                                                                   kernel.sha256))  # fmt: skip
    state = request.app.state
    if not hasattr(state, "model_checks"):  # per app: stamps of two databases may be equal
        state.model_checks = LRUCache(MODEL_CHECKS)
    cache: LRUCache[tuple[Any, ...], list[HeldOut]] = state.model_checks
    if key not in cache:
        lookups: LookupService = state.lookups
        table = lookups.lookup.index(device, kernel.name, kernel.sha256).table
        cache[key] = held_out_check(store, device, table)
    return cache[key]


@router.get("/dashboard/models/{name}", response_class=HTMLResponse, include_in_schema=False)
def model_page(
    request: Request,
    name: str,
    device: Annotated[str, Query(description="a stored device's fingerprint or name")],
) -> HTMLResponse:
    """A built-in network on a device, layer by layer, from this server's database and
    answered as its lookups answer. Built-in networks only: a request never names a file.
    """
    from octune.networks.builtin import BUILTIN, did_you_mean
    from octune.networks.report import network_report, render_html

    if name not in BUILTIN:
        raise HTTPException(
            404,
            f"unknown model '{name}': {did_you_mean(name)}the dashboard shows the built-in "
            f"networks {', '.join(BUILTIN)}",
        )
    lookups: LookupService = request.app.state.lookups
    found = lookups.device(device)
    report = network_report(name, request.app.state.store, found, lookup=lookups.lookup)
    return HTMLResponse(render_html(report, standalone=False))


@router.get(
    "/dashboard/networks/{network_id}", response_class=HTMLResponse, include_in_schema=False
)
def network_page(
    request: Request,
    network_id: Annotated[int, Path(ge=1, le=2**62)],
    device: Annotated[str, Query(description="a stored device's fingerprint or name")],
) -> HTMLResponse:
    """A network `tune --model` read from any ONNX file, from the layers the database kept:
    the file itself is never opened.
    """
    from octune.networks.report import render_html, stored_network_report

    store: ServerStore = request.app.state.store
    network = store.stored_network(network_id)
    if network is None:
        raise HTTPException(404, f"no network {network_id}: the dashboard's home lists them")
    lookups: LookupService = request.app.state.lookups
    report = stored_network_report(network, store, lookups.device(device), lookups.lookup)
    return HTMLResponse(render_html(report, standalone=False))


@public.get("/static/plotly.min.js", include_in_schema=False)
def plotly_script() -> Response:
    return FileResponse(
        str(plotly_js()),
        media_type="text/javascript",
        headers={"Cache-Control": "public, max-age=86400"},
    )


def _local(path: str) -> str:
    """Where to go after signing in: a path on this server only (never ``//host``)."""
    return path if path.startswith("/") and not path.startswith("//") else "/"


@public.get("/login", response_class=HTMLResponse, include_in_schema=False)
def login_form(request: Request, next: str = "/") -> HTMLResponse:
    return _page(request, "login.html", {"next": _local(next[:512]), "error": None})


@public.post("/login", include_in_schema=False)
async def login(request: Request) -> Response:
    """A token from the form, checked, then kept in an HttpOnly, SameSite=Strict cookie."""
    body = await request.body()
    form = parse_qs(body[:MAX_FORM_BYTES].decode("utf-8", "replace"), max_num_fields=4)
    token = (form.get("token") or [""])[0].strip()
    target = _local((form.get("next") or ["/"])[0][:512])
    if not token or known_token(request, token) is None:
        page = _page(request, "login.html", {"next": target, "error": "Unknown token."})
        page.status_code = 401
        return page
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE, token, max_age=COOKIE_MAX_AGE_S, httponly=True, samesite="strict",
        secure=request.url.scheme == "https",
    )  # fmt: skip
    return response


@public.post("/logout", include_in_schema=False)
def logout() -> Response:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE)
    return response
