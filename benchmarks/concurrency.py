"""Many writers on one database at once: rows expected, rows stored, duplicates.

Real processes on this machine's CPU device and a real `octune serve` on loopback:
- two tuners of one workload with the same seed (claims keep them apart), then two
  `--resume --budget 30` runs finishing one budget together;
- `--uploads` copies of one tuned session posted at once to the server (a client retrying);
- four `octune import`s of one bundle into a new database at once.

    python benchmarks/concurrency.py [--uploads 20] [--server-db postgresql+psycopg://...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from sqlalchemy import func, select

from octune.api.client import session_uploads
from octune.catalogue.family import Workload as WorkloadSpec
from octune.db.models import MeasurementRow, SessionUpload, TuningSession, WorkloadRow
from octune.db.store import Store
from octune.kernels.gemm import gemm_workload

OCTUNE = [sys.executable, "-m", "octune"]


def octune(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*OCTUNE, *args], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"octune {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def together(count: int, work: Callable[[int], object]) -> None:
    with ThreadPoolExecutor(count) as pool:
        list(pool.map(work, range(count)))


def rows(db: str, workload: WorkloadSpec | None = None) -> tuple[int, int]:
    """Stored search measurements (confirmations aside), of one workload or all, and how
    many distinct (workload, config) pairs they hold.
    """
    query = (
        select(WorkloadRow.key, MeasurementRow.config_key)
        .join(TuningSession, MeasurementRow.session_id == TuningSession.id)
        .join(WorkloadRow, TuningSession.workload_id == WorkloadRow.id)
        .where(TuningSession.strategy != "confirm")
    )
    if workload is not None:
        query = query.where(WorkloadRow.key == workload.key)
    with Store(db) as store, store._session() as session:
        found = session.execute(query).all()
    return len(found), len(set(found))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=20)
    parser.add_argument("--server-db", help="database of the server (default: a new SQLite)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="octune-concurrency-"))
    table = []

    tuned = f"sqlite:///{scratch / 'tuned.db'}"
    workload = gemm_workload(16, 16, 16)
    shape = ["--m", "16", "--n", "16", "--k", "16", "--strategy", "random", "--seed", "3",
             "--confirm", "0", "--db", tuned]  # fmt: skip
    octune("tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--budget", "1", "--db", tuned)
    together(2, lambda _: octune("tune", "gemm", *shape, "--budget", "8"))
    stored, distinct = rows(tuned, workload)
    table.append(("2 tuners, one workload, same seed, --budget 8 each", 2, distinct, stored,
                  stored - distinct))  # fmt: skip
    together(2, lambda _: octune("tune", "gemm", *shape, "--budget", "30", "--resume"))
    stored, distinct = rows(tuned, workload)
    table.append(("then 2 x --resume --budget 30", 2, 30, stored, stored - distinct))

    bundle = scratch / "bundle"
    with Store(tuned) as store:
        (device,) = store.stored_devices()
    octune("export", "--device", device.fingerprint, "--out", str(bundle), "--no-model",
           "--db", tuned)  # fmt: skip
    imported = f"sqlite:///{scratch / 'imported.db'}"
    together(4, lambda _: octune("import", str(bundle), "--db", imported))
    stored, distinct = rows(imported)
    table.append(("4 imports of one bundle (2 workloads) into a new database", 4, 2, stored,
                  stored - distinct))  # fmt: skip

    server_db = args.server_db or f"sqlite:///{scratch / 'server.db'}"
    token = octune("token", "create", "--name", "bench", "--scope", "write", "--db", server_db)
    secret = token.stdout.splitlines()[0]
    with Store(tuned) as store, store._session() as session:
        largest = session.scalars(
            select(MeasurementRow.session_id)
            .group_by(MeasurementRow.session_id)
            .order_by(func.count().desc())
        ).first()
    with Store(tuned) as store:
        (upload,) = session_uploads(store, largest or 1, chunk=10_000)
    port = 18765
    server = subprocess.Popen([*OCTUNE, "serve", "--db", server_db, "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        body = upload.model_dump_json()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {secret}"}
        together(args.uploads, lambda _: httpx.post(f"{url}/v1/sessions", content=body,
                                                    headers=headers, timeout=120))  # fmt: skip
    finally:
        server.terminate()
        server.wait()
    with Store(server_db) as store, store._session() as session:
        ids = session.scalars(
            select(SessionUpload.session_id).where(SessionUpload.uid == upload.uid)
        )
        keys = session.scalars(
            select(MeasurementRow.config_key).where(MeasurementRow.session_id.in_(list(ids)))
        ).all()
    backend = server_db.split(":")[0]
    table.append((f"{args.uploads} uploads of one session ({backend})", args.uploads,
                  len(upload.measurements), len(keys), len(keys) - len(set(keys))))  # fmt: skip

    print("\n| writers at once | processes | rows expected | rows stored | duplicates |")
    print("| --- | --- | --- | --- | --- |")
    for what, writers, expected, stored, duplicates in table:
        print(f"| {what} | {writers} | {expected} | {stored} | {duplicates} |")


if __name__ == "__main__":
    main()
