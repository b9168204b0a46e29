"""The Celery app: queues from config.queues, settings from Django (CELERY_ namespace).

The periodic entries (the dispatch cycle, the alert checks, retention's prune and draft expiry)
are CELERY_BEAT_SCHEDULE in config/settings.py; django-celery-beat's DatabaseScheduler copies
them into its tables at start (operators may then pause one in admin). Nothing here reads
settings at import: importing `config` must not freeze them before a process (a bench, the
demo) has set its environment.
"""

from __future__ import annotations

import faulthandler
import os
import signal
from typing import Any, cast

from celery import Celery
from celery.signals import beat_init, setup_logging, worker_init, worker_process_init, worker_process_shutdown
from kombu.utils.objects import cached_property  # what Celery's own Worker property is

from config.memory import MallocTrimStep
from config.worker_presence import PresenceStep

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


class App(Celery):
    @cached_property
    def Worker(self) -> Any:  # Celery's name
        """`celery worker` runs config.shutdown's worker: its soft shutdown ends when the jobs do."""
        from config.shutdown import Worker  # imports Celery's worker: only where one starts

        return self.subclass_with_self(Worker)

    def prepare_config(self, c: Any) -> Any:
        """Celery's settings as Django's settings hold them when Celery loads them (its first
        look at its configuration), copied into a dict.

        Celery looks each name up by every spelling it knows (`CELERY_TASK_ACKS_LATE`,
        `task_acks_late`, the old names) in each of its maps. Read live from Django's settings,
        every name Django does not define (most of Celery's, which then take their defaults)
        failed a LazySettings attribute lookup per spelling: about 16 failed lookups, a quarter of
        the CPU of publishing a task (the dispatcher publishes hundreds a cycle) and more on every
        task a worker runs. Django's setting names are upper case, so those are all there is to copy.
        """
        source = super().prepare_config(c)
        return {key: source[key] for key in source if key.isupper()}


app = App("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.steps["worker"].add(PresenceStep)  # each worker says which queues it consumes (/metrics)
app.steps["worker"].add(MallocTrimStep)  # freed heap memory back to the system (config.memory)


@setup_logging.connect
def _django_logging(**_: object) -> None:
    # Workers and beat log through the project's LOGGING (structured lines), not Celery's own.
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)


@worker_init.connect
@worker_process_init.connect
def _stacks_on_sigusr2(**_: object) -> None:
    """`kill -USR2 <pid>` writes every thread's stack to the worker's log, from a worker and
    from each prefork child (registered again there: a child's signals are reset): what a stuck
    worker is doing, without a debugger (docs/operators.md). Faults and e2e tests send it to
    their workers before failing on a timeout (devtools.processes.ProcessGroup.stacks_dump)."""
    faulthandler.register(signal.SIGUSR2, all_threads=True)


# Tracing (config.tracing, off unless OTEL_EXPORTER_OTLP_ENDPOINT is set) starts in the process
# that runs the tasks, after it exists: its exporter's thread would not survive a fork.
_tracing_process = "worker"  # named at worker_init, inherited by prefork children


@worker_init.connect
def _tracing_worker(sender: Any, **_: object) -> None:  # a celery.worker.WorkController
    """A threads or solo worker runs its tasks in this process: traced from here. A prefork
    parent runs none; its children set tracing up as they start (below)."""
    from config.tracing import tracing_setup

    global _tracing_process
    queues = sorted(sender.app.amqp.queues.consume_from)
    _tracing_process = "-".join(["worker", *queues])
    if "prefork" not in str(getattr(sender.pool_cls, "__module__", sender.pool_cls)):
        tracing_setup(process=_tracing_process)


@worker_process_init.connect
def _tracing_prefork_child(**_: object) -> None:
    from config.tracing import tracing_setup

    tracing_setup(process=_tracing_process)


@worker_process_shutdown.connect
def _tracing_prefork_child_flush(**_: object) -> None:
    # A prefork child leaves without running atexit hooks: export its last spans first.
    from config.tracing import tracing_shutdown

    tracing_shutdown()


@beat_init.connect
def _tracing_beat(**_: object) -> None:
    # Beat's publishes start the dispatch cycles' traces.
    from config.tracing import tracing_setup

    tracing_setup(process="beat")


# Pooled connections unused this long are closed, one at a time (psycopg_pool's max_idle).
DATABASE_POOL_MAX_IDLE_S = 60.0


@worker_init.connect
def _threads_database_pool(sender: Any, **_: object) -> None:  # a celery.worker.WorkController
    """A threads-pool worker keeps its threads' PostgreSQL connections in one pool (Django's
    psycopg_pool support), set before anything connects. Without it each task starts a new
    backend: Celery's Django fixup closes a task's connections when it starts and ends, and a
    generation job also gives its connection back after each database turn (~6 a job).

    Pool size: GENERATION_DB_CONNECTIONS in a worker that runs only generation jobs (their
    database turns never use more at once, nurture.writing.generation; a larger pool would still grow
    past them, as psycopg_pool opens connections ahead of demand). Any other: the worker's
    concurrency, the most its threads can hold (a send holds its connection for its whole
    job). Prefork workers are left alone: a pool must not cross a fork.
    """
    from django.conf import settings
    from django.db import connections

    from config.queues import Queue

    pool_cls = sender.pool_cls  # the --pool name or class (resolved just after this signal)
    if "thread" not in str(getattr(pool_cls, "__module__", pool_cls)):
        return
    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.postgresql":  # the demo's SQLite: nothing to pool
        return
    queues = set(sender.app.amqp.queues.consume_from)
    if queues and queues <= {Queue.GENERATION.value}:
        size = settings.GENERATION_DB_CONNECTIONS
    else:
        concurrency = sender.concurrency
        size = concurrency if isinstance(concurrency, int) and concurrency > 0 else (os.cpu_count() or 1)
    connections.close_all()  # none opened outside the pool: it must put back only its own
    db["CONN_MAX_AGE"] = 0  # the pool keeps connections; Django refuses both at once
    options = cast(dict[str, object], db["OPTIONS"])  # always there (config.env.database_from_url)
    options["pool"] = {
        "min_size": 0,
        "max_size": size,
        "max_idle": DATABASE_POOL_MAX_IDLE_S,
        "name": "worker",
    }
    pool = cast(Any, connections["default"]).pool  # built here (not opened) from OPTIONS["pool"]
    if pool is not None:
        sweep_on_failed_check(pool)


def sweep_on_failed_check(pool: Any) -> None:
    """Make the check a pool runs on each connection before handing it out sweep the whole
    pool when it fails.

    One dead connection means the server dropped its clients (a failover, a restart, a proxy, an
    operator's pg_terminate_backend), so the others idle in the pool are dead too. psycopg_pool
    alone checks them one per try and doubles its wait between tries (1, 2, 4, 8, 16 s): with
    five dead ones a job waits past the pool's 30 s timeout and fails, though the server is up.
    Sweeping replaces every broken idle connection at once (psycopg_pool's `check()`), so the
    next try, one short wait later, is given a live one."""
    from psycopg_pool import ConnectionPool

    def check(conn: Any) -> None:
        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            pool.check()
            raise

    # Django passes psycopg_pool's own check (CONN_HEALTH_CHECKS) and takes no other.
    pool._check = check


# Connected last: the process's other start-up handlers (tracing, the database pool) have run.
@worker_init.connect
@worker_process_init.connect
def _collector_settled(**_: object) -> None:
    """The start-up heap frozen out of the garbage collector's scans (config.collector)."""
    from config.collector import collector_settle

    collector_settle()
