"""What a running server is configured with; the CLI's flags fill it in."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr

MiB = 1 << 20


class ServerSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    database_url: str
    require_read_token: bool = False
    #: An upload of a whole overnight session (thousands of measurements) fits easily.
    max_body_bytes: int = Field(default=16 * MiB, ge=1024)
    #: Lookup tables are rebuilt when the database's data version moves; it is checked at most
    #: this often, so a tuner writing straight into the database shows up within this delay.
    cache_check_s: float = Field(default=1.0, ge=0)
    #: Answer shapes far from every tuned one with the cost model (``octune.lookup.predictor``),
    #: as ``octune export`` bundles do; retrained in the background when a device's
    #: measurements change, lookups answering from the previous model (or none) meanwhile.
    predict: bool = True
    #: How long a tuning farm agent's lease on a job lasts without a heartbeat; agents beat
    #: three times per lease, so a job whose agent died is taken over after this long.
    lease_s: float = Field(default=60.0, gt=0, le=86400)
    #: Host headers the server answers ("*": any). A server on a loopback address answers
    #: only its loopback names: a web page whose DNS name is rebound to 127.0.0.1 cannot
    #: read it from the user's browser (`octune serve` sets them).
    allowed_hosts: tuple[str, ...] = ("*",)
    #: The Ed25519 private key (a PEM file's path, or PEM) the server signs the kernel versions
    #: it sends with, so clients given its public key compile them (`run --server
    #: --public-key`); a client compiles no other version it does not ship.
    sign_key: SecretStr | None = None
