"""API tokens as the database keeps them (``models.ApiToken``): only their SHA-256, their scope
and their life: created, last used, expiring, revoked. A revoked or expired token is refused
on its next request, since every request looks its token up here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, or_, select, update

from octune.core.errors import OctuneError
from octune.db.engine import Database
from octune.db.models import TRUSTED_SCOPE, ApiToken, utcnow

#: How stale a token's ``last_used_at`` may be: a request writes it at most this often.
LAST_USED_EVERY = timedelta(minutes=1)


@dataclass(frozen=True)
class TokenRecord:
    id: int
    name: str
    scope: str

    @property
    def answers(self) -> bool:
        """Whether what this token uploads may answer lookups (``store.answering``)."""
        return self.scope == TRUSTED_SCOPE


@dataclass(frozen=True)
class TokenInfo:
    """A token as `octune token list` shows it: never its secret, nor its hash."""

    name: str
    scope: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None

    @property
    def state(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= utcnow():
            return "expired"
        return "active"


def _active(now: datetime) -> tuple[ColumnElement[bool], ...]:
    return (
        ApiToken.revoked_at.is_(None),
        or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > now),
    )


class TokenRecords(Database):
    def add_token(
        self, name: str, scope: str, sha256: str, expires_at: datetime | None = None
    ) -> int:
        """A new token; one-line error where an active token has the name already (`revoke`
        and `rotate` name tokens by it).
        """
        now = utcnow()
        with self._session() as session:
            taken = session.scalar(select(ApiToken.id).where(ApiToken.name == name, *_active(now)))
            if taken is not None:
                raise OctuneError(
                    f"a token named '{name}' is active: rotate it (`octune token rotate {name}`), "
                    "revoke it, or pick another --name"
                )
            row = ApiToken(name=name, scope=scope, sha256=sha256, expires_at=expires_at)
            session.add(row)
            session.flush()
            return row.id

    def token(self, sha256: str) -> TokenRecord | None:
        """The active token with this hash; None for an unknown, revoked or expired one."""
        now = utcnow()
        with self._session() as session:
            row = session.scalar(select(ApiToken).where(ApiToken.sha256 == sha256, *_active(now)))
            if row is None:
                return None
            if row.last_used_at is None or now - row.last_used_at > LAST_USED_EVERY:
                row.last_used_at = now
            return TokenRecord(row.id, row.name, row.scope)

    def tokens(self) -> list[TokenInfo]:
        """Every token, active ones first, then by name."""
        with self._session() as session:
            rows = session.scalars(select(ApiToken).order_by(ApiToken.name, ApiToken.id)).all()
            found = [
                TokenInfo(r.name, r.scope, r.created_at, r.expires_at, r.revoked_at,
                          r.last_used_at)
                for r in rows
            ]  # fmt: skip
        return sorted(found, key=lambda t: t.state != "active")

    def active_token(self, name: str) -> TokenInfo | None:
        return next((t for t in self.tokens() if t.name == name and t.state == "active"), None)

    def revoke_token(self, name: str) -> int:
        """Revoke every active token of this name; how many were."""
        now = utcnow()
        with self._session() as session:
            revoked = session.execute(
                update(ApiToken).where(ApiToken.name == name, *_active(now)).values(revoked_at=now)
            )
            return revoked.rowcount
