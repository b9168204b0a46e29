"""gunicorn's settings for the web process (`gunicorn config.wsgi --config config/gunicorn.py`).

The web process serves the admin (operators, reviewers), the reply webhook, one-click
unsubscribes, `/metrics` and the health probes: short requests that wait on PostgreSQL, never
on the LLM. So: a few processes with a few threads each (gthread), sized by the environment:

- `WEB_CONCURRENCY` processes (default 2): one per core is plenty for this load; each holds
  its own copy of Django (~60 MB).
- `WEB_THREADS` threads per process (default 4): requests blocked on the database overlap.
  Each thread may hold one PostgreSQL connection, so the web tier needs at most
  WEB_CONCURRENCY x WEB_THREADS connections (8 by default).
- `PORT` (default 8000), bound on every interface: the platform's router or the TLS proxy in
  front reaches it; see DJANGO_SECURE_PROXY_SSL_HEADER in the README for that proxy.
"""

from __future__ import annotations

import os

bind = f"0.0.0.0:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("WEB_THREADS", "4"))
worker_class = "gthread"
# Under gthread this is not a request timeout: the worker's main thread reports to the arbiter
# while requests run on the other threads, so a slow request is never killed by it. It only
# restarts a worker process whose main loop has stopped for 30 s (a hang, a deadlock). What
# bounds a request is what it waits on (Redis's socket timeouts; PostgreSQL's statement_timeout
# if the deployment sets one, the product sets none) and the proxy in front, which answers 504
# and drops the client: the thread stays busy until the call returns, so WEB_CONCURRENCY x
# WEB_THREADS is the bound on requests stuck at once.
timeout = 30
graceful_timeout = 30
# Recycle a process now and then so slow leaks in third-party code cannot grow for ever.
max_requests = 2000
max_requests_jitter = 200
accesslog = "-"  # one line per request on stdout, next to the app's JSON logs
