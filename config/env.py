"""The one reader of the process environment.

Every setting the product takes from the environment goes through these helpers, so a bad
value fails at start-up with an error that names the variable and says what was expected.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Final
from urllib.parse import parse_qs, quote, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

REQUIRED: Final = object()


def _raw(name: str, default: object) -> str | None:
    value = os.environ.get(name)
    if value is None or value == "":
        if default is REQUIRED:
            raise ImproperlyConfigured(f"{name} is not set: this setting has no default in this mode.")
        return None
    return value


def env_str(name: str, default: object = REQUIRED) -> str:
    value = _raw(name, default)
    return str(default) if value is None else value


def env_int(name: str, default: object = REQUIRED, *, minimum: int | None = None) -> int:
    value = _raw(name, default)
    if value is None:
        return int(default)  # type: ignore[call-overload]
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r}: expected a whole number.") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={value!r}: must be at least {minimum}.")
    return number


def env_int_if_set(name: str, *, minimum: int | None = None) -> int | None:
    """A whole number when the variable is set, None when it is not: a limit that is absent
    unless configured (EMAIL_RATE_PER_SECOND)."""
    return None if _raw(name, None) is None else env_int(name, minimum=minimum)


def env_ints(name: str, *, minimum: int | None = None) -> list[int]:
    """A comma-separated list of whole numbers ("50,100,200"); empty when unset."""
    items = env_list(name, "")
    for item in items:
        if not item.isdigit() or (minimum is not None and int(item) < minimum):
            least = "" if minimum is None else f" of at least {minimum}"
            raise ImproperlyConfigured(
                f"{name}={env_str(name)!r}: expected whole numbers{least}, comma-separated (e.g. 50,100,200); "
                f"{item!r} is not one."
            )
    return [int(item) for item in items]


def env_float(
    name: str, default: object = REQUIRED, *, minimum: float | None = None, maximum: float | None = None
) -> float:
    value = _raw(name, default)
    if value is None:
        return float(default)  # type: ignore[arg-type]
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r}: expected a number.") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={value!r}: must be at least {minimum}.")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name}={value!r}: must be at most {maximum:g}.")
    return number


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_bool(name: str, default: object = REQUIRED) -> bool:
    value = _raw(name, default)
    if value is None:
        return bool(default)
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r}: expected one of true/false, 1/0, yes/no, on/off.")


def env_bool_if_set(name: str) -> bool | None:
    """A bool when the variable is set, None when it is not: for settings whose default
    depends on others (EMAIL_USE_TLS defaults on when there is an SMTP login to protect)."""
    return None if _raw(name, None) is None else env_bool(name)


def env_choice(name: str, choices: Sequence[str], default: object = REQUIRED) -> str:
    value = env_str(name, default)
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r}: expected one of {', '.join(choices)}.")
    return value


def env_list(name: str, default: object = REQUIRED) -> list[str]:
    value = env_str(name, default)
    return [item.strip() for item in value.split(",") if item.strip()]


# The password in a URL's user info (`//user:password@`), up to the *last* `@` of the whole URL:
# a password holding an unencoded `/`, `?`, `#` or `@` ends where the host begins, whatever
# urlsplit makes of it (it cuts at the first `/?#` and shows the rest as host, port or path).
# An `@` in a query would widen it to hide the host too: more hidden, never less. And libpq's
# query form (`?password=...`, `sslpassword=`) up to the next parameter.
_URL_PASSWORD = re.compile(r"(://[^/?#@:]*:).*(@)", re.DOTALL)
_QUERY_PASSWORD = re.compile(r"([?&](?:ssl)?password=)[^&]*", re.IGNORECASE)
_ENCODE = "percent-encode /, ?, #, @ and : in the user name and password (%2F, %3F, %23, %40, %3A)"


def url_redacted(url: str) -> str:
    """`url` with its passwords as `***`: the one form an error message or a log line may show,
    for every URL we take (postgres, redis, rediss, redis+cluster, unix, amqp)."""
    return _QUERY_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***\2", url))


def _bad_url(name: str, url: str, problem: str) -> ImproperlyConfigured:
    # Start-up errors land in logs and CI output: never with the database's or Redis's password.
    return ImproperlyConfigured(f"{name}={url_redacted(url)!r}: {problem}")


def _check_credentials(name: str, url: str) -> None:
    """Refuse a password urlsplit (and so psycopg, redis-py and kombu) would cut short at an
    unencoded `/`, `?` or `#`: the rest would be read as the host, port or database, and come
    back in their errors ("Port could not be cast to integer value as '<password>'")."""
    found = _URL_PASSWORD.search(url)
    if found is None:
        return
    written = url[found.end(1) : found.start(2)]
    if any(c in written for c in "/?#"):
        raise _bad_url(name, url, f"the password holds a character that ends it early: {_ENCODE}.")


def env_url(name: str, default: object = REQUIRED) -> str:
    """A connection URL (CELERY_BROKER_URL: redis:// or amqp://), with its password checked."""
    url = env_str(name, default)
    _check_credentials(name, url)
    return url


def env_redis_url(name: str, default: object = REQUIRED, *, cluster: bool = False) -> str:
    """A Redis URL; with `cluster`, redis+cluster:// and rediss+cluster:// (a Redis Cluster
    node, see orchestrator.budget.connect) are accepted too."""
    url = env_url(name, default)
    schemes = {"redis", "rediss", "unix"} | ({"redis+cluster", "rediss+cluster"} if cluster else set())
    if urlsplit(url).scheme not in schemes:
        also = " (or redis+cluster:// or rediss+cluster:// for a Redis Cluster)" if cluster else ""
        raise _bad_url(name, url, f"expected a redis://, rediss:// or unix:// URL{also}.")
    return url


def database_from_url(name: str, url: str) -> dict[str, object]:
    """Turn `postgres://user:pass@host:port/db` or `sqlite:///path` into a DATABASES entry."""
    _check_credentials(name, url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is not a number, a broken [IPv6] host
        # Not urlsplit's message: it quotes what it took for the port, which can be a password.
        raise _bad_url(
            name, url, f"not a valid URL (a port that is not a number, or a broken [IPv6] host; {_ENCODE})."
        ) from None
    if parts.scheme == "sqlite":
        path = unquote(parts.path[1:] if parts.path.startswith("//") else parts.path.lstrip("/") or "")
        if not path:
            raise _bad_url(name, url, "a SQLite URL needs a file path, e.g. sqlite:///db.sqlite3.")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": path,
            # The demo runs web, beat and four workers on one file: WAL lets readers run
            # beside the writer, IMMEDIATE takes the write lock at BEGIN (no deadlocking
            # upgrade from a read lock), and the timeout makes writers queue, not fail.
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    if parts.scheme in {"postgres", "postgresql", "pgsql"}:
        if not parts.path.strip("/"):
            raise _bad_url(name, url, "the URL names no database, e.g. postgres://user@host:5432/outreach.")
        options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        # The dispatcher's queries are short index walks; JIT compilation would cost more than
        # it saves on every cycle (tens of ms), so it is off unless the URL asks otherwise.
        options.setdefault("options", "-c jit=off")
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.strip("/")),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(port or ""),
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": options,
        }
    raise _bad_url(name, url, "expected a postgres:// or sqlite:/// URL.")


