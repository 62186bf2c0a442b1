"""The compiling side of remote tuning: batches of candidates go to the Celery queue `measure.<kind>`, one
`kiln.measure` task each, under the batch's id, and the answers come back through the result store."""
from __future__ import annotations

from typing import Optional

from celery.exceptions import TimeoutError as CeleryTimeout

from core.backends import Backend
from core.target import Target
from core.tune.remote import RemoteMeasurement
from service.core.celery import create_celery
from service.core.queues import device_kind, measure_queue
from service.core.settings import Settings


class CeleryBatchTransport:
    """Sends with the batch id as task id, so that a re-sent batch and a redelivered one share one result."""

    def __init__(self, settings: Settings, queue: str):
        self.app = create_celery(settings)  # its own connections: this runs in the forked compile child
        self.queue = queue

    def send(self, batch_id: str, batch: dict) -> None:
        self.app.send_task("kiln.measure", args=[batch], queue=self.queue, task_id=batch_id)

    def receive(self, batch_id: str, timeout_s: float) -> Optional[dict]:
        result = self.app.AsyncResult(batch_id)
        try:
            # Celery refuses to wait on a task from within one (a deadlock when both need the same worker slots);
            # the compile's slot is on the compile queue, the measurement runs on measure.<kind>'s workers.
            answer = result.get(timeout=max(timeout_s, 0.01), interval=0.1, propagate=False,
                                disable_sync_subtasks=False)
        except CeleryTimeout:
            return None
        if result.failed():  # the measuring worker could not take the batch (no such device there)
            return {"batch_id": batch_id, "error": f"the measuring worker failed: {answer}"}
        return answer

    def describe(self) -> str:
        return f"Celery queue {self.queue}"


def remote_measurement(settings: Settings, target: Target, backend: Backend, key: str) -> RemoteMeasurement:
    """How a tuning compile for `target` sends its candidates out; `key` (the job and its attempt) names its batches."""
    return RemoteMeasurement(CeleryBatchTransport(settings, measure_queue(target, backend)), device_kind(target), key,
                             batch_timeout_s=settings.measure_batch_timeout_s)
