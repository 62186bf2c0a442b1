"""Database access: one engine and session factory per process, shared by the API and the workers."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from sqlalchemy import create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from .tables import Base


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
                cursor.execute("PRAGMA foreign_keys=ON")
                cursor.close()
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    def create_tables(self) -> None:
        Base.metadata.create_all(self.engine)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self.sessions() as session:
            yield session

    def dispose(self) -> None:
        self.engine.dispose()
