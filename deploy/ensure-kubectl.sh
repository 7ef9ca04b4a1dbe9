#!/usr/bin/env bash
# tests/deploy/test_k8s.py renders deploy/k8s with `kubectl kustomize` (kustomize is built into
# kubectl; nothing reaches a cluster). When kubectl is missing and we may (root with apt-get, as
# in CI), install Debian's `kubectl` package, saying so first and what came of it. Outside CI a
# kubectl still missing only makes those tests skip, saying why; under CI (the `CI` variable set)
# it is an error: a CI run must not go green with the manifests unchecked. Set
# ASSAYGATE_NO_KUBECTL_INSTALL=1 to never install; ASSAYGATE_TEST_KUBECTL names another kubectl.
set -u
KUBECTL=${ASSAYGATE_TEST_KUBECTL:-kubectl}
under_ci() {
  case "$(printf '%s' "${CI:-}" | tr '[:upper:]' '[:lower:]')" in
    "" | 0 | false | no) return 1 ;;
    *) return 0 ;;
  esac
}
if command -v "$KUBECTL" >/dev/null 2>&1; then
  echo "ensure-kubectl: using $(command -v "$KUBECTL")"
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
   && [ "${ASSAYGATE_NO_KUBECTL_INSTALL:-}" != 1 ]; then
  echo "ensure-kubectl: kubectl is missing; installing Debian's kubectl package with apt-get" \
       "(tests/deploy/test_k8s.py renders the Kubernetes manifests with it)"
  export DEBIAN_FRONTEND=noninteractive
  log=$(mktemp)
  if ! apt-get install -y -q kubectl >"$log" 2>&1; then
    echo "ensure-kubectl: apt-get install failed; running apt-get update and trying again"
    apt-get update -q >>"$log" 2>&1 && apt-get install -y -q kubectl >>"$log" 2>&1
  fi
  if command -v "$KUBECTL" >/dev/null 2>&1; then
    rm -f "$log"
    echo "ensure-kubectl: installed $(command -v "$KUBECTL")"
  else
    echo "ensure-kubectl: could not install kubectl (apt-get output in $log); the Kubernetes" \
         "manifest tests will skip" >&2
  fi
else
  echo "ensure-kubectl: $KUBECTL is missing and is not installed here (that needs root and" \
       "apt-get, and no ASSAYGATE_NO_KUBECTL_INSTALL); the Kubernetes manifest tests will skip" >&2
fi
if ! command -v "$KUBECTL" >/dev/null 2>&1 && under_ci; then
  echo "ensure-kubectl: CI is set, and under CI the Kubernetes manifests must be checked" >&2
  exit 1
fi
exit 0
