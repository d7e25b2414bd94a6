"""The store against real SQLite files: what a tuning run writes must come back, survive a
crash, and the migrations must build exactly the schema the models describe.
"""

from __future__ import annotations

import inspect as pyinspect
import os
from datetime import UTC

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from octune.core.errors import StoreError
from octune.core.results import BestResult, Measurement, Status, config_key
from octune.db.engine import alembic_config
from octune.db.models import Base
from octune.db.store import Store
from octune.tuner.device import DeviceInfo
from octune.tuner.memory_store import MemoryStore
from octune.tuner.tuning_store import TuningStore

DEVICE = DeviceInfo(
    platform_name="Portable Computing Language",
    platform_version="OpenCL 3.0 PoCL 6.0",
    vendor="GenuineIntel",
    name="cpu-haswell-Intel(R) Xeon(R)",
    driver_version="6.0",
    compute_units=16,
    max_work_group_size=4096,
    max_work_item_sizes=(4096, 4096, 4096),
    local_mem_size=524288,
    global_mem_size=64 * 2**30,  # over 2**31: needs a BigInteger column
    device_type="cpu",
)
SHAPE = {"m": 1024, "n": 1024, "k": 1024, "transa": 0, "transb": 0}
KEY = "gemm:m=1024,n=1024,k=1024,transa=0,transb=0,dtype=float32"
FLOPS = 2 * 1024**3


def ok(tile: int, *times: float) -> Measurement:
    return Measurement({"TILE": tile, "VEC": 4}, Status.OK, times, flops=FLOPS, max_error=0.01)


def failed(tile: int, status: Status = Status.BUILD_ERROR) -> Measurement:
    return Measurement({"TILE": tile, "VEC": 4}, status, message="error: out of registers")


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'nested' / 'octune.db'}"


@pytest.fixture
def store(url):
    with Store(url) as store:
        yield store


def ids(store: Store, sha: str = "a" * 64) -> tuple[int, int, int]:
    return (
        store.device_id(DEVICE),
        store.kernel_version_id("gemm", sha, "__kernel void gemm() {}", "params: {}"),
        store.workload_id("gemm", KEY, SHAPE, "float32"),
    )


def test_get_or_create_is_idempotent(store):
    first = ids(store)
    assert ids(store) == first
    assert store.kernel_version_id("gemm", "b" * 64, "changed", "params: {}") != first[1]
    smaller = KEY.replace("k=1024", "k=512")
    assert store.workload_id("gemm", smaller, {**SHAPE, "k": 512}, "float32") != first[2]


def test_measurements_round_trip(store):
    device, kernel, workload = ids(store)
    session = store.start_session(device, kernel, workload, "random", 7, {"budget": 50})
    written = [
        ok(8, 0.003, 0.002, 0.0025, 0.0021),
        failed(64),
        Measurement({"TILE": 16, "VEC": 2}, Status.WRONG_RESULT, (0.001,), FLOPS, 3.5, "bad"),
        Measurement({"VEC": 1, "TILE": 4}, Status.OK, (0.1,), FLOPS, extra={"regs": 32.0}),
    ]
    for m in written:
        store.add_measurement(session, m)
    store.finish_session(session, "completed")

    read = store.session_measurements(session)
    assert read == written
    assert [m.gflops for m in read] == [m.gflops for m in written]
    assert store.measured_config_keys(device, kernel, workload) == {
        config_key(m.config) for m in written
    }


def test_long_messages_are_truncated(store):
    session = store.start_session(*ids(store), "random", None, {})
    store.add_measurement(session, Measurement({"TILE": 1}, Status.CRASH, message="x" * 5000))
    assert store.session_measurements(session)[0].message == "x" * 2000


def test_finish_session_rejects_unknown_status(store):
    session = store.start_session(*ids(store), "random", None, {})
    with pytest.raises(ValueError, match="status"):
        store.finish_session(session, "done")


