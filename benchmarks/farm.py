"""The tuning farm under chaos, and its queue's throughput.

    python benchmarks/farm.py chaos --db URL [--agents 3] [--jobs 6] [--kills 3]
    python benchmarks/farm.py throughput --db URL [--agents 50] [--jobs 2000]

chaos: `octune serve` and N `octune agent` processes on this machine's OpenCL device, M jobs
(small GEMM workloads); K times, a random agent that holds a job is SIGKILLed (with its
measurer) and a fresh one started. Prints the measurements stored, duplicates (a config a
job's search measured twice) and lost (measurements seen on the server before a kill and
missing at the end); every job must complete.

throughput: 50 simulated agents (threads, each its own HTTP client) hammer one server's queue
with lease, heartbeat and finish until every job is done: leases per second, as many
clients contend for the same device's jobs (the worst case for the row locks).

The database must be new (a SQLite path that does not exist, or an empty PostgreSQL one).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
from sqlalchemy import select

from octune.db.models import JobSession, MeasurementRow, TuningSession
from octune.db.server_store import ServerStore
from octune.server.tokens import create_token, token_hash

OCTUNE = [sys.executable, "-c", "from octune.cli import main; main()"]
WORKLOADS = [
    {"kernel": "gemm", "m": 16, "n": 16, "k": 16},
    {"kernel": "gemm", "m": 8, "n": 8, "k": 8},
]
FAKE_DEVICE = {
    "platform_name": "Bench", "platform_version": "1", "vendor": "Bench", "name": "Sim-GPU",
    "driver_version": "1", "compute_units": 8, "max_work_group_size": 256,
    "local_mem_size": 32768, "global_mem_size": 1 << 30, "device_type": "gpu",
}  # fmt: skip


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve(db: str, log: Path, lease_s: float, port: int) -> subprocess.Popen[bytes]:
    with log.open("w") as sink:
        process = subprocess.Popen(
            [*OCTUNE, "serve", "--db", db, "--port", str(port), "--lease-seconds", str(lease_s),
             "--no-predict", "--no-access-log"],
            stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    for _ in range(300):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1).is_success:
                return process
        except httpx.TransportError:
            time.sleep(0.2)
    raise SystemExit(f"the server did not start: {log.read_text()}")


def agent(url: str, token: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as sink:
        return subprocess.Popen(
            [*OCTUNE, "agent", "--server", url, "--token", token, "--poll", "0.3",
             "--workdir", str(log.with_suffix(".work"))],
            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def measured(store: ServerStore) -> list[tuple[int, int, int, str, str]]:
    query = (
        select(JobSession.job_id, TuningSession.kernel_version_id, TuningSession.workload_id,
               TuningSession.strategy, MeasurementRow.config_key)
        .join(TuningSession, JobSession.session_id == TuningSession.id)
        .join(MeasurementRow, MeasurementRow.session_id == TuningSession.id)
    )  # fmt: skip
    with store._session() as session:
        return [tuple(row) for row in session.execute(query)]


def chaos(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="octune-farm-"))
    store = ServerStore(args.db)
    token = create_token(store, "chaos", "write")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = serve(args.db, folder / "server.log", args.lease, port)
    rng = random.Random(args.seed)
    started = time.monotonic()
    agents = [agent(url, token, folder / f"agent-{i}.log") for i in range(args.agents)]
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    for _ in range(args.jobs):
        body = {"devices": "*", "workloads": WORKLOADS, "strategy": "exhaustive",
                "budget": args.budget, "wait_for_device": True}  # fmt: skip
        http.post("/v1/jobs", json=body).raise_for_status()
    seen: set[tuple[int, int, int, str, str]] = set()
    kills = 0
    try:
        while True:
            jobs = http.get("/v1/jobs").json()
            if len(jobs) == args.jobs and all(j["status"] in ("completed", "failed") for j in jobs):
                break
            running = [j for j in jobs if j["status"] == "running" and j["candidates"] >= 1]
            if kills < args.kills and running and rng.random() < 0.3:
                victim = rng.randrange(len(agents))
                seen |= set(measured(store))
                os.killpg(agents[victim].pid, signal.SIGKILL)
                agents[victim].wait()
                kills += 1
                agents[victim] = agent(url, token, folder / f"agent-{args.agents + kills}.log")
            time.sleep(1.0)
    finally:
        for process in agents:
            os.killpg(process.pid, signal.SIGKILL)
        server.terminate()
        server.wait()
    final = measured(store)
    search = Counter(
        (job, k, w, key) for job, k, w, strategy, key in final if strategy != "confirm"
    )
    failed = [j["id"] for j in jobs if j["status"] != "completed"]
    print(f"database: {store.url}")
    print(f"agents {args.agents}, jobs {args.jobs} ({args.budget} candidates each), "
          f"kills {kills}, lease {args.lease:g} s")  # fmt: skip
    print(f"jobs completed {args.jobs - len(failed)}, failed {len(failed)}; "
          f"wall {time.monotonic() - started:.0f} s")  # fmt: skip
    print(f"measurements {len(final)} (search {sum(search.values())}), "
          f"duplicates {sum(c - 1 for c in search.values() if c > 1)}, "
          f"lost {len(seen - set(final))}, "
          f"failed attempts {sum(j['failures'] for j in jobs)}")  # fmt: skip
    print(f"logs in {folder}")


def throughput(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="octune-queue-"))
    store = ServerStore(args.db)
    token = create_token(store, "bench", "write")
    writer = store.token(token_hash(token))
    assert writer is not None
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = serve(args.db, folder / "server.log", 60, port)
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
            ids = [
                http.post("/v1/agents", json={"name": f"sim-{i}", "host": "bench",
                                              "devices": [FAKE_DEVICE]}).json()["agent_id"]
                for i in range(args.agents)
            ]  # fmt: skip
        for _ in range(args.jobs):
            store.submit(devices="Sim-GPU", spec={"workloads": WORKLOADS}, strategy="random",
                         budget_seconds=None, budget_candidates=1, max_attempts=3,
                         token_id=writer.id, wait_for_device=False)  # fmt: skip
        fingerprint = store.jobs(limit=1)[0].device_fingerprint
        leases: list[int] = []
        barrier = threading.Barrier(args.agents + 1)

        def simulate(agent_id: int) -> None:
            with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
                barrier.wait()
                while True:
                    granted = http.post(f"/v1/agents/{agent_id}/lease",
                                        json={"device": fingerprint}).json()  # fmt: skip
                    if granted["job"] is None:
                        return
                    job = granted["job"]
                    leases.append(job["id"])
                    held = {"agent_id": agent_id, "epoch": job["lease_epoch"], "tried_s": 0.1}
                    http.post(f"/v1/jobs/{job['id']}/heartbeat", json=held).raise_for_status()
                    http.post(f"/v1/jobs/{job['id']}/finish", json=held).raise_for_status()

        threads = [threading.Thread(target=simulate, args=(i,)) for i in ids]
        for thread in threads:
            thread.start()
        barrier.wait()
        started = time.perf_counter()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
    finally:
        server.terminate()
        server.wait()
    done = [j for j in store.jobs(limit=args.jobs) if j.status == "completed"]
    calls = 3 * len(leases) + args.agents  # lease, heartbeat, finish; each agent's last lease
    print(f"database: {store.url}")
    print(f"{args.agents} simulated agents, {args.jobs} jobs: {len(leases)} leases "
          f"({len(set(leases))} distinct jobs, {len(done)} completed) in {elapsed:.1f} s: "
          f"{len(leases) / elapsed:.0f} leases/s, "
          f"{calls / elapsed:.0f} queue calls/s "
          f"(lease, heartbeat, finish)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("chaos")
    run.add_argument("--db", required=True)
    run.add_argument("--agents", type=int, default=3)
    run.add_argument("--jobs", type=int, default=6)
    run.add_argument("--kills", type=int, default=3)
    run.add_argument("--budget", type=int, default=10)
    run.add_argument("--lease", type=float, default=3.0)
    run.add_argument("--seed", type=int, default=1)
    queue = commands.add_parser("throughput")
    queue.add_argument("--db", required=True)
    queue.add_argument("--agents", type=int, default=50)
    queue.add_argument("--jobs", type=int, default=2000)
    args = parser.parse_args()
    (chaos if args.command == "chaos" else throughput)(args)


if __name__ == "__main__":
    main()
