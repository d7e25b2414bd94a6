"""The options every command that reads a bundle shares (`import`, `lookup`, `run --bundle`);
typer only, so declaring them loads neither the bundle code nor `cryptography`.
"""

from __future__ import annotations

from typing import Annotated

import typer

PUBLIC_KEY_ENV_VAR = "OCTUNE_BUNDLE_PUBLIC_KEY"

PublicKey = Annotated[
    str | None,
    typer.Option(
        envvar=PUBLIC_KEY_ENV_VAR,
        show_envvar=False,
        help=f"Ed25519 public key (PEM file or text; ${PUBLIC_KEY_ENV_VAR}): read a bundle only "
        "if it verifies the bundle's signature; compile a kernel version octune does not ship "
        "(from the bundle or the --server) only if it verifies its signature",
    ),
]
