"""Networks `tune --model` read, kept with their layers (``models.NetworkRow``): what the
dashboard lists and reports on without the model file.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select

from octune.db.engine import Database
from octune.db.models import NetworkRow

#: Networks the dashboard lists; the newest first.
MAX_LISTED = 200


@dataclass(frozen=True)
class StoredNetwork:
    id: int
    name: str
    layers: list[dict[str, Any]]  # each: family, shape, dtype, count, nodes
    not_tuned: list[str]
    left_out: list[str]
    created_at: datetime


def _stored(row: NetworkRow) -> StoredNetwork:
    return StoredNetwork(
        row.id, row.name, list(row.layers), list(row.not_tuned), list(row.left_out),
        row.created_at,
    )  # fmt: skip


class NetworkRecords(Database):
    def save_network(
        self, name: str, layers: list[dict[str, Any]], not_tuned: list[str], left_out: list[str]
    ) -> int:
        """Keep a network's layers; the same network read again keeps its first row."""
        content = {"name": name, "layers": layers, "not_tuned": not_tuned, "left_out": left_out}
        digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
        return self._get_or_create(NetworkRow, {"digest": digest}, **content)

    def stored_networks(self) -> list[StoredNetwork]:
        newest = select(NetworkRow).order_by(NetworkRow.id.desc()).limit(MAX_LISTED)
        with self._session() as session:
            return [_stored(row) for row in session.scalars(newest)]

    def stored_network(self, network_id: int) -> StoredNetwork | None:
        with self._session() as session:
            row = session.get(NetworkRow, network_id)
            return None if row is None else _stored(row)
