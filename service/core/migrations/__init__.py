"""Alembic migrations of the service's database: env.py runs them, versions/ holds one file per revision."""
