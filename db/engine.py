"""The database connection under every store: engine, schema migrations, one committed
transaction per call, and one-line errors instead of SQLAlchemy tracebacks.
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, Self, TypeVar

import platformdirs
import tenacity
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from filelock import FileLock, Timeout
from sqlalchemy import (
    Connection,
    create_engine,
    event,
    make_url,
    select,
    text,
)
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from octune.core.errors import StoreError
from octune.db.models import (
    Device,
    KernelVersion,
    WorkloadRow,
)

ENV_VAR = "OCTUNE_DATABASE_URL"
#: Seconds a SQLite writer waits for another's lock before giving up (Python's default is 5,
#: which ended tuning runs while an import or a server held the lock).
BUSY_TIMEOUT_ENV_VAR = "OCTUNE_DB_BUSY_TIMEOUT"
DEFAULT_BUSY_TIMEOUT_S = 120.0
# Any constant will do: it names octune's migration lock among PostgreSQL's advisory locks.
_PG_MIGRATION_LOCK = 0x6F6374756E65
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_WHERE = f"pass a writable path or another URL with --db or {ENV_VAR}"

_Row = TypeVar("_Row", Device, KernelVersion, WorkloadRow)


def alembic_config(connection: Connection | None = None, url: str | None = None) -> Config:
    """An alembic config without alembic.ini, also for writing new revisions:
    ``command.revision(alembic_config(url="sqlite:///dev.db"), autogenerate=True, message=...)``.
    """
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["connection"] = connection
    return config


class Database:
    """A migrated database; each write is its own committed transaction, so a run that is
    killed keeps everything measured before it died. The store's parts (``recording``,
    ``queries``, the job queue, the server's tables) are mixins over it.
    """

    def __init__(self, url: str) -> None:
        self.url = _mask(url)
        try:
            is_sqlite = make_url(url).get_backend_name() == "sqlite"
            connect_args = {"timeout": busy_timeout()} if is_sqlite else {}
            self._engine = create_engine(url, connect_args=connect_args)
        except ImportError as error:
            raise StoreError(
                f"cannot open database {self.url}: missing driver ({error}); install it "
                f"or pass another URL with --db or {ENV_VAR}"
            ) from error
        except (SQLAlchemyError, ValueError) as error:
            raise StoreError(
                f"cannot open database {self.url}: not a valid database URL ({_reason(error)}); "
                f"pass one like sqlite:////path/to/octune.db with --db or {ENV_VAR}"
            ) from error
        self.url = self._engine.url.render_as_string(hide_password=True)
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)
        try:
            if is_sqlite:
                self._prepare_sqlite()
            self._migrate()
        except (CommandError, Timeout) as error:
            self._engine.dispose()
            raise StoreError(
                f"cannot migrate database {self.url}: {_reason(error)}; it was probably written "
                "by a newer octune (upgrade octune), or another process holds its migration "
                "lock: pass another database or try again"
            ) from error
        except (SQLAlchemyError, OSError) as error:
            self._engine.dispose()
            fix = _WHERE
            if not is_sqlite:
                fix = f"check that the server is up and the credentials are right, or {fix}"
            raise StoreError(f"cannot open database {self.url}: {_reason(error)}; {fix}") from error

    def _migrate(self) -> None:
        """Bring the schema to head, one process at a time: tuners, importers and servers
        that open a new database together would otherwise all create its tables.
        """
        head = ScriptDirectory.from_config(alembic_config()).get_current_head()
        with self._engine.connect() as connection:
            if MigrationContext.configure(connection).get_current_revision() == head:
                return
        with self._migration_lock(), self._engine.begin() as connection:
            if self._engine.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                                   {"key": _PG_MIGRATION_LOCK})  # fmt: skip
            command.upgrade(alembic_config(connection), "head")

    def _migration_lock(self) -> AbstractContextManager[object]:
        """A file lock beside a SQLite file; PostgreSQL locks in the transaction itself."""
        database = self._engine.url.database
        if self._engine.dialect.name != "sqlite" or not database or database == ":memory:":
            return nullcontext()
        path = Path(database).expanduser()
        return FileLock(path.with_name(f"{path.name}.migrate-lock"), timeout=busy_timeout())

    def _prepare_sqlite(self) -> None:
        """WAL lets the server read while a tuning run writes; SQLite enforces foreign keys
        only when asked, per connection.
        """
        database = self._engine.url.database
        if database and database != ":memory:" and not self._engine.url.query.get("uri"):
            parent = Path(database).expanduser().parent
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except FileExistsError:  # Python's words for "a file is in the way" mislead
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(parent)) from None

        timeout = busy_timeout()

        @event.listens_for(self._engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            # Switching a new file to WAL needs it to itself and SQLite does not wait for
            # that (no busy handler), so processes opening one database together retry.
            wal = tenacity.Retrying(
                retry=tenacity.retry_if_exception(
                    lambda e: isinstance(e, sqlite3.OperationalError) and "locked" in str(e)
                ),
                wait=tenacity.wait_fixed(0.05),
                stop=tenacity.stop_after_delay(timeout),
                reraise=True,
            )
            wal(cursor.execute, "PRAGMA journal_mode=WAL")
            cursor.close()

    @staticmethod
    def default_url() -> str:
        """The user's own database, unless the environment points at a shared one."""
        if url := os.environ.get(ENV_VAR):
            return url
        path = Path(platformdirs.user_data_dir("octune")) / "octune.db"
        return f"sqlite:///{path.as_posix()}"

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @contextmanager
    def _session(self) -> Iterator[Session]:
        """One committed transaction; database failures become a one-line StoreError."""
        try:
            with self._sessions.begin() as session:
                yield session
        except SQLAlchemyError as error:
            raise StoreError(
                f"cannot use database {self.url}: {_reason(error)}; check that it is reachable, "
                f"writable and not full, or pass another with --db or {ENV_VAR}"
            ) from error

    def _get_or_create(self, model: type[_Row], lookup: Mapping[str, Any], **values: Any) -> int:
        """Select, else insert; a concurrent insert of the same row loses the race and selects."""
        query = select(model.id).filter_by(**lookup)
        with self._session() as session:
            found = session.scalar(query)
            if found is not None:
                return found
        try:
            with self._session() as session:
                row = model(**lookup, **values)
                session.add(row)
                session.flush()
                return row.id
        except StoreError as error:
            if not isinstance(error.__cause__, IntegrityError):
                raise
        with self._session() as session:
            return session.execute(query).scalar_one()


def busy_timeout() -> float:
    """Seconds a SQLite writer waits for a lock: $OCTUNE_DB_BUSY_TIMEOUT, or 120."""
    raw = os.environ.get(BUSY_TIMEOUT_ENV_VAR, "")
    try:
        seconds = float(raw) if raw else DEFAULT_BUSY_TIMEOUT_S
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 86400:
        raise StoreError(
            f"{BUSY_TIMEOUT_ENV_VAR}={raw!r} is not a number of seconds: set it to e.g. 120"
        )
    return seconds


def _reason(error: BaseException) -> str:
    """The driver's own words on one line, without SQLAlchemy's SQL echo and doc links."""
    if isinstance(error, DBAPIError) and error.orig is not None:
        error = error.orig
    text = " ".join(str(error).split()) or type(error).__name__
    return re.sub(r"\(Background on this error at: [^)]*\)", "", text).strip()


def _mask(url: str) -> str:
    """Hide a password even in a URL that SQLAlchemy cannot parse."""
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)
