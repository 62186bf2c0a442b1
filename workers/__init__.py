"""Celery workers: the app (`celery_app`) and its tasks (`tasks`, `compile_job`); queue routing is service.core.queues."""