def test_best_picks_fastest_ok_and_counts_failures(store):
    device, kernel, workload = ids(store)
    first = store.start_session(device, kernel, workload, "random", 1, {})
    store.add_measurement(first, ok(8, 0.004, 0.005, 0.0045))
    store.add_measurement(first, failed(64))
    store.finish_session(first, "interrupted")
    second = store.start_session(device, kernel, workload, "random", 2, {})
    store.add_measurement(second, ok(16, 0.002, 0.0021, 0.0022))
    # Faster, but wrong: must never be served.
    store.add_measurement(second, Measurement({"TILE": 32}, Status.WRONG_RESULT, (0.0001,), FLOPS))
    store.add_measurement(second, failed(128, Status.TIMEOUT))

    best = store.best(DEVICE.fingerprint, "gemm", KEY)
    assert isinstance(best, BestResult)
    assert best.config == {"TILE": 16, "VEC": 4}
    assert best.median_s == pytest.approx(0.0021)
    assert best.spread_s == pytest.approx(ok(16, 0.002, 0.0021, 0.0022).spread_s)
    assert best.gflops == pytest.approx(FLOPS / 0.0021 / 1e9)
    assert best.session_id == second
    assert (best.kernel_name, best.kernel_sha256) == ("gemm", "a" * 64)
    assert (best.device_fingerprint, best.workload_key) == (DEVICE.fingerprint, KEY)
    assert best.measured_at.tzinfo is not None
    assert best.measured_at.utcoffset() == UTC.utcoffset(None)
    assert (best.measured, best.failed) == (5, 3)
    assert store.best(DEVICE.fingerprint, "gemm", KEY, kernel_sha256="a" * 64) == best


def test_best_follows_latest_kernel_version_unless_pinned(store):
    device, old, workload = ids(store, "a" * 64)
    session = store.start_session(device, old, workload, "random", None, {})
    store.add_measurement(session, ok(8, 0.001))
    _, new, _ = ids(store, "b" * 64)
    session = store.start_session(device, new, workload, "random", None, {})
    store.add_measurement(session, ok(16, 0.002))

    assert store.best(DEVICE.fingerprint, "gemm", KEY).kernel_sha256 == "b" * 64
    pinned = store.best(DEVICE.fingerprint, "gemm", KEY, kernel_sha256="a" * 64)
    assert pinned.config["TILE"] == 8


def test_best_is_none_without_a_passing_measurement(store):
    device, kernel, workload = ids(store)
    assert store.best(DEVICE.fingerprint, "gemm", KEY) is None
    session = store.start_session(device, kernel, workload, "random", None, {})
    store.add_measurement(session, failed(8))
    assert store.best(DEVICE.fingerprint, "gemm", KEY) is None
    assert store.best("0" * 16, "gemm", KEY) is None
    assert store.best(DEVICE.fingerprint, "gemm", "gemm:unknown") is None
    assert store.best(DEVICE.fingerprint, "gemm", KEY, kernel_sha256="f" * 64) is None


def test_measurements_survive_a_new_store(url):
    """A killed run never reaches finish_session; what it measured must still be there."""
    crashed = Store(url)
    device, kernel, workload = ids(crashed)
    session = crashed.start_session(device, kernel, workload, "random", None, {})
    crashed.add_measurement(session, ok(8, 0.003))
    crashed.add_measurement(session, failed(64))
    del crashed  # no close(): as if the process had died

    with Store(url) as resumed:
        assert ids(resumed) == (device, kernel, workload)
        assert resumed.measured_config_keys(device, kernel, workload) == {
            config_key({"TILE": 8, "VEC": 4}),
            config_key({"TILE": 64, "VEC": 4}),
        }
        assert len(resumed.session_measurements(session)) == 2
        assert resumed.best(DEVICE.fingerprint, "gemm", KEY).config["TILE"] == 8


def test_migrations_match_models(store, url):
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
            assert set(inspect(connection).get_table_names()) == {
                *Base.metadata.tables,
                "alembic_version",
            }
    finally:
        engine.dispose()


def test_tokens_made_before_trusted_ones_existed_stay_answering(tmp_path):
    """Revision 0005 splits uploads into kept (write) and answering (trusted): the write
    tokens of an older database were the answering kind, so they become trusted.
    """
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            command.upgrade(alembic_config(connection), "0004")
            for name, scope in [("lab", "write"), ("runtime", "read")]:
                connection.execute(
                    text("INSERT INTO api_tokens (name, scope, sha256, created_at) "
                         "VALUES (:name, :scope, :name, CURRENT_TIMESTAMP)"),
                    {"name": name, "scope": scope},
                )  # fmt: skip
        Store(url).close()  # migrates to head
        with engine.connect() as connection:
            scopes = dict(connection.execute(text("SELECT name, scope FROM api_tokens")).all())
    finally:
        engine.dispose()
    assert scopes == {"lab": "trusted", "runtime": "read"}


