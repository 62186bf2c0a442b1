"""The schema's revisions, oldest first (0001 is the schema Kiln had before it used Alembic)."""
