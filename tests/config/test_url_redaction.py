"""Connection URLs in errors and logs: one redaction (config.env.url_redacted) for every form
we take (DATABASE_URL, REDIS_URL, BUDGET_REDIS_URL, CELERY_BROKER_URL), and start-up errors
that never show a password, however it is written."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import database_from_url, env_redis_url, env_url, url_redacted

# (url, what an error message or a log line may show): written out by hand.
REDACTED = [
    ("postgres://app:s3cret@db:5432/outreach", "postgres://app:***@db:5432/outreach"),
    (
        "postgresql://app:s3cret@db/outreach?sslmode=require",
        "postgresql://app:***@db/outreach?sslmode=require",
    ),
    ("postgres://app@db:5432/outreach", "postgres://app@db:5432/outreach"),  # no password
    ("postgres://db:5432/outreach", "postgres://db:5432/outreach"),  # no user either
    ("postgres://app:p%40ss%2Fw%23rd@db/outreach", "postgres://app:***@db/outreach"),  # percent-encoded
    ("postgres://app:pa/ss@db/outreach", "postgres://app:***@db/outreach"),  # unencoded /
    ("postgres://app:pa?ss@db/outreach", "postgres://app:***@db/outreach"),  # unencoded ?
    ("postgres://app:pa#ss@db/outreach", "postgres://app:***@db/outreach"),  # unencoded #
    ("postgres://app:pa@ss@db/outreach", "postgres://app:***@db/outreach"),  # unencoded @
    ("postgres://app:a/b?c#d@e@db:5432/outreach", "postgres://app:***@db:5432/outreach"),  # all of them
    ("postgres://app:pa:ss@db/outreach", "postgres://app:***@db/outreach"),  # a colon
    (
        "postgres://app:s3cret@/outreach?host=/var/run/postgresql",
        "postgres://app:***@/outreach?host=/var/run/postgresql",
    ),
    (
        "postgres:///outreach?host=/tmp&password=s3cret&user=app",
        "postgres:///outreach?host=/tmp&password=***&user=app",
    ),
    ("postgres://db/outreach?sslpassword=s3cret", "postgres://db/outreach?sslpassword=***"),
    ("postgres://db/outreach?password=pa#ss", "postgres://db/outreach?password=***"),
    ("postgres://app@[::1]:5432/outreach", "postgres://app@[::1]:5432/outreach"),
    ("redis://:s3cret@cache:6379/0", "redis://:***@cache:6379/0"),
    ("redis://default:s3cret@cache:6379/0", "redis://default:***@cache:6379/0"),
    ("redis://cache:6379/0", "redis://cache:6379/0"),
    (
        "rediss://:pa/ss#x@cache:6380/0?ssl_cert_reqs=required",
        "rediss://:***@cache:6380/0?ssl_cert_reqs=required",
    ),
    ("redis+cluster://:s3cret@node1:7000,node2:7001", "redis+cluster://:***@node1:7000,node2:7001"),
    ("rediss+cluster://user:pa?ss@node1:7000", "rediss+cluster://user:***@node1:7000"),
    ("redis+cluster://node1:7000,node2:7001", "redis+cluster://node1:7000,node2:7001"),
    ("unix://:s3cret@/run/redis/redis.sock?db=0", "unix://:***@/run/redis/redis.sock?db=0"),
    ("unix:///run/redis/redis.sock?db=0&password=s3cret", "unix:///run/redis/redis.sock?db=0&password=***"),
    ("amqp://guest:s3cret@rabbit:5672//", "amqp://guest:***@rabbit:5672//"),
    ("amqp://guest:pa/ss@rabbit:5672/vhost", "amqp://guest:***@rabbit:5672/vhost"),
    ("amqps://guest@rabbit:5671//", "amqps://guest@rabbit:5671//"),
    ("sqlite:///var/demo.sqlite3", "sqlite:///var/demo.sqlite3"),
]


@pytest.mark.parametrize(("url", "shown"), REDACTED)
def test_every_url_form_is_shown_without_its_password(url: str, shown: str) -> None:
    assert url_redacted(url) == shown


PASSWORD = "Xq7/pw?d#v@Z9"  # unencoded: every character that moves urlsplit's boundaries
PIECES = ["Xq7", "pw", "d#v", "v@Z9", "Z9", PASSWORD]


@pytest.mark.parametrize(
    ("read", "url"),
    [
        (lambda url: database_from_url("DATABASE_URL", url), f"postgres://app:{PASSWORD}@db:5432/outreach"),
        (lambda url: database_from_url("DATABASE_URL", url), f"postgres://app:{PASSWORD}@db:port/outreach"),
        (lambda url: env_redis_url("REDIS_URL"), f"redis://:{PASSWORD}@cache:6379/0"),
        (lambda url: env_redis_url("BUDGET_REDIS_URL", cluster=True), f"redis+cluster://:{PASSWORD}@n1:7000"),
        (lambda url: env_url("CELERY_BROKER_URL"), f"amqp://guest:{PASSWORD}@rabbit:5672//"),
    ],
)
def test_a_password_with_reserved_characters_is_refused_without_showing_it(
    read: object, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a URL whose password holds /, ?, # and @ unencoded (read as host, path or port)
    for name in ("REDIS_URL", "BUDGET_REDIS_URL", "CELERY_BROKER_URL"):
        monkeypatch.setenv(name, url)
    # when it is read at start-up
    with pytest.raises(ImproperlyConfigured) as error:
        read(url)  # type: ignore[operator]
    # then the error says what to do and shows no piece of the password
    message = str(error.value)
    assert "percent-encode" in message
    for piece in PIECES:
        assert piece not in message


def test_a_percent_encoded_password_is_read_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CELERY_BROKER_URL", "amqp://guest:Xq7%2Fpw%3Fd%23v%40Z9@rabbit:5672//")
    assert env_url("CELERY_BROKER_URL") == "amqp://guest:Xq7%2Fpw%3Fd%23v%40Z9@rabbit:5672//"
    assert (
        database_from_url("DATABASE_URL", "postgres://app:Xq7%2Fpw%3Fd%23v%40Z9@db/outreach")["PASSWORD"]
        == "Xq7/pw?d#v@Z9"
    )
