"""API tokens: made once, shown once, stored as a SHA-256 only.

A token carries 256 random bits, so a plain SHA-256 is enough to make the stored hash useless
to a thief (no slow password hash needed), and checking a token stays one indexed query.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Literal

from octune.db.server_store import ServerStore

PREFIX = "oct_"
#: read: lookups; write: uploads and jobs, stored but answering nothing; trusted: a write token
#: whose measurements answer lookups and exports (``octune.db.queries.answering``).
Scope = Literal["read", "write", "trusted"]


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(store: ServerStore, name: str, scope: Scope) -> str:
    """Store a new token's hash and return the token: the only time it exists in clear."""
    token = PREFIX + secrets.token_urlsafe(32)
    store.add_token(name, scope, token_hash(token))
    return token
