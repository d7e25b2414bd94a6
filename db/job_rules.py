"""How a farm job ends and who may end it: the rules ``JobQueue`` applies inside its
transactions (cancelling, finishing, taking back an expired lease, the trust a token carries).
"""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from octune.core.errors import OctuneError
from octune.db.models import (
    TRUSTED_SCOPE,
    ApiToken,
    FarmAgent,
    FarmJob,
    JobSession,
    JobSubmission,
    TuningSession,
    utcnow,
)

#: A job that is neither finished nor cancelled.
ACTIVE = ("queued", "running")


class QueueError(OctuneError):
    """A queue request that cannot be honoured; ``status`` is the HTTP status that says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def trusted(session: Session, token_id: int) -> bool:
    return session.scalar(select(ApiToken.scope).where(ApiToken.id == token_id)) == TRUSTED_SCOPE


def may_cancel(
    session: Session, submission: JobSubmission | None, token_id: int, what: str
) -> None:
    if (
        submission is not None
        and submission.token_id != token_id
        and not trusted(session, token_id)
    ):
        raise QueueError(
            403, f"{what} was submitted with another token: cancel it with that one, or a "
            "trusted token",
        )  # fmt: skip


def cancel(session: Session, job: FarmJob) -> None:
    if job.status in ACTIVE:
        end(session, job, "cancelled")


def end(session: Session, job: FarmJob, status: str) -> None:
    """The last holder stays named, so that a holder's repeated "completed" is recognised."""
    end_sessions(session, job)
    job.status, job.finished_at, job.lease_expires_at = status, utcnow(), None


def take_back(session: Session, job: FarmJob) -> str:
    """An expired lease of ``job``: an attempt counted, then ``failed`` (its last attempt, the
    job ended) or ``queued`` (the lease's sessions ended: it sends no more).
    """
    holder = session.get(FarmAgent, job.lease_agent_id)
    job.failures += 1
    job.reason = (
        f"the lease of agent '{holder.name if holder else '?'}' expired: it stopped "
        "heartbeating (killed, or its machine or device crashed)"
    )
    submission = session.get(JobSubmission, job.submission_id)
    if submission is not None and job.failures >= submission.max_attempts:
        end(session, job, "failed")
        return "failed"
    end_sessions(session, job)
    return "queued"


def end_sessions(session: Session, job: FarmJob) -> None:
    """Mark "interrupted" the job's sessions still "running", as its lease ends: no agent
    will send their last status (the holder was killed, or drops the job at its next call
    and is refused from then on), and without this they would look "running" for ever.
    """
    uploaded = select(JobSession.session_id).where(JobSession.job_id == job.id)
    session.execute(
        update(TuningSession)
        .where(TuningSession.id.in_(uploaded), TuningSession.status == "running")
        .values(status="interrupted", finished_at=utcnow())
    )
