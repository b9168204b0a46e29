"""What every benchmark needs before it measures: scratch stores and a configured Django.

One home for the set-up the benches share (bench/compare.py, soak.py, dispatch.py,
assign_leads.py; budget.py needs only Redis and the figures). A bench is run as a file
(`python bench/x.py`), so it puts the repository on sys.path itself, in one line, before it
can import this module. Nothing here runs at import: importing a bench (a test does, to call
its figure functions) must not point this process at a scratch database.

    url = database_for(name="outreach_bench")
    django_start(env=django_env(database_url=url, redis_url=redis_for(db=11)))

Every bench has a smoke mode (`--smoke`: tiny sizes, seconds, the same code path; tests/bench
runs them in CI). A smoke run keeps to stores of its own (`smoke_stores`): its databases are
named with a per-process suffix and dropped at the end, and its Redis is a private
redis-server, so it never drops or empties what the test suite, a full bench or another smoke
run is using at the same time.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "var" / "bench"  # reports, charts and process logs of the benches
POSTGRES = "postgres://postgres@127.0.0.1:5432"  # local server, user postgres, trust auth


def _smoke_run() -> bool:
    """Whether this process runs inside smoke_stores (its suffix says so)."""
    return os.environ.get(SUFFIX, "").startswith("_smoke_")


def stack_log_level() -> str:
    """LOG_LEVEL of a bench's stack: WARNING in a full run (a line per transition would cost
    the figures CPU), INFO in a smoke run, whose logs are what a failure in CI shows."""
    return "INFO" if _smoke_run() else "WARNING"


def out_dir() -> Path:
    """Where a bench writes its reports, charts and process logs: var/bench, or var/bench/smoke
    in a smoke run, which must never overwrite (or delete the logs of) a full run's."""
    return OUT / "smoke" if _smoke_run() else OUT


# Set by smoke_stores (and inherited by a bench's workers, which ignore them): the suffix of
# every scratch database name, and the private redis-server that stands in for local Redis.
SUFFIX = "BENCH_SCRATCH_SUFFIX"
REDIS_SERVER = "BENCH_REDIS_SERVER"


def scratch_name(*, name: str) -> str:
    """`name` with this run's suffix (BENCH_SCRATCH_SUFFIX; a smoke run's is `_smoke_<pid>`)."""
    return name + os.environ.get(SUFFIX, "")


def scratch_database(*, name: str) -> str:
    """Drop and create the PostgreSQL database `name` (a bench's own, never a real one; with
    this run's suffix); its URL."""
    import psycopg

    name = scratch_name(name=name)
    with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as conn:
        # WITH (FORCE): a previous run killed half-way may still hold connections to it.
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {_migrated_template(conn)}")
    return f"{POSTGRES}/{name}"


TEMPLATE_PREFIX = "outreach_bench_tpl_"


def _migrated_template(conn: Any) -> str:
    """A database migrated to this checkout's schema, to copy: a copy takes a second where
    `migrate` on an empty database takes 10-40 s, and CI runs a dozen smokes.

    Named by a digest of every migration and of the pinned requirements (Django's and the
    packages' own migrations), so a schema change builds a new one (the two newest are kept). Built
    once under an advisory lock: smoke runs beside each other wait for the first to finish.
    """
    import hashlib
    import subprocess

    digest = hashlib.sha256()
    for path in sorted(ROOT.glob("*/migrations/*.py")) + sorted(ROOT.glob("requirements*.txt")):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    template = TEMPLATE_PREFIX + digest.hexdigest()[:16]
    conn.execute("SELECT pg_advisory_lock(hashtext('outreach_bench_template'))")
    try:
        query = "SELECT datname FROM pg_database WHERE starts_with(datname, %s) ORDER BY oid DESC"
        existing = [row[0] for row in conn.execute(query, [TEMPLATE_PREFIX])]
        if template not in existing:
            building = template + "_building"
            conn.execute(f"DROP DATABASE IF EXISTS {building} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {building}")
            env = django_env(database_url=f"{POSTGRES}/{building}", redis_url=redis_for(db=0))
            subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "-v0"], env=env, check=True)
            conn.execute(f"ALTER DATABASE {building} RENAME TO {template}")
            # Older schemas' templates: keep the two newest (another checkout on this machine
            # may be using one), drop the rest.
            kept = [name for name in existing if not name.endswith("_building")][:2]
            for stale in set(existing) - set(kept):
                conn.execute(f"DROP DATABASE IF EXISTS {stale} WITH (FORCE)")
    finally:
        conn.execute("SELECT pg_advisory_unlock(hashtext('outreach_bench_template'))")
    return template


