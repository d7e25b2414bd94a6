"""Issue 45, who may put code on a device: a client compiles a kernel version octune does not
ship only when the server that sent it signed it (``serve --sign-key``) and the user's public
key verifies the signature; a real server on a loopback socket.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from server_testing import LiveServer, Seeder

from octune.db.server_store import ServerStore
from octune.firmware.signing import SignatureError, create_key
from octune.kernels.gemm import gemm_workload
from octune.runtime.sources import ServerConfigs
from octune.tuner.device import DeviceInfo
from octune.tuner.errors import OctuneError
from octune.tuner.kernels import KernelSpec
from octune.tuner.space import ConfigTable

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
