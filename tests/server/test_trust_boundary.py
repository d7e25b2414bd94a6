"""Issue 45, who may put code on a device, against real `octune serve` processes: a client
compiles a kernel version octune does not ship only when the server that sent it signed it
(``serve --sign-key``) and the user's public key verifies the signature; hostile uploads are
refused and leave the service up and its answers unchanged (SQLite and PostgreSQL); a public
bind with open reads is warned about.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from helpers.server_testing import LiveServer, Seeder

from octune.api.client import session_uploads
from octune.api.schemas import MeasurementIn, UploadIn
from octune.catalogue.registry import KernelSpec
from octune.catalogue.space import ConfigTable
from octune.core.errors import OctuneError
from octune.core.problem import kernel_version_sha256
from octune.core.results import Measurement, Status
from octune.db.server_store import ServerStore
from octune.firmware.export import export_bundle
from octune.firmware.signing import SignatureError, create_key
from octune.firmware.table_data import table_to_data
from octune.kernels.gemm import gemm_workload
from octune.lookup.tables import resolve_device
from octune.runtime.config_sources import ServerConfigs
from octune.server.routes.uploads import MAX_FLOPS_PER_COMPUTE_UNIT
from octune.server.tokens import create_token
from octune.tuner.device import DeviceInfo

W64 = gemm_workload(64, 64, 64)


@pytest.fixture(scope="module")
def registered(tmp_path_factory, device_info: DeviceInfo, gemm_kernel: KernelSpec,
               gemm_table: ConfigTable) -> tuple[str, KernelSpec]:  # fmt: skip
    """A database whose only GEMM results are of a version octune does not ship (a private
    server's own kernel, registered there by its administrator).
    """
    url = f"sqlite:///{tmp_path_factory.mktemp('trust') / 'server.db'}"
    own = KernelSpec(name="gemm", source=gemm_kernel.source + "\n// the lab's variant\n",
                     space=gemm_kernel.space)  # fmt: skip
    with ServerStore(url) as store:
        Seeder(store, device_info, own, gemm_table).session(W64, [5])
    return url, own


def test_a_version_octune_does_not_ship_is_compiled_only_signed(
    registered, device_info: DeviceInfo, tmp_path: Path
) -> None:
    url, own = registered
    public = str(create_key(tmp_path / "server.key"))
    stranger = str(create_key(tmp_path / "stranger.key"))
    signed = LiveServer(url, tmp_path / "signed.log", "--sign-key", str(tmp_path / "server.key"))
    try:
        (answer,) = ServerConfigs(signed.url, device_info).answers("gemm", [W64.shape])
        assert answer.kernel_sha256 == own.sha256
        with pytest.raises(OctuneError, match="does not ship: compile it only signed"):
            ServerConfigs(signed.url, device_info).kernel(answer)
        with pytest.raises(SignatureError, match="this key does not verify"):
            ServerConfigs(signed.url, device_info, public_key=stranger).kernel(answer)
        trusted = ServerConfigs(signed.url, device_info, public_key=public).kernel(answer)
        assert trusted.source == own.source
    finally:
        signed.stop()
    unsigned = LiveServer(url, tmp_path / "unsigned.log")
    try:
        with pytest.raises(SignatureError, match="unsigned, and a public key was given"):
            ServerConfigs(unsigned.url, device_info, public_key=public).kernel(answer)
    finally:
        unsigned.stop()
    assert "PRIVATE KEY" not in (tmp_path / "signed.log").read_text()


def test_a_public_bind_with_open_reads_is_warned(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'server.db'}"
    for flags, warned in ((), True), (("--require-read-token",), False):
        log = tmp_path / f"serve{len(flags)}.log"
        server = LiveServer(url, log, "--host", "0.0.0.0", *flags)
        server.stop()
        assert ("warning: serving on 0.0.0.0 with open reads" in log.read_text()) == warned


def _hostile_uploads(upload: UploadIn) -> dict[str, bytes]:
    """Issue 45's inputs, each as the body a write token could post."""

    def version(template: str, space: str) -> bytes:
        hostile = upload.model_copy(deep=True)
        hostile.kernel.template_source, hostile.kernel.space_source = template, space
        hostile.kernel.sha256 = kernel_version_sha256(template, space)
        return hostile.model_dump_json().encode()

    template, space = upload.kernel.template_source, upload.kernel.space_source
    bomb = "b0: &b0 [1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * 9)}]\n" for i in range(1, 9)
    )
    names = [f"P{i}" for i in range(12)]
    huge = "\n".join([
        "kernel: gemm", "problem: gemm", "entry: gemm_kernel", "parameters:",
        *(f"  {name}: {{values: [{', '.join(map(str, range(1, 41)))}]}}" for name in names),
        "constraints:", f"  - {' + '.join(names)} > 100", "launch:", "  local: [1, 1]",
        "  global: [M, N]",
    ])  # fmt: skip
    return {
        "injected source": version(template + '\n#include "/etc/passwd"\n', space),
        "alias bomb": version(template, space + bomb),
        "nested 5,000 deep": version(template, space + "deep: " + "[" * 5000 + "]" * 5000),
        "4e19-config space": version(template, huge),
        "hash not of its texts": upload.model_dump_json().replace("MWG", "MWG ", 1).encode(),
        "JSON nested 100,000 deep": b"[" * 100_000 + b"]" * 100_000,
        "not JSON": b"{'session':",
        "17 MB body": b'{"x": "' + b"a" * (17 << 20) + b'"}',
    }


