#!/usr/bin/env bash
# The main job: install what is needed, then run the demo on the embedded defaults
# (SQLite file under var/, Redis on localhost). Pass --for SECONDS to stop by itself.
source "$(dirname "$0")/_bootstrap.sh"
ensure_redis
export DJANGO_DEBUG="${DJANGO_DEBUG:-1}"
exec python manage.py demo "$@"
