"""The page at /: devices, the tuning farm (agents online, jobs with their progress and
failures), tuned workloads with the kernel that answers each (the fastest of
its family's kernels, as a lookup answers) and its best GFLOP/s, and each recent session's
convergence (best-so-far over candidates) as an inline SVG chart; and a page per built-in
network and device at /dashboard/models/NAME, the page `octune report --model NAME --html`
writes. Server-rendered HTML with Jinja2: no scripts, no front-end build.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from octune.db.server_store import Convergence, ServerStore, WorkloadBest
from octune.server.job_spec import spec_label
from octune.server.lookups import LookupService

router = APIRouter(tags=["dashboard"])
templates = Jinja2Templates(directory=str(resources.files("octune.server") / "templates"))

SESSIONS = 12
JOBS = 100
WORKLOADS = 500
WIDTH, HEIGHT, PAD = 360, 160, 28


@dataclass(frozen=True)
class Chart:
    session: Convergence
    points: str  # SVG polyline points of best-so-far GFLOP/s, candidate on x
    improvements: list[tuple[str, str]]  # (x, y) where the best improved: dots on the line
    best: float | None
    candidates: int


@dataclass(frozen=True)
class Answer:
    """One tuned workload on one device: the fastest kernel, and the others tuned for it."""

    best: WorkloadBest
    others: list[WorkloadBest]


def answers(rows: list[WorkloadBest]) -> list[Answer]:
    """Rows of one (device, workload) merged, fastest kernel first: a workload's flops are the
    same for every kernel, so the highest GFLOP/s is the shortest time.
    """
    grouped: dict[tuple[str, str], list[WorkloadBest]] = {}
    for row in rows:
        grouped.setdefault((row.device_fingerprint, row.workload), []).append(row)
    merged = [sorted(group, key=lambda r: -r.best_gflops) for group in grouped.values()]
    return [Answer(group[0], group[1:]) for group in merged]


def chart(session: Convergence) -> Chart:
    curve = session.best_so_far
    best = max((g for g in curve if g is not None), default=None)
    points: list[tuple[str, str]] = []
    improvements = []
    previous = None
    if best:
        span = max(len(curve) - 1, 1)
        for i, value in enumerate(curve):
            if value is not None:
                x = PAD + (WIDTH - 2 * PAD) * i / span
                y = HEIGHT - PAD - (HEIGHT - 2 * PAD) * value / best
                points.append((f"{x:.1f}", f"{y:.1f}"))
                if value != previous:
                    improvements.append(points[-1])
                previous = value
    polyline = " ".join(f"{x},{y}" for x, y in points)
    return Chart(session, polyline, improvements, best, len(curve))


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def dashboard(request: Request) -> HTMLResponse:
    from octune.networks.models import BUILTIN  # loads ONNX: only once a page is asked for

    store: ServerStore = request.app.state.store
    return templates.TemplateResponse(
        request,
        "dashboard.html",
        {
            "devices": store.devices(),
            "agents": store.agents(2 * request.app.state.settings.lease_s),
            "jobs": [(job, spec_label(job.spec)) for job in store.jobs(limit=JOBS)],
            "waiting": store.waiting_submissions(),
            "models": list(BUILTIN),
            "workloads": answers(store.tuned_workloads(WORKLOADS)),
            "charts": [chart(s) for s in store.convergence(SESSIONS)],
            "size": {"width": WIDTH, "height": HEIGHT, "pad": PAD},
            "limit": WORKLOADS,
        },
    )


@router.get("/dashboard/models/{name}", response_class=HTMLResponse, include_in_schema=False)
def model_page(
    request: Request,
    name: str,
    device: Annotated[str, Query(description="a stored device's fingerprint or name")],
) -> HTMLResponse:
    """A built-in network on a device, layer by layer, from this server's database and
    answered as its lookups answer. Built-in networks only: a request never names a file.
    """
    from octune.networks.models import BUILTIN, did_you_mean
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
    return HTMLResponse(render_html(report))
