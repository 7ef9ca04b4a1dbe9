#!/usr/bin/env bash
# The browser tests drive Debian's Chromium headless through Playwright (never `playwright
# install`: no browser downloads). When it is missing and we may (root with apt-get, as in CI),
# install Debian's `chromium` package — saying so first, and what came of it; otherwise say why
# the browser tests will be skipped. Set ASSAYGATE_NO_BROWSER_INSTALL=1 to never install.
# Under CI (the `CI` variable set) a browser still missing at the end is an error (exit 1): a CI
# run must not go green with the browser tests skipped. ASSAYGATE_TEST_CHROMIUM names another
# browser path (the tests use it too).
set -u
CHROMIUM=${ASSAYGATE_TEST_CHROMIUM:-/usr/bin/chromium}

under_ci() {
  case "$(printf '%s' "${CI:-}" | tr '[:upper:]' '[:lower:]')" in
    "" | 0 | false | no) return 1 ;;
    *) return 0 ;;
  esac
}

missing() {
  # $1: why the browser is missing. Outside CI the tests skip; under CI this fails the run.
  if under_ci; then
    echo "ensure-chromium: $1; CI is set, so this is an error (the browser tests must run)" >&2
    exit 1
  fi
  echo "ensure-chromium: $1; browser tests will be skipped" >&2
  exit 0
}

if [ -x "$CHROMIUM" ]; then
  echo "ensure-chromium: using $CHROMIUM for the browser tests"
  exit 0
fi
if [ "${ASSAYGATE_NO_BROWSER_INSTALL:-0}" = 1 ]; then
  missing "$CHROMIUM is missing and ASSAYGATE_NO_BROWSER_INSTALL=1"
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
    rm -f "$log"
    exit 0
  fi
  missing "could not install chromium (apt-get output in $log)"
fi
missing "$CHROMIUM is missing and cannot be installed here (needs root and apt-get)"
