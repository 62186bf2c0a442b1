"""Job life cycle, shared by the API and the workers: terminal states and guarded transitions.

Every transition is one conditional UPDATE, so a cancel from the API and a progress write from a
worker never overwrite each other.
"""
from __future__ import annotations

from typing import Iterable

from sqlalchemy import update
from sqlalchemy.orm import Session

from .tables import Job, utcnow

TERMINAL = ("succeeded", "failed", "cancelled")
ACTIVE = ("queued", "running")



def transition(db: Session, job_id: str, allowed_from: Iterable[str], *, attempt: int | None = None, **fields) -> bool:
    """Set `fields` on the job if its status is one of `allowed_from` (and, given `attempt`, the job is still that
    attempt's: a worker cut off and replaced by another cannot write into the new attempt); True if it was."""
    fields.setdefault("updated_at", utcnow())
    where = [Job.id == job_id, Job.status.in_(tuple(allowed_from))]
    if attempt is not None:
        where.append(Job.attempts == attempt)
    result = db.execute(update(Job).where(*where).values(**fields))
    db.commit()
    return result.rowcount == 1


def finish(db: Session, job_id: str, status: str, *, error: str | None = None, code: str | None = None,
           attempt: int | None = None) -> bool:
    progress = {"progress": 1.0} if status == "succeeded" else {}
    return transition(db, job_id, ACTIVE, attempt=attempt, status=status, stage=status, error=error, error_code=code,
                      finished_at=utcnow(), **progress)


def cancel(db: Session, job_id: str) -> bool:
    return finish(db, job_id, "cancelled", error="cancelled by the user", code="cancelled")
