"""Alembic environment for octune: there is no alembic.ini, ``octune.db.engine`` builds the config.

``Database`` passes an open connection in ``config.attributes["connection"]`` so migrating runs in
the transaction (and with the SQLite pragmas) of the engine that will use the database.
"""

from alembic import context
from sqlalchemy import Connection, create_engine, pool

from octune.db.models import Base, UtcDateTime

config = context.config
target_metadata = Base.metadata


def render_item(type_, obj, autogen_context):
    """Write UtcDateTime as a plain DateTime so migrations do not import the live models."""
    if type_ == "type" and isinstance(obj, UtcDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def configure(**kwargs) -> None:
    context.configure(
        target_metadata=target_metadata,
        render_as_batch=True,  # SQLite cannot ALTER most things; batch mode recreates tables
        compare_type=True,
        render_item=render_item,
        **kwargs,
    )


def run_offline() -> None:
    configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online(connection: Connection) -> None:
    configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
elif (connection := config.attributes.get("connection")) is not None:
    run_online(connection)
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url"), poolclass=pool.NullPool)
    with engine.connect() as connection:
        run_online(connection)
    engine.dispose()
