#!/usr/bin/env bash
# requirements.lock: requirements.txt compiled with every package's hashes (pip-compile), what
# the image installs with `pip install --require-hashes` (Dockerfile). Run after any change to
# requirements.txt; tests/config/test_requirements.py fails until the two agree.
# Resolved from the package index alone (PyPI, or PIP_INDEX_URL): this machine's pip
# configuration (local wheel folders, constraints) is left out, so the hashes are the index's.
set -euo pipefail
cd "$(dirname "$0")/.."
tools="var/pip-tools"
if [ ! -x "$tools/bin/pip-compile" ]; then
  python3 -m venv "$tools"
  "$tools/bin/pip" install --quiet pip-tools==7.6.2
fi
PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= CUSTOM_COMPILE_COMMAND="scripts/lock.sh" \
  "$tools/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-find-links \
  --output-file requirements.lock requirements.txt
