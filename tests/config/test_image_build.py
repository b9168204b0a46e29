"""The image is built with no production secret: `manage.py collectstatic` (the Dockerfile's
build step) runs on an environment that has none, and every other command still refuses to."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.config.test_settings_env import SETTINGS_PREFIXES

ROOT = Path(__file__).resolve().parents[2]
SECRETS = ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")  # nor these: the build has no services


def _bare_env(**extra: str) -> dict[str, str]:
    """This environment less every setting, as a `docker build` step has it."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(SETTINGS_PREFIXES) and k not in SECRETS}
    return {**kept, "DJANGO_SETTINGS_MODULE": "config.settings", "DJANGO_ENV_FILE": os.devnull, **extra}


@pytest.mark.slow
def test_collectstatic_runs_with_no_production_secret(tmp_path: Path) -> None:
    # given no secret, no database, debug off (the image build): a secret added to settings
    # without a throwaway value for collectstatic (config/settings.py, at the top) fails here
    env = _bare_env(DJANGO_STATIC_ROOT=str(tmp_path))
    # when the static files are collected
    result = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # then they are, under the hashed names whitenoise serves in production
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "staticfiles.json").exists()
    assert list(tmp_path.glob("admin/css/base.*.css"))
    # and any other command on the same environment still stops, naming the missing secret
    check = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert check.returncode != 0
    assert "DJANGO_SECRET_KEY is not set" in check.stderr


def test_the_dockerfile_collects_static_files_without_secrets() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    [step] = [line for line in dockerfile.splitlines() if "collectstatic" in line and line.startswith("RUN")]
    assert step.split() == ["RUN", "python", "manage.py", "collectstatic", "--noinput"], step
    for secret in ("SECRET_KEY", "API_KEY", "WEBHOOK_SECRET", "BASIC_AUTH", "TOKEN", "PASSWORD"):
        assert secret not in dockerfile, f"the Dockerfile names {secret}"
