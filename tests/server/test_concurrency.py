"""Many writers at once, on SQLite and PostgreSQL: parallel uploads of one session and parallel
imports of one bundle store each row once; tuners sharing a new database both finish.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import httpx
from helpers.cli_testing import octune_process
from helpers.server_testing import LiveServer, Seeder, bearer
from sqlalchemy import func, select

from octune.api.client import session_uploads
from octune.db.models import MeasurementRow, SessionUpload, TuningSession
from octune.db.server_store import ServerStore
from octune.db.store import Store
from octune.firmware.export import export_bundle
from octune.kernels.gemm import gemm_workload
from octune.server.tokens import create_token

WRITERS = 20
Result = TypeVar("Result")


def all_at_once(writers: int, work: Callable[[int], Result]) -> list[Result]:
    """`work(i)` for each writer, released together so they race."""
    start = threading.Barrier(writers)

    def released(index: int) -> Result:
        start.wait()
        return work(index)

    with ThreadPoolExecutor(writers) as pool:
        return list(pool.map(released, range(writers)))


def rows_of_upload(store: Store, uid: str) -> tuple[int, int, int]:
    """Sessions stored under an upload id, their measurement rows, and distinct configs."""
    with store._session() as session:
        sessions = session.scalars(
            select(SessionUpload.session_id).where(SessionUpload.uid == uid)
        ).all()
        keys = session.scalars(
            select(MeasurementRow.config_key).where(MeasurementRow.session_id.in_(sessions))
        ).all()
    return len(sessions), len(keys), len(set(keys))


def test_parallel_uploads_of_one_session_store_each_row_once(
    store: ServerStore, db_url: str, seeder: Seeder, tmp_path: Path
) -> None:
    """A client retrying after a timeout sends the same session again while the first is
    still being stored: 20 copies at once must store it once.
    """
    (upload,) = session_uploads(store, seeder.session(gemm_workload(32, 32, 32), list(range(25))))
    headers = {"Content-Type": "application/json", **bearer(create_token(store, "farm", "write"))}
    body = upload.model_dump_json()
    server = LiveServer(db_url, tmp_path / "serve.log")
    try:
        codes = all_at_once(
            WRITERS,
            lambda _: (
                httpx.post(
                    f"{server.url}/v1/sessions", content=body, headers=headers, timeout=120
                ).status_code
            ),
        )
    finally:
        server.stop()
    assert codes == [200] * WRITERS
    assert rows_of_upload(store, upload.uid) == (1, 25, 25)


def test_parallel_imports_of_one_bundle_store_each_entry_once(
    db_url: str, device_info, gemm_kernel, gemm_table, tmp_path: Path
) -> None:
    """Four `octune import`s of one bundle into a new database (SQLite, PostgreSQL) at once."""
    with ServerStore(f"sqlite:///{tmp_path / 'source.db'}") as source:
        seeder = Seeder(source, device_info, gemm_kernel, gemm_table)
        shapes = [gemm_workload(16 * i, 16, 16) for i in range(1, 5)]
        for workload in shapes:
            seeder.session(workload, [1, 2])
        bundle = tmp_path / "bundle"
        export_bundle(source, device_info.fingerprint, None, "json", bundle)
    results = all_at_once(4, lambda _: octune_process("import", str(bundle), "--db", db_url))
    assert [r.returncode for r in results] == [0] * 4, [r.stderr for r in results]
    with Store(db_url) as fresh, fresh._session() as session:
        keys = session.execute(
            select(TuningSession.workload_id, MeasurementRow.config_key).join(
                TuningSession, MeasurementRow.session_id == TuningSession.id
            )
        ).all()
    assert len(keys) == len(set(keys)) == len(shapes)


def test_two_tuners_starting_on_a_new_database_both_finish(db_url: str) -> None:
    """Both create the schema at once: neither may fail on "table already exists" or "database
    is locked" (SQLite), or on a duplicate table (PostgreSQL).
    """
    db = db_url
    results = all_at_once(
        2,
        lambda i: octune_process(
            "tune", "gemm", "--m", "17", "--n", str(8 + i), "--k", "8", "--budget", "2",
            "--strategy", "random", "--confirm", "0", "--db", db,
        ),
    )  # fmt: skip
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    with Store(db) as store, store._session() as session:
        assert session.scalar(select(func.count(MeasurementRow.id))) == 4


def test_a_writer_holding_the_lock_for_20_s_does_not_end_a_tune(tmp_path: Path) -> None:
    """An import or a server busy for 20 s: the tuner's writes wait (the busy timeout is 120 s
    by default, not Python's 5 s) and the session finishes.
    """
    path = tmp_path / "busy.db"
    Store(f"sqlite:///{path}").close()  # migrated: the lock below is the only obstacle
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # the write lock, as a long transaction holds it
    releaser = threading.Timer(20, holder.rollback)
    releaser.start()
    try:
        started = time.monotonic()
        result = octune_process(
            "tune", "gemm", "--m", "17", "--n", "8", "--k", "8", "--budget", "2",
            "--strategy", "random", "--confirm", "0", "--db", f"sqlite:///{path}",
        )  # fmt: skip
        waited = time.monotonic() - started
    finally:
        releaser.join()
        holder.close()
    assert result.returncode == 0, result.stderr
    assert "measured 2 configs" in result.stdout
    assert waited >= 20  # it did meet the lock: the run could not have ended before its release


def search_rows(db: str) -> tuple[int, int]:
    """Measurements of search sessions (confirmations aside), and their distinct configs."""
    with Store(db) as store, store._session() as session:
        keys = session.scalars(
            select(MeasurementRow.config_key)
            .join(TuningSession, MeasurementRow.session_id == TuningSession.id)
            .where(TuningSession.strategy != "confirm")
        ).all()
    return len(keys), len(set(keys))


def test_two_tuners_of_one_workload_never_measure_a_config_twice(tmp_path: Path) -> None:
    """Same workload, same seed, same strategy: without claims both would walk the same
    configs in the same order. Each claims a config before measuring it and leaves the other's.
    """
    db = f"sqlite:///{tmp_path / 'shared.db'}"
    Store(db).close()
    args = ["tune", "gemm", "--m", "17", "--n", "16", "--k", "16", "--strategy", "random",
            "--seed", "3", "--confirm", "0", "--db", db]  # fmt: skip
    results = all_at_once(2, lambda _: octune_process(*args, "--budget", "8"))
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    total, distinct = search_rows(db)
    assert total == distinct and 8 < total <= 16

    # Two --resume runs together finish one budget of 30, however they share it.
    results = all_at_once(2, lambda _: octune_process(*args, "--budget", "30", "--resume"))
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    assert search_rows(db) == (30, 30)