def env_prefixed(prefix: str) -> dict[str, object]:
    """Every `<prefix><NAME>` variable as {NAME: value}, e.g. ANYMAIL_MAILGUN_API_KEY=k ->
    {"MAILGUN_API_KEY": "k"}: a library's settings dict without a line per provider and key.

    A value starting with `{` or `[` is JSON (settings that are dicts or lists, e.g. boto3's
    client parameters, or several webhook secrets during a rotation); any other is a string.
    """
    found: dict[str, object] = {}
    for name, value in sorted(os.environ.items()):
        if not name.startswith(prefix) or name == prefix or value == "":
            continue
        if value.lstrip()[:1] in ("{", "["):
            try:
                found[name.removeprefix(prefix)] = json.loads(value)
            except ValueError as exc:
                raise ImproperlyConfigured(
                    f"{name}: starts like JSON but is not valid JSON ({exc})."
                ) from None
        else:
            found[name.removeprefix(prefix)] = value
    return found


def env_shares(name: str, *, keys: Sequence[str], default: str = "") -> dict[str, float]:
    """`intro=0.1,nudge=0.05` -> {"intro": 0.1, "nudge": 0.05}; each value a fraction in [0, 1]."""
    shares: dict[str, float] = {}
    for item in env_str(name, default).split(","):
        if not item.strip():
            continue
        key, _, value = item.partition("=")
        key = key.strip()
        if key not in keys:
            raise ImproperlyConfigured(
                f"{name}: {key!r} is not one of {', '.join(keys)} (write e.g. {keys[0]}=0.1)."
            )
        try:
            share = float(value)
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {item.strip()!r} needs a number after '=', e.g. {key}=0.1."
            ) from None
        if not 0 <= share <= 1:
            raise ImproperlyConfigured(f"{name}: {key}={share} must be between 0 and 1.")
        shares[key] = share
    if sum(shares.values()) > 1:
        raise ImproperlyConfigured(f"{name}: the shares add up to more than 1.")
    return shares


def env_prices(name: str, default: str = "") -> dict[str, tuple[Decimal, Decimal]]:
    """`gpt-4o-mini=0.00015/0.0006,gpt-4o=0.0025/0.01` -> per model, the price of 1,000 input
    and of 1,000 output tokens (dollars): {"gpt-4o-mini": (Decimal("0.00015"), Decimal("0.0006"))}."""
    prices: dict[str, tuple[Decimal, Decimal]] = {}
    for item in env_str(name, default).split(","):
        if not item.strip():
            continue
        model, _, pair = item.strip().rpartition("=")
        given, _, taken = pair.partition("/")
        try:
            price = (Decimal(given), Decimal(taken))
        except InvalidOperation:
            price = (Decimal(-1), Decimal(-1))
        if not model or any(not p.is_finite() or p < 0 for p in price):
            raise ImproperlyConfigured(
                f"{name}: {item.strip()!r} should be model=input/output, dollars per 1,000 tokens, "
                "e.g. gpt-4o-mini=0.00015/0.0006."
            )
        prices[model] = price
    return prices


def database_url(settings_dict: Mapping[str, object], *, name: str | None = None) -> str:
    """The postgres:// URL of a DATABASES entry (another `name` on the same server if given):
    what a child process (a worker started by a test) needs to reach the same database,
    password included, so it works where PostgreSQL asks for one (Debian's default)."""
    user, password = quote(str(settings_dict["USER"] or "")), quote(str(settings_dict["PASSWORD"] or ""))
    credentials = f"{user}:{password}@" if password else f"{user}@"
    return f"postgres://{credentials}{settings_dict['HOST']}:{settings_dict['PORT']}/{name or settings_dict['NAME']}"