def database_for(*, name: str) -> str:
    """BENCH_DATABASE_URL when it is set (a database of yours: migrated, never dropped), else
    the scratch database `name`, dropped and created."""
    return os.environ.get("BENCH_DATABASE_URL") or scratch_database(name=name)


def redis_for(*, db: int) -> str:
    """BENCH_REDIS_URL when it is set, else database `db` of local Redis (of the smoke run's
    private redis-server in a smoke run). django_start empties it."""
    server = os.environ.get(REDIS_SERVER, "redis://127.0.0.1:6379")
    return os.environ.get("BENCH_REDIS_URL") or f"{server}/{db}"


@contextmanager
def smoke_stores() -> Iterator[None]:
    """A smoke run's own stores, for the `with` block: scratch databases named `<name>_smoke_<pid>`
    and dropped at the end, and a private redis-server for every Redis database the bench names
    (redis_for). BENCH_DATABASE_URL and BENCH_REDIS_URL are ignored: a smoke run truncates and
    flushes, and must never do it to a database someone pointed a full run at. A run that fails
    in the block prints what its processes logged (smoke_logs_print)."""
    from devtools.processes import RedisServer

    for variable in ("BENCH_DATABASE_URL", "BENCH_REDIS_URL"):
        os.environ.pop(variable, None)
    os.environ[SUFFIX] = f"_smoke_{os.getpid()}"
    server = RedisServer().start()
    os.environ[REDIS_SERVER] = f"redis://127.0.0.1:{server.port}"
    try:
        yield
    except BaseException as exc:
        if not isinstance(exc, SystemExit) or exc.code not in (0, None):
            smoke_logs_print()
        raise
    finally:
        server.stop()
        _drop_suffixed(suffix=os.environ[SUFFIX])


def _drop_suffixed(*, suffix: str) -> None:
    """Drop every database this smoke run created (their names end with its suffix)."""
    import psycopg
    from django.conf import settings

    if settings.configured:  # this process's own connections first, if Django was set up
        from django.db import connections

        connections.close_all()
    with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as conn:
        names = conn.execute(
            "SELECT datname FROM pg_database WHERE right(datname, %s) = %s", [len(suffix), suffix]
        ).fetchall()
        for (name,) in names:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


SMOKE_HELP = "a few seconds on tiny sizes, own scratch stores; exit 1 when the run is broken (CI)"


def smoke_verdict(*, problems: list[str]) -> None:
    """End a smoke run: print what is wrong and what the processes logged, and exit 1 (CI
    fails), or say it passed."""
    if problems:
        print("smoke: FAIL: " + "; ".join(problems), flush=True)
        smoke_logs_print()
        raise SystemExit(1)
    print("smoke: OK", flush=True)


_STARTED = time.time()  # this process's start: the logs a smoke run wrote are the newer ones
_logs_printed = False
LOG_TAIL_LINES = 40


def smoke_logs_print() -> None:
    """Print to stderr, once, the last lines of every process log this run wrote (out_dir()):
    a failed smoke run in CI leaves nothing else to read, and a stack that did nothing shows
    why there (a worker that never became ready, a cycle that raised, no due task sent)."""
    global _logs_printed
    if _logs_printed:
        return
    _logs_printed = True
    logs = sorted(p for p in out_dir().rglob("*.log") if p.stat().st_mtime >= _STARTED)
    for log in logs:
        lines = log.read_text(errors="replace").splitlines()
        print(f"--- {log}: last {LOG_TAIL_LINES} of {len(lines)} lines", file=sys.stderr)
        print("\n".join(lines[-LOG_TAIL_LINES:]), file=sys.stderr, flush=True)


