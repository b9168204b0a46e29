#!/usr/bin/env bash
# Debian's Chromium for the browser end-to-end tests (tests/e2e/test_browser_approval.py), which
# Playwright drives through executable_path. Installed from Debian's packages, never a browser
# download: `playwright install` fetches its own build from a host this machine cannot reach.
# Idempotent: does nothing when /usr/bin/chromium is already there.
set -euo pipefail

CHROMIUM=/usr/bin/chromium
if [ -x "$CHROMIUM" ]; then
  echo "==> chromium present: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "$CHROMIUM is missing and installing it needs root: apt-get install chromium" >&2
    exit 1
  fi
  SUDO="sudo"
fi

echo "==> $CHROMIUM missing: apt-get update && apt-get install chromium"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium
echo "==> installed: $("$CHROMIUM" --version)"
