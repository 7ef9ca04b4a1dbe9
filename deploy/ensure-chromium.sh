#!/usr/bin/env bash
# The browser tests drive Debian's Chromium headless through Playwright (never `playwright
# install`: no browser downloads). When it is missing and we may (root with apt-get, as in CI),
# install Debian's `chromium` package — saying so first, and what came of it; otherwise say why
# the browser tests will be skipped. Set ASSAYGATE_NO_BROWSER_INSTALL=1 to never install.
set -u
CHROMIUM=/usr/bin/chromium
if [ -x "$CHROMIUM" ]; then
  echo "ensure-chromium: using $CHROMIUM for the browser tests"
  exit 0
fi
if [ "${ASSAYGATE_NO_BROWSER_INSTALL:-0}" = 1 ]; then
  echo "ensure-chromium: $CHROMIUM is missing and ASSAYGATE_NO_BROWSER_INSTALL=1; browser tests will be skipped" >&2
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-chromium: $CHROMIUM is missing; installing Debian's chromium package with apt-get" \
       "(for the browser tests; ASSAYGATE_NO_BROWSER_INSTALL=1 skips this)"
  export DEBIAN_FRONTEND=noninteractive
  log=$(mktemp)
  if ! apt-get install -y -q chromium >"$log" 2>&1; then
    echo "ensure-chromium: apt-get install failed; running apt-get update and trying again"
    apt-get update -q >>"$log" 2>&1 && apt-get install -y -q chromium >>"$log" 2>&1
  fi
  if [ -x "$CHROMIUM" ]; then
    echo "ensure-chromium: installed $CHROMIUM"
  else
    echo "ensure-chromium: could not install chromium (apt-get output in $log); browser tests will be skipped" >&2
    exit 0
  fi
  rm -f "$log"
else
  echo "ensure-chromium: $CHROMIUM is missing and cannot be installed here (needs root and apt-get); browser tests will be skipped" >&2
fi
exit 0
