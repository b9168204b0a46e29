#!/usr/bin/env bash
# The test command: lint, types, migrations check, then the whole pytest suite against real
# PostgreSQL and Redis (started here if installed but not running).
source "$(dirname "$0")/_bootstrap.sh"
ensure_redis
ensure_postgres
"$(dirname "$0")/ensure_chromium.sh"  # the browser test drives Debian's Chromium

echo "==> ruff"
ruff check .
ruff format --check .
echo "==> mypy"
mypy .
echo "==> migrations are up to date"
DJANGO_SETTINGS_MODULE=config.test_settings python manage.py makemigrations --check --dry-run
echo "==> pytest"
python -m pytest "$@"
