"""jobs.options: a job's compile options beyond target, level, tuning and shapes (JSON, {} for existing jobs)."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # batch mode: SQLite cannot drop a column in place (downgrade), so Alembic copies the table there.
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(sa.Column("options", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.drop_column("options")
