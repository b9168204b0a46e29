"""A worker's PostgreSQL pool after the server dropped every client (a failover, a restart, a
proxy): the next job must get a live connection at once, not walk the dead ones one doubling
wait at a time past the pool's timeout (issue 24: jobs dead-lettered after dropped connections).
Real PostgreSQL and psycopg_pool, set up as config.celery sets up a worker's pool."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection
from psycopg_pool import ConnectionPool

from config.celery import sweep_on_failed_check

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_pool_whose_connections_were_all_dropped_hands_out_a_live_one() -> None:
    # given a worker's pool holding eight idle connections
    params = connection.get_connection_params()
    dsn = f"host={params['host']} port={params['port']} user={params['user']} dbname={params['dbname']}"
    pool = ConnectionPool(
        f"{dsn} application_name=dropped-pool",
        min_size=8,
        max_size=8,
        timeout=10,
        check=ConnectionPool.check_connection,  # as Django builds it (CONN_HEALTH_CHECKS)
        open=True,
    )
    sweep_on_failed_check(pool)
    try:
        pool.wait(timeout=10)
        # when the server terminates every one of them
        with psycopg.connect(dsn, autocommit=True) as admin:
            row = admin.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
                "WHERE application_name = 'dropped-pool'"
            ).fetchone()
        assert row == (8,)
        # then the next job is given a live connection within the pool's timeout (psycopg_pool
        # alone checks the dead ones one per try, waiting 1 + 2 + 4 + 8 s: past 10 s)
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        pool.close()