READY_TIMEOUT_S = 90.0  # smoke: from the workers' start (their boot, on a loaded machine) to the first work


def first_wait(*, ready: Callable[[], bool], what: str, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Wait until `ready()`, the stack's first `what` ("outreach sent"): a smoke run's clock starts
    there, as its workers' boot time varies with the machine's load. Print how long it took, or
    exit 1 after `timeout_s`."""
    started = time.monotonic()
    while not ready():
        if time.monotonic() - started > timeout_s:
            raise SystemExit(f"smoke: FAIL: no {what} {timeout_s:.0f} s after the workers started")
        time.sleep(0.5)
    print(f"  first {what} {time.monotonic() - started:.0f}s after the workers started", flush=True)


def django_env(*, database_url: str, redis_url: str, **settings: str) -> dict[str, str]:
    """This process's environment with demo settings (DJANGO_DEBUG=1: demo secrets, never
    production ones), the bench's database and Redis, and `settings` (variable -> value).
    For benches with no provider or mail server; the ones with the whole stack use
    devtools.processes.stack_env, which adds those."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_DEBUG": "1",
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        **settings,
    }


def _django_setup() -> None:
    """Set Django up in this process as the product's processes run: DEBUG off (the demo's
    DJANGO_DEBUG=1 lends a bench its secrets, but with it on every statement went through
    Django's debug cursor, which records it with its parameters: until 2026-12-06 the benches
    that run product code in their own process, bench/dispatch.py and bench/assign_leads.py,
    timed that too), and logging at WARNING (this process seeds and measures: a line per
    transition would bury its figures)."""
    import django
    from django.conf import settings

    django.setup()
    settings.DEBUG = False
    logging.getLogger().setLevel(logging.WARNING)


def django_start(*, env: Mapping[str, str]) -> None:
    """Point this process at `env` (its DATABASE_URL and REDIS_URL are the bench's scratch
    stores), set Django up (`_django_setup`), empty that Redis database and migrate the
    database."""
    os.environ.update(env)
    import redis

    _django_setup()
    from django.core.management import call_command

    redis.Redis.from_url(env["REDIS_URL"]).flushdb()
    call_command("migrate", verbosity=0)


def production_env(**settings: str) -> dict[str, str]:
    """What a Procfile process needs on top of devtools.processes.stack_env to run as in
    production (DJANGO_DEBUG=0: JSON logs, no demo defaults): the secrets that mode requires,
    made up per run (they guard nothing here), this venv's `celery` first on PATH, and
    `settings` (variable -> value) last."""
    return {
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": secrets.token_hex(32),
        "LLM_API_KEY": "sk-bench",
        "WEBHOOK_SECRET": secrets.token_hex(16),
        "FLOWER_BASIC_AUTH": f"bench:{secrets.token_hex(8)}",
        "PUBLIC_BASE_URL": "http://127.0.0.1:8000",
        "DEFAULT_FROM_EMAIL": "outreach@bench.example",
        "METRICS_TOKEN": secrets.token_hex(16),
        **settings,
    }


@contextmanager
def private_redis_django(*, db_name: str) -> Iterator[str]:
    """This process on the bench's database (BENCH_DATABASE_URL, else `db_name` on the local
    server: the bench creates it) and a private redis-server no other test or bench shares,
    Django set up (`_django_setup`). Yields that Redis's URL; stops the server at the end."""
    from devtools.processes import RedisServer

    os.environ.update(DJANGO_SETTINGS_MODULE="config.settings", DJANGO_DEBUG="1")
    os.environ["DATABASE_URL"] = (
        os.environ.get("BENCH_DATABASE_URL") or f"{POSTGRES}/{scratch_name(name=db_name)}"
    )
    redis_server = RedisServer().start()
    os.environ["REDIS_URL"] = redis_server.url
    try:
        _django_setup()
        yield redis_server.url
    finally:
        redis_server.stop()


