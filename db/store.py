"""The only way octune reads and writes its database, so every caller gets a migrated schema
and one-line errors instead of SQLAlchemy tracebacks: a ``Store`` is the connection
(``engine``) with what a tuning run writes (``recording``), what the measurements answer
(``queries``) and the networks tuned (``networks``).
"""

from __future__ import annotations

from octune.db.networks import NetworkRecords
from octune.db.queries import Queries
from octune.db.recording import Recording


class Store(Recording, Queries, NetworkRecords):
    """A tuning database: open it with a URL (``Store.default_url()``: the user's own)."""
