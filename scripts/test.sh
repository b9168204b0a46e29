#!/usr/bin/env bash
# The test command: lint, types, import contracts, migrations check, the Prometheus rules, then the whole pytest suite against real
# PostgreSQL and Redis (started here if installed but not running; in two lanes at once), then the pipeline tests
# again with RabbitMQ as the Celery broker, and a few of them on quorum queues (a vhost of
# their own). Arguments go to pytest and skip those RabbitMQ passes.
source "$(dirname "$0")/_bootstrap.sh"
ensure_redis
ensure_postgres
"$(dirname "$0")/ensure_chromium.sh"  # the browser test drives Debian's Chromium
PROMTOOL="$("$(dirname "$0")/ensure_promtool.sh")"  # checks the shipped Prometheus rules

echo "==> ruff"
ruff check .
ruff format --check .
echo "==> mypy"
mypy .
echo "==> import contracts (pyproject.toml: layers, the workers' door, no cycles)"
lint-imports --no-cache
echo "==> migrations are up to date"
DJANGO_SETTINGS_MODULE=config.test_settings python manage.py makemigrations --check --dry-run
echo "==> promtool: the alert rules load, and their unit tests (every alert firing and silent) pass"
"$PROMTOOL" check rules docs/prometheus/alerts.yml
"$PROMTOOL" test rules tests/prometheus/alerts_test.yml
use_test_clock
if [ $# -gt 0 ]; then
  echo "==> pytest $* (in random order: pytest-randomly; -p no:randomly for the file order)"
  python -m pytest --durations=30 "$@"
else
  # Two lanes at once, each with its own test database and Redis database (TEST_DB_NAME,
  # REDIS_URL: config/test_settings.py): the tests that start real workers (tests/e2e,
  # tests/faults) beside all the rest. They spend most of their time waiting on their workers,
  # so two lanes take about half the time of one on two cores. Random order in each.
  workers_lane_log="$(mktemp)"
  echo "==> pytest, two lanes: tests/e2e + tests/faults (database ${TEST_DB_NAME:-test_outreach}_workers, Redis db 14), and the rest"
  TEST_DB_NAME="${TEST_DB_NAME:-test_outreach}_workers" REDIS_URL="${TEST_WORKERS_REDIS_URL:-redis://127.0.0.1:6379/14}" \
    python -m pytest --durations=20 -p no:cacheprovider tests/e2e tests/faults > "$workers_lane_log" 2>&1 &
  workers_lane=$!
  rest_rc=0
  python -m pytest --durations=20 --ignore=tests/e2e --ignore=tests/faults || rest_rc=$?
  workers_rc=0
  wait "$workers_lane" || workers_rc=$?
  echo "==> the workers lane (tests/e2e, tests/faults)"
  cat "$workers_lane_log"
  rm -f "$workers_lane_log"
  if [ "$rest_rc" -ne 0 ] || [ "$workers_rc" -ne 0 ]; then
    echo "pytest failed: the rest exited $rest_rc, the workers lane $workers_rc" >&2
    exit 1
  fi
fi

if [ $# -eq 0 ]; then
  quorum_vhost="${TEST_AMQP_QUORUM_VHOST:-outreach_test_quorum}"
  if ensure_rabbitmq; then
    echo "==> the pipeline tests again, RabbitMQ as the broker (CELERY_BROKER_URL=amqp://...)"
    CELERY_BROKER_URL="${TEST_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672//}" \
      python -m pytest tests/e2e/test_pipeline_workers.py tests/e2e/test_reply_lane.py -p no:cacheprovider
    if ensure_rabbitmq_vhost "$quorum_vhost"; then
      # Short on purpose: the dispatch-to-send path and a countdown on the orchestrator queue
      # (native delayed delivery: it must not hold up the cycles), not the whole pipeline again.
      echo "==> on quorum queues (CELERY_QUEUE_TYPE=quorum, vhost $quorum_vhost)"
      CELERY_BROKER_URL="amqp://guest:guest@127.0.0.1:5672/$quorum_vhost" CELERY_QUEUE_TYPE=quorum \
        python -m pytest tests/e2e/test_delayed_tasks.py \
        "tests/e2e/test_pipeline_workers.py::test_beat_dispatches_autonomous_and_approved_work_through_real_workers" \
        -p no:cacheprovider
    elif [ "${CI:-}" = "true" ]; then
      echo "Cannot create RabbitMQ vhost $quorum_vhost (rabbitmqctl or the management API): CI runs the quorum pass too." >&2
      exit 1
    else
      echo "==> no rabbitmqctl or management API to create vhost $quorum_vhost: skipped the quorum pass"
    fi
  elif [ "${CI:-}" = "true" ]; then
    echo "RabbitMQ is not answering on 127.0.0.1:5672: CI runs the pipeline tests on it too." >&2
    exit 1
  else
    echo "==> RabbitMQ not available (apt-get install rabbitmq-server): skipped the pipeline tests on it"
  fi
fi
