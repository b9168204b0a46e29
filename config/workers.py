"""The worker recipe: the one definition of each queue's Celery worker (pool, concurrency, name).

`Procfile` and `docker-compose.yml` spell these command lines out (tests/config/test_compose.py
checks them against this table), and the local process group (devtools.processes: the demo,
end-to-end and fault tests, benchmarks) builds its workers from it. A new queue is one row.

Sizing the generation tier (Little's law): LLM calls in flight = call rate x call latency. A
3,000 requests/min key at a 3 s median latency needs 3000 / 60 x 3 = 150 calls in flight, and
each job makes its calls one after another, so it needs 150 jobs running at once. Prefork
spends a process (~130 MB) per job; the threads pool spends a thread (an idle socket wait, a
few hundred KB) per job, so one process runs 200 (150 plus a third for slow tails; the
measurements are in docs/benchmarks.md). Each job holds a PostgreSQL connection only while
it reads or writes, never during its LLM calls (nurture.writing.generation), so 200 threads do not
mean 200 connections.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from config.queues import Queue

Pool = Literal["prefork", "threads"]


@dataclass(frozen=True)
class WorkerRecipe:
    queue: Queue
    pool: Pool
    concurrency: int

    @property
    def name(self) -> str:
        """The Procfile process name and the Celery node name (`<name>@%h`)."""
        return self.queue.value

    @property
    def service(self) -> str:
        """The docker-compose service name."""
        return "worker-" + self.queue.value.replace("_", "-")

    def argv(self, *, concurrency: int | None = None, name: str | None = None) -> list[str]:
        """`celery -A config worker ...` for this queue; `concurrency`/`name` override for tests."""
        return [
            "celery",
            "-A",
            "config",
            "worker",
            "-Q",
            self.queue.value,
            "-n",
            f"{name or self.name}@%h",
            "--pool",
            self.pool,
            "--concurrency",
            str(concurrency or self.concurrency),
            "-E",
        ]

    def command(self) -> str:
        return " ".join(self.argv())


WORKERS: dict[Queue, WorkerRecipe] = {
    # One cycle at a time (the cycle also holds a cluster-wide lease); prefork so the task
    # time limits hold.
    Queue.ORCHESTRATOR: WorkerRecipe(Queue.ORCHESTRATOR, pool="prefork", concurrency=1),
    # Waits on the LLM for seconds per call: threads, sized by the module docstring's rule.
    Queue.GENERATION: WorkerRecipe(Queue.GENERATION, pool="threads", concurrency=200),
    # Replies' own lane (docs/dispatch.md): the same LLM work as generation, never queued behind
    # intros; replies are a small share of the work, bursts included.
    Queue.REPLY: WorkerRecipe(Queue.REPLY, pool="threads", concurrency=32),
    # SMTP and two short database writes per email: waiting on I/O, so threads as well. At 3,000
    # requests/min the tier sends ~17 emails/s; 4 prefork processes at ~0.2-0.6 s per send (the
    # SMTP dialogue, SENDING and SENT) topped out at ~7/s in bench/latency.py and cost 535 MB.
    # With a send budget each email also leaves a fixed 1 s after its grant (nurture.mail.sending
    # SEND_ALIGN_S), so a thread is held ~1.5-2 s a send: 20/s needs ~40 of them. 5,000 approvals
    # at 20/s (bench/send_burst.py): 16 threads 13.9/s, 48 threads 14.6/s (15.5/s steady, the
    # strict rate with the default margin being 15.8/s). A send holds its database connection
    # while it runs: PostgreSQL's max_connections must cover these 48 (config/settings.py).
    Queue.SEND: WorkerRecipe(Queue.SEND, pool="threads", concurrency=48),
    Queue.DEAD_LETTER: WorkerRecipe(Queue.DEAD_LETTER, pool="prefork", concurrency=1),
}


# Connections a process holds besides its pool's: beat's scheduler (django-celery-beat reads
# and writes its tables), and room for one-off commands run beside the stack (migrate during a
# deploy, createsuperuser, a shell, assign_leads).
BEAT_CONNECTIONS = 1
COMMAND_CONNECTIONS = 3


def worker_connections(recipe: WorkerRecipe, *, generation_db_connections: int) -> int:
    """The most PostgreSQL connections one process of this worker can hold at once
    (config.celery): a threads pool keeps them in a pool of GENERATION_DB_CONNECTIONS for the
    generation queue, its concurrency for any other (a send holds its connection for its whole
    job); a prefork worker one per child, plus one for its parent process."""
    if recipe.pool == "threads":
        return generation_db_connections if recipe.queue is Queue.GENERATION else recipe.concurrency
    return recipe.concurrency + 1


def database_connections_peak(*, generation_db_connections: int, web_processes: int, web_threads: int) -> int:
    """The most PostgreSQL connections the recipe can hold at once, one process of each worker:
    every worker's, web's (a connection per gunicorn thread), beat's and a few one-off
    commands'. PostgreSQL's max_connections needs this with a margin (README "Deploy"), and
    as much again for each further worker process or web replica."""
    workers = sum(
        worker_connections(recipe, generation_db_connections=generation_db_connections)
        for recipe in WORKERS.values()
    )
    return workers + web_processes * web_threads + BEAT_CONNECTIONS + COMMAND_CONNECTIONS
