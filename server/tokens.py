"""API tokens: made once, shown once, stored as a SHA-256 only.

A token carries 256 random bits, so a plain SHA-256 is enough to make the stored hash useless
to a thief (no slow password hash needed), and checking a token stays one indexed query.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Literal, cast

from octune.core.errors import OctuneError
from octune.db.models import utcnow
from octune.db.server_store import ServerStore

PREFIX = "oct_"
#: read: lookups; write: uploads and jobs, stored but answering nothing; trusted: a write token
#: whose measurements answer lookups and exports (``octune.db.queries.answering``).
Scope = Literal["read", "write", "trusted"]


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(
    store: ServerStore, name: str, scope: Scope, expires_in: timedelta | None = None
) -> str:
    """Store a new token's hash and return the token: the only time it exists in clear."""
    token = PREFIX + secrets.token_urlsafe(32)
    expires_at = None if expires_in is None else utcnow() + expires_in
    store.add_token(name, scope, token_hash(token), expires_at)
    return token


def rotate_token(store: ServerStore, name: str, expires_in: timedelta | None = None) -> str:
    """A new token in place of the active one named ``name``: the same scope, and the same
    lifetime unless ``expires_in`` says another; the old one is revoked first.
    """
    old = store.active_token(name)
    if old is None:
        raise OctuneError(f"no active token named '{name}': `octune token list` shows them")
    if expires_in is None and old.expires_at is not None:
        expires_in = old.expires_at - old.created_at
    store.revoke_token(name)
    return create_token(store, name, cast(Scope, old.scope), expires_in)
