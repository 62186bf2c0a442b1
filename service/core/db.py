"""Database access: one engine and session factory per process, shared by the API and the workers."""
from __future__ import annotations

import fcntl
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Iterator

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, create_engine, event, inspect, text
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
# The revisions a database made by create_all, before Kiln used Alembic, can be at (stamped, then upgraded).
PRE_ALEMBIC_REVISION = "0001"
PRE_ALEMBIC_WITH_OPTIONS = "0002"  # create_all after jobs.options was added
MIGRATION_LOCK_KEY = 0x6B696C6E    # "kiln": PostgreSQL advisory lock taken by whoever migrates


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration without an alembic.ini: our script directory, migrating `connection`."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    return config


@lru_cache
def head_revision() -> str:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


class Database:
    def __init__(self, url: str):
        sqlite = url.startswith("sqlite")
        # The API runs sync routes on a 40-thread pool: with fewer pooled connections, a burst of requests
        # (bench_load.py: 200 job submissions at once) timed out waiting for one (500s). SQLite serializes
        # writers anyway (busy_timeout), so the connections themselves are cheap.
        pool = {"pool_size": 10, "max_overflow": 50, "pool_timeout": 120} if sqlite else {}
        self.engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30} if sqlite else {},
                                    pool_pre_ping=not sqlite, **pool)
        if sqlite:
            # The API and worker processes share the file: WAL lets readers proceed while a job writes.
            @event.listens_for(self.engine, "connect")
            def _pragmas(connection, _record):
                cursor = connection.cursor()
                cursor.execute("PRAGMA journal_mode=WAL")
                cursor.execute("PRAGMA busy_timeout=30000")
                # In WAL a commit then writes the log without an fsync (checkpoints still sync): a killed process
                # loses nothing, a power cut the last commits. Each job's creation waited on two fsyncs before.
                cursor.execute("PRAGMA synchronous=NORMAL")
                cursor.execute("PRAGMA foreign_keys=ON")
                cursor.close()
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    def upgrade_schema(self) -> None:
        """Migrate to the newest revision: an empty database gets every table, an older one (also one made
        before Kiln used Alembic) is upgraded in place. The API and each worker call it at startup, so
        one of them migrates while the others wait, then find the database at head."""
        with self._migration_lock(), self.engine.begin() as connection:
            if self.engine.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            current = MigrationContext.configure(connection).get_current_revision()
            if current == head_revision():
                return
            config = alembic_config(connection)
            if current is None and inspect(connection).has_table("jobs"):
                columns = {column["name"] for column in inspect(connection).get_columns("jobs")}
                command.stamp(config, PRE_ALEMBIC_WITH_OPTIONS if "options" in columns else PRE_ALEMBIC_REVISION)
            command.upgrade(config, "head")

    @contextmanager
    def _migration_lock(self) -> Iterator[None]:
        """SQLite has no advisory locks: processes sharing the file take a lock file beside it instead."""
        path = self.engine.url.database if self.engine.dialect.name == "sqlite" else None
        if not path or path == ":memory:":
            yield
            return
        with open(f"{path}.migrate.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self.sessions() as session:
            yield session

    def dispose(self) -> None:
        self.engine.dispose()
