"""What the API and the workers share: settings, database, tables, job states, storage, queue routing, Celery config."""
