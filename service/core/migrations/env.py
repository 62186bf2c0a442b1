"""Alembic's entry point: migrates the connection service/core/db.py hands over (or, from the `alembic`
command line, the database of the KILN_ settings)."""
from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from service.core.settings import get_settings
from service.core.tables import Base


def run(connection) -> None:
    # render_as_batch: SQLite alters a table by copying it, which Alembic's batch mode does.
    context.configure(connection=connection, target_metadata=Base.metadata,
                      render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    run(connection)
elif context.is_offline_mode():
    context.configure(url=get_settings().database, target_metadata=Base.metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = create_engine(get_settings().database)
    with engine.connect() as own_connection:
        run(own_connection)
    engine.dispose()
