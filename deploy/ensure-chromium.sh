#!/usr/bin/env bash
# The browser tests drive Debian's Chromium headless through Playwright (never `playwright
# install`: no browser downloads). Install it from Debian's packages when it is missing and we
# may (CI runs as root); otherwise the browser tests skip and say why.
set -u
CHROMIUM=/usr/bin/chromium
[ -x "$CHROMIUM" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q chromium >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; } \
    || true
fi
[ -x "$CHROMIUM" ] || echo "ensure-chromium: $CHROMIUM could not be installed; browser tests will be skipped" >&2
exit 0