def llm_sim_argv(*, port: int, rpm: int, tpm: int, **options: str | int | float) -> list[str]:
    """`manage.py llm_sim` (devtools.llm_sim) on `port`, the key's limits `rpm` and `tpm`, and
    `options` as its flags (`latency_median_ms=3000` -> `--latency-median-ms 3000`)."""
    argv = [sys.executable, "manage.py", "llm_sim", "--port", str(port), "--rpm", str(rpm), "--tpm", str(tpm)]
    for name, value in options.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    return argv


SEND_LINES = ("orchestrator", "send", "beat")  # the Procfile's lines approved drafts need: no generation


def send_lines_run(
    *, logs: str, sink: Any, redis_url: str, wait: Callable[[Any], list[str]], **settings: str
) -> list[str]:
    """The Procfile's orchestrator, send and beat lines, exactly as written, on this bench's
    database and `redis_url`, sending to `sink` (no LLM: approved drafts), with `settings`;
    `wait(workers)` runs meanwhile and returns the lines that died. Logs in out_dir()/`logs`;
    the lines and the sink are stopped at the end."""
    from devtools.processes import ProcessGroup, stack_env
    from devtools.procfile import procfile_argv

    log_dir = out_dir() / logs
    for old in log_dir.glob("*.log"):
        old.unlink()
    env = stack_env(
        llm_base_url="http://127.0.0.1:9/v1",  # unused: approved drafts make no LLM call
        smtp_port=sink.port,
        DATABASE_URL=os.environ["DATABASE_URL"],
        REDIS_URL=redis_url,
        DEFAULT_FROM_EMAIL="outreach@bench.example",
        PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",  # `celery` = this venv's
        **settings,
    )
    workers = ProcessGroup(log_dir=log_dir, env=env)
    try:
        for name in SEND_LINES:
            workers.start(name, procfile_argv(name))
        return wait(workers)
    finally:
        workers.stop()
        sink.stop()


def bench_lead(*, owner: Any, n: int | str, domain: str, first_name: str = "Pat") -> Any:
    """Lead `n` of `owner`, unsaved (for bulk_create): the one lead the benches seed."""
    from outreach.models import Lead

    return Lead(
        organization_id=owner.organization_id,
        owner=owner,
        email=f"lead{n}@{domain}",
        first_name=first_name,
        last_name=f"L{n}",
        company="Acme",
        title="CTO",
    )


def bench_intro(*, lead: Any, now: Any, **fields: Any) -> Any:
    """The intro of `lead`, due `now`, unsaved (for bulk_create), QUEUED unless `fields` say
    otherwise (a written draft: state, draft_subject, draft_body)."""
    from outreach.idempotency import intro_key
    from outreach.models import Outreach, State

    return Outreach(
        lead=lead,
        owner_id=lead.owner_id,
        kind=Outreach.Kind.INTRO,
        tier=Outreach.KIND_TIER[Outreach.Kind.INTRO],
        not_before=now,
        idempotency_key=intro_key(lead_id=lead.pk),
        state_changed_at=now,
        **{"state": State.QUEUED, **fields},
    )


# --- /proc: memory and CPU of a process and its descendants (soak, latency) -------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Tree:
    rss_kb: int  # the root's and every descendant's resident memory
    descendants: int  # a prefork pool's children, a shell's command
    cpu_s: float  # user + system CPU time so far, all of them


def process_trees(roots: Mapping[str, int]) -> dict[str, Tree]:
    """name -> the Tree of each root pid, from one pass over /proc."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = stat.rpartition(")")[2].split()  # the name may hold spaces: split after ")"
        children.setdefault(int(fields[1]), []).append(int(entry))
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime
    trees = {}
    for name, root in roots.items():
        rss, count, seconds, todo = 0, -1, 0.0, [root]
        while todo:
            pid = todo.pop()
            rss, count, seconds = rss + _rss_kb(pid), count + 1, seconds + cpu.get(pid, 0.0)
            todo += children.get(pid, [])
        trees[name] = Tree(rss_kb=rss, descendants=count, cpu_s=seconds)
    return trees


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
