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
  if pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then return; fi
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    echo "==> starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
    for _ in $(seq 100); do pg_isready -h 127.0.0.1 -p 5432 -q && return; sleep 0.1; done
  fi
  echo "PostgreSQL is not answering on 127.0.0.1:5432 (user postgres, trust auth)." >&2
  echo "Install and start it: apt-get install postgresql, or set DATABASE_URL to a server you have." >&2
  exit 1
}
