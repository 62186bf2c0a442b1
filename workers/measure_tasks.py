"""The measuring side of remote tuning: `kiln.measure` runs one batch of candidates on this machine's device of
the batch's kind (natively, or under qemu-user) and returns the timings; a compile worker sent it to
`measure.<kind>` (workers.measure_dispatch)."""
from __future__ import annotations

import logging
from functools import lru_cache

from celery import states

from core.backends import measuring_device
from core.tune.measuring_device import MeasuringDevice

from .celery_app import app

log = logging.getLogger("kiln.worker.measure")


@lru_cache
def _device(kind: str) -> MeasuringDevice:
    return measuring_device(kind)  # kept: an emulated device keeps its reference outputs between batches


@app.task(name="kiln.measure", bind=True)
def measure_batch(self, batch: dict) -> dict:
    """Acknowledged late: a batch whose worker dies is delivered again. A delivery whose batch was already
    answered (the compile re-sent it under the same id, or the broker redelivered it) returns that answer."""
    done = app.AsyncResult(self.request.id)
    if done.state == states.SUCCESS:
        return done.result
    log.info("measuring batch %s: %d candidates", batch.get("batch_id"), len(batch.get("candidates", ())))
    answer = _device(batch["kind"]).measure(batch)
    return {**answer, "worker": self.request.hostname}
