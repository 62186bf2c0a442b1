"""Schema migrations: a database of an older schema, with or without Alembic's version table, upgrades in place
keeping its rows; the migrated schema is exactly tables.py's; processes starting at once migrate once."""
from __future__ import annotations

import multiprocessing

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, select, text

from service.core.db import Database, alembic_config, head_revision
from service.core.tables import Base, Job, Model, Token, User


@pytest.fixture
def empty_url(database_url, tmp_path, request) -> str:
    """A database with no tables yet, on the backend `database_url` stands for."""
    if database_url is None:
        return f"sqlite:///{tmp_path / 'kiln.db'}"
    return request.getfixturevalue("postgres").create_database()


def revision_of(database: Database) -> str | None:
    with database.engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def build_revision_1(url: str, with_version_table: bool) -> Database:
    """The schema of revision 0001 (jobs without `options`) holding a user, a token, a model and two jobs. Without
    the version table it is what create_all made before Kiln used Alembic."""
    database = Database(url)
    with database.engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0001")
        if not with_version_table:
            connection.execute(text("DROP TABLE alembic_version"))
        connection.execute(text("INSERT INTO users (id, name, is_admin, created_at) "
                                "VALUES (1, 'alice', false, '2026-11-01 10:00:00')"))
        connection.execute(text("INSERT INTO tokens (user_id, token_hash, prefix, created_at) "
                                "VALUES (1, :hash, 'kiln_abcdefg', '2026-11-01 10:00:00')"), {"hash": "ab" * 32})
        connection.execute(text("INSERT INTO models (id, user_id, filename, sha256, size_bytes, summary, created_at) "
                                "VALUES ('m1', 1, 'tiny.onnx', :sha, 1234, :summary, '2026-11-01 10:01:00')"),
                           {"sha": "cd" * 32, "summary": '{"inputs": [{"name": "x"}]}'})
        for job_id, status in (("j1", "succeeded"), ("j2", "queued")):
            connection.execute(text(
                "INSERT INTO jobs (id, user_id, model_id, target, opt_level, tuning, input_shapes, status, stage, "
                "progress, attempts, created_at, updated_at) VALUES (:id, 1, 'm1', 'x86-64-v3', 2, "
                "'{\"trials\": 8}', '{}', :status, :status, 1.0, 1, '2026-11-01 10:02:00', '2026-11-01 10:03:00')"),
                {"id": job_id, "status": status})
    assert "options" not in {column["name"] for column in inspect(database.engine).get_columns("jobs")}
    return database


@pytest.mark.parametrize("with_version_table", [True, False], ids=["alembic-0001", "pre-alembic"])
def test_an_old_database_upgrades_in_place_and_keeps_its_rows(empty_url, with_version_table):
    database = build_revision_1(empty_url, with_version_table)
    database.upgrade_schema()
    assert revision_of(database) == head_revision()
    with database.session() as db:
        assert db.scalar(select(User.name)) == "alice"
        assert db.scalar(select(Token.prefix)) == "kiln_abcdefg"
        model = db.get(Model, "m1")
        assert (model.filename, model.size_bytes, model.summary) == ("tiny.onnx", 1234, {"inputs": [{"name": "x"}]})
        jobs = {job.id: job for job in db.scalars(select(Job))}
        assert {job_id: (job.status, job.opt_level, job.tuning, job.options) for job_id, job in jobs.items()} == {
            "j1": ("succeeded", 2, {"trials": 8}, {}), "j2": ("queued", 2, {"trials": 8}, {})}
        db.add(Job(id="j3", user_id=1, model_id="m1", target="native", options={"validate": "warn", "tolerance": 0.01}))
        db.commit()
    with database.session() as db:
        assert db.get(Job, "j3").options == {"validate": "warn", "tolerance": 0.01}
    database.dispose()


def test_a_database_made_by_create_all_with_options_is_stamped_not_altered(empty_url):
    database = Database(empty_url)
    Base.metadata.create_all(database.engine)
    database.upgrade_schema()
    assert revision_of(database) == head_revision()
    database.dispose()


def test_the_migrated_schema_is_exactly_the_tables_of_the_code(empty_url):
    """A column added to tables.py without its migration fails here (not on a user's upgraded database)."""
    database = Database(empty_url)
    database.upgrade_schema()
    with database.engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
    database.dispose()


def _upgrade(url: str) -> None:
    Database(url).upgrade_schema()


def test_processes_starting_together_migrate_once(empty_url):
    """The API and every worker upgrade at startup: the first migrates, the others wait and find it done."""
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_upgrade, args=(empty_url,)) for _ in range(4)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [process.exitcode for process in processes] == [0] * 4
    database = Database(empty_url)
    assert revision_of(database) == head_revision()
    database.dispose()
