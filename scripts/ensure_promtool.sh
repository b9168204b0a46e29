#!/usr/bin/env bash
# promtool, which checks and unit-tests the shipped Prometheus rules (docs/prometheus/alerts.yml,
# tests/prometheus/). Debian's `prometheus` package ships it, but installing that package also
# installs and starts a Prometheus server; so the package is only downloaded (`apt-get download`)
# and promtool alone extracted (a static Go binary, libc only) into PROMTOOL_DIR.
# Idempotent: prints the path of a promtool already on PATH or already extracted.
# Usage: PROMTOOL="$(scripts/ensure_promtool.sh)"
set -euo pipefail

if command -v promtool >/dev/null; then
  command -v promtool
  exit 0
fi
DIR="${PROMTOOL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/outreach}"
if [ -x "$DIR/promtool" ]; then
  echo "$DIR/promtool"
  exit 0
fi

echo "==> promtool missing: apt-get download prometheus, extracting promtool to $DIR" >&2
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
chmod 777 "$WORK"  # apt's _apt user writes the download here when run as root
if ! apt-get download prometheus >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq >&2
  elif command -v sudo >/dev/null; then
    sudo apt-get update -qq >&2
  fi
  apt-get download prometheus >&2
fi
dpkg -x prometheus_*.deb extracted
mkdir -p "$DIR"
install -m 0755 extracted/usr/bin/promtool "$DIR/promtool"
"$DIR/promtool" --version >&2
echo "$DIR/promtool"
