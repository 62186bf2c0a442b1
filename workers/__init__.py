"""Celery workers: the app (`celery_app`), its queues (`queues`) and tasks (`tasks`)."""