def _exported(store: ServerStore, device: DeviceInfo, out: Path) -> list[dict[str, object]]:
    """What `octune export` ships of the device's GEMM: its tables, as the bundle holds them."""
    _manifest, tables = export_bundle(store, device.fingerprint, ["gemm"], "json", out)
    return [table_to_data(table) for table in tables]


def _forged_crowns(upload: UploadIn, table: ConfigTable, device: DeviceInfo) -> dict[str, bytes]:
    """Well-formed uploads a write token could forge: another legal config "confirmed" a
    hair above the physical floor, and the same claimed for a second device under the first's
    name (a farm agent may register such a device too). All are stored; none may change an
    answer.
    """
    workload = gemm_workload(64, 64, 64)
    floor_s = workload.flops / (device.compute_units * MAX_FLOPS_PER_COMPUTE_UNIT)
    crown = upload.model_copy(deep=True)
    crown.uid, crown.session.strategy = "forged-crown", "confirm"
    crown.measurements = [MeasurementIn.of(Measurement(
        table.config(7), Status.OK, (1.01 * floor_s,) * 30, flops=workload.flops, max_error=0.1
    ))]  # fmt: skip
    twin = crown.model_copy(deep=True)
    twin.uid, twin.device.driver_version = "forged-twin", "another driver"
    return {"confirmed at the floor": crown.model_dump_json().encode(),
            "a second device of the same name": twin.model_dump_json().encode()}  # fmt: skip


def test_hostile_uploads_leave_the_service_up_and_its_answers_unchanged(
    db_url: str, tmp_path: Path, device_info: DeviceInfo, gemm_kernel: KernelSpec,
    gemm_table: ConfigTable,
) -> None:  # fmt: skip
    """Each input of issue 45 against a real `octune serve`: refused with a 4xx, then the
    service answers its health check and the same lookup as before. Forged measurements a
    write token may send (well-formed, physically possible) are kept and answer nothing. The
    lookup's latency after each is printed (run with -s): figures for benchmarks/RESULTS.md,
    not a pass mark.
    """
    with ServerStore(db_url) as store:
        (upload,) = session_uploads(store, Seeder(store, device_info, gemm_kernel,
                                                  gemm_table).session(W64, [5]))  # fmt: skip
        token = create_token(store, "tuner", "write")
        exported_before = _exported(store, device_info, tmp_path / "before")
    server = LiveServer(db_url, tmp_path / "server.log", "--no-predict")
    query = {"device": device_info.fingerprint, "kernel": "gemm", "m": 64, "n": 64, "k": 64}
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            before = http.get("/v1/lookup", params=query).json()
            statuses = {}
            for name, body in _hostile_uploads(upload).items():
                statuses[name] = http.post("/v1/sessions", content=body, headers=headers)
                assert http.get("/v1/health").status_code == 200, name
                started = time.perf_counter()
                after = http.get("/v1/lookup", params=query)
                latency = (time.perf_counter() - started) * 1e3
                assert after.json() == before, name
                print(f"{name}: {statuses[name].status_code} {statuses[name].text[:90]}, "
                      f"lookup after {latency:.1f} ms")  # fmt: skip
            rebound = http.get("/v1/lookup", params=query, headers={"Host": "evil.example"})
            statuses["Host rebound"] = rebound
            by_name = {**query, "device": device_info.name}
            named = http.get("/v1/lookup", params=by_name).json()
            kept = {}
            for name, body in _forged_crowns(upload, gemm_table, device_info).items():
                kept[name] = http.post("/v1/sessions", content=body, headers=headers).json()
                started = time.perf_counter()
                assert http.get("/v1/lookup", params=query).json() == before, name
                latency = (time.perf_counter() - started) * 1e3
                print(f"{name}: kept {kept[name]}, lookup after {latency:.1f} ms")
                assert http.get("/v1/lookup", params=by_name).json() == named, name
            twin = {**upload.device.model_dump(), "driver_version": "an agent's driver"}
            agent = {"name": "forger", "host": "h", "devices": [twin]}
            registered = http.post("/v1/agents", json=agent, headers=headers)
            assert registered.status_code == 200, registered.text
            assert http.get("/v1/lookup", params=by_name).json() == named
    finally:
        server.stop()
    assert named["config"] == before["config"]
    assert all(r["added"] == 1 and r["answers"] is False for r in kept.values()), kept
    with ServerStore(db_url) as store:
        exported = _exported(store, device_info, tmp_path / "after")
        named_after = resolve_device(store, device_info.name)  # as a restarted server would
    assert exported == exported_before
    assert named_after.fingerprint == device_info.fingerprint
    assert {name: r.status_code for name, r in statuses.items()} == {
        **{name: 422 for name in statuses}, "JSON nested 100,000 deep": 400, "17 MB body": 413,
        "Host rebound": 400,
    }  # fmt: skip
    assert all(r.text.count("\n") == 0 for r in statuses.values())
    assert "not one this server serves" in statuses["4e19-config space"].json()["message"]
    assert "Traceback" not in (tmp_path / "server.log").read_text()
