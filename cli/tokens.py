"""`octune token create | list | revoke | rotate`: the config service's API tokens, made and
ended on the server's database. A token is shown once, when made; only its hash is kept.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from octune.cli.options import DbOption, JsonOption
from octune.core.console import console
from octune.core.errors import OctuneError

if TYPE_CHECKING:
    from octune.db.server_store import ServerStore

token_app = typer.Typer(
    help="Manage the server's API tokens.", no_args_is_help=True, rich_markup_mode=None
)


class TokenScope(StrEnum):
    read = "read"
    write = "write"
    trusted = "trusted"


NameArgument = Annotated[str, typer.Argument(help="the token's name, as `token list` shows it")]
ExpiresOption = Annotated[
    str | None,
    typer.Option(
        "--expires", help="refused after this long, e.g. 30d, 12h [default: never; rotate: "
        "the old token's lifetime]",
    ),
]  # fmt: skip


def _store(db: str | None) -> ServerStore:
    from octune.db.server_store import ServerStore
    from octune.db.store import Store

    return ServerStore(db or Store.default_url())


def _lifetime(text: str | None) -> timedelta | None:
    from octune.tuner.session import parse_duration

    return None if text is None else timedelta(seconds=parse_duration(text))


def _print_new(token: str, what: str) -> None:
    """The token alone on stdout (for a script to take), the note on stderr."""
    print(token)
    print(f"{what}; copy it now, it is not shown again", file=sys.stderr)


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Option(help="who or what uses the token, e.g. tuner-lab-3")],
    scope: Annotated[
        TokenScope,
        typer.Option(
            help="read: lookups; write: uploads and jobs, kept but answering no lookup; "
            "trusted: write, and its measurements answer lookups and exports"
        ),
    ] = TokenScope.read,
    expires: ExpiresOption = None,
    db: DbOption = None,
) -> None:
    """Make a token and print it once: only its hash is stored, it cannot be shown again."""
    from octune.server.tokens import create_token

    name = name.strip()
    if not name or len(name) > 255 or not name.isprintable():
        raise OctuneError("--name must be 1 to 255 printable characters, e.g. --name tuner-lab-3")
    lifetime = _lifetime(expires)
    with _store(db) as store:
        token = create_token(store, name, scope.value, lifetime)
    until = f", expires in {expires}" if expires else ""
    _print_new(token, f"{scope.value} token '{name}' created{until}")


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M")


@token_app.command("list")
def token_list(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Every token: name, scope, state, created, last used, expiry (never the token)."""
    with _store(db) as store:
        found = store.tokens()
    if as_json:
        rows = [{"name": t.name, "scope": t.scope, "state": t.state,
                 "created_at": t.created_at.isoformat(),
                 "last_used_at": t.last_used_at and t.last_used_at.isoformat(),
                 "expires_at": t.expires_at and t.expires_at.isoformat(),
                 "revoked_at": t.revoked_at and t.revoked_at.isoformat()}
                for t in found]  # fmt: skip
        print(json.dumps(rows, indent=2))
        return
    if not found:
        console.print("No token yet: `octune token create --name NAME --scope read`.")
        return
    table = Table("name", "scope", "state", "created", "last used", "expires")
    for t in found:
        table.add_row(t.name, t.scope, t.state, _when(t.created_at), _when(t.last_used_at),
                      _when(t.expires_at))  # fmt: skip
    console.print(table)


@token_app.command("revoke")
def token_revoke(name: NameArgument, db: DbOption = None) -> None:
    """Refuse the active token of this name from its next request on."""
    with _store(db) as store:
        revoked = store.revoke_token(name)
    if not revoked:
        raise OctuneError(f"no active token named '{name}': `octune token list` shows them")
    console.print(f"Revoked token '{name}': refused from its next request.")


@token_app.command("rotate")
def token_rotate(name: NameArgument, expires: ExpiresOption = None, db: DbOption = None) -> None:
    """Revoke the active token of this name and print a new one of the same scope."""
    from octune.server.tokens import rotate_token

    with _store(db) as store:
        token = rotate_token(store, name, _lifetime(expires))
    _print_new(token, f"token '{name}' rotated: the old one is refused from now on")
