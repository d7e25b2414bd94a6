"""`octune serve`: the config service."""

from __future__ import annotations

import ipaddress
import socket
import sys
from typing import Annotated

import typer

from octune.cli.options import DbOption
from octune.core.errors import OctuneError


def serve(
    db: DbOption = None,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port to listen on", min=1, max=65535)] = 8000,
    require_read_token: Annotated[
        bool, typer.Option("--require-read-token", help="lookups need a read token too")
    ] = False,
    access_log: Annotated[bool, typer.Option(help="log every request line")] = True,
    predict: Annotated[
        bool, typer.Option(help="answer shapes far from all tuned ones with the cost model")
    ] = True,
    lease_seconds: Annotated[
        float,
        typer.Option(help="a farm agent's lease on a job lasts this long without a heartbeat"),
    ] = 60.0,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            help="a name clients reach the server by (the Host header); repeatable. Default: "
            "the loopback names on a loopback --host, any name otherwise"
        ),
    ] = None,
    sign_key: Annotated[
        str | None,
        typer.Option(
            envvar="OCTUNE_SIGN_KEY",
            show_envvar=False,
            help="Ed25519 private key (PEM file or text; $OCTUNE_SIGN_KEY) to sign the kernel "
            "versions served: clients with its public key compile those they do not ship",
        ),
    ] = None,
) -> None:
    """Run the config service: lookups, uploads and the dashboard over HTTP."""
    # Imported here: FastAPI and uvicorn take a while to load, and other commands need neither.
    import uvicorn

    from octune.db.server_store import ServerStore
    from octune.db.store import Store
    from octune.server.app import create_app
    from octune.server.settings import ServerSettings

    settings = ServerSettings(
        database_url=db or Store.default_url(),
        require_read_token=require_read_token,
        predict=predict,
        lease_s=lease_seconds,
        allowed_hosts=tuple(allowed_host or (LOOPBACK_NAMES if _loopback(host) else ("*",))),
        sign_key=sign_key,
    )
    if not _loopback(host) and not require_read_token:
        print(
            f"warning: serving on {host} with open reads: anyone who can reach it reads every "
            "tuned config and kernel source; pass --require-read-token to ask for a token",
            file=sys.stderr,
        )
    store = ServerStore(settings.database_url)
    _check_port(host, port)
    app = create_app(settings, store)  # a key that cannot sign fails here, in one line
    print(
        f"octune serving {store.url} on http://{host}:{port}/ (API docs at /docs)", file=sys.stderr
    )
    uvicorn.run(
        app,
        host=host,
        port=port,
        access_log=access_log,
        log_level="info",
        server_header=False,
    )


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _check_port(host: str, port: int) -> None:
    """Fail in one line, before uvicorn logs a traceback-like bind error."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as error:
        raise OctuneError(
            f"cannot listen on {host}:{port}: {error.strerror or error}; pass another --host "
            "or --port"
        ) from error