def test_devices_stored_before_extensions_were_kept_learn_them_when_seen_again(
    tmp_path, device_info
):
    """Revision 0006 adds the devices' extensions: a device row of an older database reports
    none (so no half-arithmetic variant is offered for it) until a run on it stores them.
    """
    from dataclasses import replace

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    info = replace(device_info, extensions="cl_khr_fp16 cl_khr_fp64")
    try:
        with engine.begin() as connection:
            command.upgrade(alembic_config(connection), "0005")
            connection.execute(
                text("INSERT INTO devices (fingerprint, platform_name, platform_version, vendor, "
                     "name, driver_version, compute_units, max_work_group_size, local_mem_size, "
                     "global_mem_size, device_type, created_at) VALUES (:fp, 'P', '1', 'V', 'D', "
                     "'1', 2, 1024, 32768, 1073741824, 'cpu', CURRENT_TIMESTAMP)"),
                {"fp": info.fingerprint},
            )  # fmt: skip
        with Store(url) as store:  # migrates to head
            (before,) = store.stored_devices()
            store.device_id(info)
            (after,) = store.stored_devices()
    finally:
        engine.dispose()
    assert before.extensions == "" and after.extensions == "cl_khr_fp16 cl_khr_fp64"


def test_sqlite_pragmas(store, url):
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    finally:
        engine.dispose()


def test_default_url(monkeypatch):
    monkeypatch.setenv("OCTUNE_DATABASE_URL", "postgresql://octune@db/octune")
    assert Store.default_url() == "postgresql://octune@db/octune"
    monkeypatch.delenv("OCTUNE_DATABASE_URL")
    assert Store.default_url().startswith("sqlite:///")
    assert Store.default_url().endswith("/octune.db")


@pytest.mark.parametrize(
    "where",
    [
        lambda tmp: f"sqlite:///{tmp / 'a-file' / 'octune.db'}",  # a path component is a file
        lambda tmp: "sqlite:////proc/octune/octune.db",
        lambda tmp: f"sqlite:///{tmp}",  # a directory, not a database file
        lambda tmp: f"sqlite:///{tmp / 'a-file'}",  # a file, but not a database
    ],
)
def test_unwritable_path_is_a_one_line_store_error(tmp_path, where):
    (tmp_path / "a-file").write_text("not a directory")
    url = where(tmp_path)
    with pytest.raises(StoreError) as raised:
        Store(url)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"cannot open database {url}: ")
    assert "--db" in message


def test_bad_urls_are_store_errors_and_hide_passwords():
    for url in ("not a url", "nosuchdb://bob:hunter2@host/db", "postgresql://bob:hunter2@h:x/db"):
        with pytest.raises(StoreError) as raised:
            Store(url)
        message = str(raised.value)
        assert "\n" not in message
        assert "hunter2" not in message


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_read_only_directory_is_a_store_error(tmp_path):
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(StoreError, match="cannot open database"):
            Store(f"sqlite:///{tmp_path / 'octune.db'}")
    finally:
        tmp_path.chmod(0o700)


@pytest.mark.parametrize("implementation", [Store, MemoryStore], ids=["database", "memory"])
def test_the_store_has_every_method_of_the_tuners_protocol_with_its_signature(
    implementation: type,
) -> None:
    """The tuner types its store as ``TuningStore`` and never imports ``octune.db``: the
    protocol and its implementations must not drift apart.
    """

    def parameters(method: object) -> list[tuple[str, object, object]]:
        found = pyinspect.signature(method).parameters.values()  # type: ignore[arg-type]
        return [(p.name, p.kind, p.default) for p in found]

    members = [name for name in vars(TuningStore) if not name.startswith("_")]
    assert len(members) >= 17
    for name in members:
        assert parameters(getattr(implementation, name)) == parameters(
            getattr(TuningStore, name)
        ), name
