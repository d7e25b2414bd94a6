"""Who may call what: write endpoints need a write (or trusted) token; reads need a token
of any scope only when the server runs with --require-read-token. Tokens travel in the
Authorization header, never in a URL, so access logs cannot record them; a browser that signed
in at /login sends its token in an HttpOnly cookie instead, which reads accept and writes never
do (a cookie rides along with any page's request: a write must be asked for explicitly).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from octune.db.server_store import ServerStore
from octune.db.tokens import TokenRecord
from octune.server.tokens import Scope, token_hash

_bearer = HTTPBearer(auto_error=False, description="a token from `octune token create`")
#: The cookie /login sets for a browser's reads of the dashboard.
COOKIE = "octune_token"


def _authorize(
    request: Request, credentials: HTTPAuthorizationCredentials | None, scope: Scope
) -> TokenRecord:
    if credentials is None:
        raise HTTPException(
            401,
            f"this endpoint needs a {scope} token: send 'Authorization: Bearer <token>' "
            "(make one with `octune token create`)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    store: ServerStore = request.app.state.store
    record = store.token(token_hash(credentials.credentials))
    if record is None:
        raise HTTPException(
            401, "unknown token: check it, or make one with `octune token create`",
            headers={"WWW-Authenticate": "Bearer"},
        )  # fmt: skip
    if scope == "write" and record.scope == "read":
        raise HTTPException(
            403, f"token '{record.name}' is read-only: uploads need `--scope write`"
        )
    return record


def require_write(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> TokenRecord:
    return _authorize(request, credentials, "write")


def require_read(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> TokenRecord:
    """Added to the read routes only when the server runs with --require-read-token, so the
    OpenAPI spec says exactly which operations need a token. The header, else the cookie.
    """
    if credentials is None and (cookie := request.cookies.get(COOKIE)):
        credentials = HTTPAuthorizationCredentials(scheme="Bearer", credentials=cookie)
    return _authorize(request, credentials, "read")


def known_token(request: Request, token: str) -> TokenRecord | None:
    """The stored token ``token`` is, if any (any scope reads)."""
    store: ServerStore = request.app.state.store
    return store.token(token_hash(token))
