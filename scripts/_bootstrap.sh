# Sourced by scripts/demo.sh and scripts/test.sh: a venv from the requirements, and the
# services the product needs (PostgreSQL, Redis) answering on localhost.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
  echo "Python 3.11 or newer is needed (found: $("$PY" --version 2>&1)). Install python3.11 and re-run." >&2
  exit 1
fi

# (Re)install only when a requirements file changed since the last install.
# requirements-dev.txt includes requirements-demo.txt, which includes requirements.txt.
want="$(cat requirements.txt requirements-demo.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)"
if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.requirements-hash 2>/dev/null)" != "$want" ]; then
  echo "==> installing Python packages into .venv"
  "$PY" -m venv .venv
  .venv/bin/pip install --quiet --upgrade pip
  .venv/bin/pip install --quiet -r requirements-dev.txt
  echo "$want" > .venv/.requirements-hash
fi
export PATH="$ROOT/.venv/bin:$PATH"

ensure_redis() {
  if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then return; fi
  if ! command -v redis-server >/dev/null; then
    echo "Redis is not answering on 127.0.0.1:6379 and is not installed: apt-get install redis-server" >&2
    exit 1
  fi
  echo "==> starting redis-server on 127.0.0.1:6379"
  mkdir -p /tmp/outreach-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /tmp/outreach-redis --logfile /tmp/outreach-redis/redis.log
  for _ in $(seq 50); do redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && return; sleep 0.1; done
  echo "redis-server did not start; see /tmp/outreach-redis/redis.log" >&2
  exit 1
}

ensure_postgres() {
  # A DATABASE_URL you set is used as it is (a server of yours, with its own credentials).
  if [ -n "${DATABASE_URL:-}" ]; then return; fi
  if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
    if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
      echo "==> starting PostgreSQL"
      pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
      for _ in $(seq 100); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 0.1; done
    fi
  fi
  if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
    echo "PostgreSQL is not answering on 127.0.0.1:5432." >&2
    echo "Install and start it (apt-get install postgresql), or set DATABASE_URL to a server you have." >&2
    exit 1
  fi
  # The tests' default: user postgres without a password (trust authentication).
  if psql "postgresql://postgres@127.0.0.1:5432/postgres" -Atqc "select 1" >/dev/null 2>&1; then return; fi
  # Debian's default asks for a password over TCP and lets only the postgres OS user in
  # through the socket: create a local role for the tests once, through that socket.
  local as_postgres=""
  if [ "$(id -u)" -eq 0 ] && command -v runuser >/dev/null; then as_postgres="runuser -u postgres --"
  elif command -v sudo >/dev/null; then as_postgres="sudo -u postgres"; fi
  if [ -n "$as_postgres" ] && $as_postgres psql -Atqc "select 1" >/dev/null 2>&1; then
    if [ "$($as_postgres psql -Atqc "select 1 from pg_roles where rolname = 'outreach_test'")" != "1" ]; then
      echo "==> PostgreSQL wants a password: creating the local role outreach_test (password outreach_test) for the tests"
      # SUPERUSER: the tests create and drop their databases and stop their own connections.
      $as_postgres psql -qc "CREATE ROLE outreach_test LOGIN SUPERUSER PASSWORD 'outreach_test'"
    fi
    export DATABASE_URL="postgres://outreach_test:outreach_test@127.0.0.1:5432/outreach"
    echo "==> using DATABASE_URL=postgres://outreach_test:***@127.0.0.1:5432/outreach"
    return
  fi
  echo "PostgreSQL on 127.0.0.1:5432 refuses user postgres without a password." >&2
  echo "Set DATABASE_URL=postgres://USER:PASSWORD@127.0.0.1:5432/outreach for a role that may create databases." >&2
  exit 1
}

ensure_rabbitmq() {
  # RabbitMQ, for the pipeline tests' second pass on an AMQP broker; returns 1 if unavailable.
  if (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; then return 0; fi
  if command -v rabbitmq-server >/dev/null; then
    echo "==> starting rabbitmq-server"
    rabbitmq-server -detached >/dev/null 2>&1 || true
    for _ in $(seq 150); do (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null && return 0; sleep 0.2; done
  fi
  return 1
}

ensure_rabbitmq_vhost() {
  # A RabbitMQ virtual host of its own (the quorum pass: its queues cannot share names with the
  # classic ones), guest allowed in it: by rabbitmqctl (root or the rabbitmq user), else by the
  # management HTTP API when that plugin is on. Returns 1 if neither can make it.
  local vhost="$1"
  local vhosts
  if command -v rabbitmqctl >/dev/null && vhosts="$(rabbitmqctl -q list_vhosts 2>/dev/null)"; then
    grep -qxF "$vhost" <<<"$vhosts" || rabbitmqctl -q add_vhost "$vhost" >/dev/null || return 1
    rabbitmqctl -q set_permissions -p "$vhost" guest ".*" ".*" ".*" >/dev/null || return 1
    return 0
  fi
  local api="http://127.0.0.1:15672/api"
  if command -v curl >/dev/null && curl -fsS -u guest:guest "$api/overview" >/dev/null 2>&1; then
    curl -fsS -u guest:guest -X PUT "$api/vhosts/$vhost" >/dev/null || return 1
    curl -fsS -u guest:guest -X PUT -H "content-type: application/json" \
      -d '{"configure":".*","write":".*","read":".*"}' "$api/permissions/$vhost/guest" >/dev/null || return 1
    return 0
  fi
  return 1
}

use_test_clock() {
  # TEST_CLOCK="2026-12-31 23:59:30": run the tests, and every Python process they start
  # (workers, beat), with the wall clock moved to that UTC time and ticking on from there
  # (devtools/test_clock/sitecustomize.py, time-machine). One offset for every process;
  # monotonic clocks untouched; PostgreSQL, Redis and the browser keep the real time, as other
  # hosts would.
  [ -n "${TEST_CLOCK:-}" ] || return 0
  local target
  if ! target="$(date -u -d "$TEST_CLOCK" +%s 2>/dev/null)"; then
    echo "TEST_CLOCK=$TEST_CLOCK: not a date; give a UTC time such as '2026-12-31 23:59:30'." >&2
    exit 1
  fi
  export TEST_CLOCK_OFFSET_S="$((target - $(date -u +%s)))"
  export PYTHONPATH="$ROOT/devtools/test_clock${PYTHONPATH:+:$PYTHONPATH}"
  echo "==> the tests' clock starts at $TEST_CLOCK UTC (TEST_CLOCK_OFFSET_S=$TEST_CLOCK_OFFSET_S)"
}
