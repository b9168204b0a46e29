"""Stopping a worker (a deploy, a scale-down): its running jobs finish, or hand themselves back.

Platforms stop a process with SIGTERM, then SIGKILL after a grace period (Docker 10 s unless
`stop_grace_period` says more, Kubernetes `terminationGracePeriodSeconds`, Procfile platforms
their own). Workers run with REMAP_SIGTERM=SIGQUIT (config.workers), so SIGTERM starts Celery's
soft shutdown: the worker stops taking messages, gives its running jobs WORKER_SHUTDOWN_GRACE_S
(Celery's worker_soft_shutdown_timeout) to finish, then cancels what is left; messages received
but not begun go back to the broker. Without the remap SIGTERM is a warm shutdown that waits for
every job however long, and the platform's SIGKILL cuts the jobs mid-call.

Two changes to Celery's soft shutdown (5.5+), in `Worker.wait_for_soft_shutdown`:
- it ends as soon as no job runs, where Celery sleeps the whole timeout once any job runs (a
  deploy would wait 60 s for a job done in 5);
- at the end of the grace it does not cancel running jobs (a thread cannot be stopped, and
  Celery's threads pool refuses to try), it sets `handing_back`: a generation job then stops
  at its next LLM call, keeps what its calls cost and gives the rest of its reservation back,
  and goes back to the queue with no attempt charged (nurture.writing.generation). The worker
  waits for that, at most LLM_TIMEOUT_S + HAND_BACK_MARGIN_S (a call in progress finishes;
  a pacing wait, a database turn), then exits. A send is never handed back mid-way: it ends
  within EMAIL_TIMEOUT, well inside that wait.
So the platform's grace must cover WORKER_SHUTDOWN_GRACE_S + LLM_TIMEOUT_S + HAND_BACK_MARGIN_S
and a few seconds to exit: 120 s in docker-compose.yml for the defaults (60 + 30 + 10, and 20
to spare; README "Deploy").

Only the threads-pool workers (generation, reply, send) run so; the prefork ones (orchestrator,
dead letters) keep Celery's warm shutdown (config.workers.worker_environment): a prefork worker
learns that a job finished only in its main loop, which this wait holds, so it would wait out
the whole grace and then cut its task short. Their tasks are short and time-limited.
"""

from __future__ import annotations

import logging
import threading
import time

from celery.apps.worker import Worker as CeleryWorker
from celery.worker import state

log = logging.getLogger(__name__)

POLL_S = 0.1
# After the grace: beyond the call in progress, a job's pacing wait (at most 5 s) and database turns.
HAND_BACK_MARGIN_S = 10.0

# Set in a stopping worker's process once its grace is over: its generation jobs hand back.
handing_back = threading.Event()


class Worker(CeleryWorker):
    """The worker `celery worker` runs (config.celery.App.Worker)."""

    def wait_for_soft_shutdown(self) -> bool:
        """Called by Celery in the main process as SIGTERM arrives; True once no job runs."""
        from django.conf import settings

        grace = float(self.app.conf.worker_soft_shutdown_timeout)
        if grace <= 0 or not state.active_requests:
            return not state.active_requests
        running = len(state.active_requests)
        log.warning("worker stopping: %d jobs running, up to %.0f s to finish", running, grace)
        if _wait_for_jobs(seconds=grace):
            return True
        log.warning("worker stopping: grace over, %d jobs hand back", len(state.active_requests))
        handing_back.set()
        if _wait_for_jobs(seconds=settings.LLM_TIMEOUT_S + HAND_BACK_MARGIN_S):
            return True
        # Wedged (a call past its timeout, a database that does not answer): Celery cannot stop
        # a thread either; the platform's SIGKILL will, and the jobs come back through their leases.
        log.error("worker stopping: %d jobs did not hand back in time", len(state.active_requests))
        return False


def _wait_for_jobs(*, seconds: float) -> bool:
    """Wait until no job runs (True) or `seconds` pass (False)."""
    deadline = time.monotonic() + seconds
    while state.active_requests:
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True
