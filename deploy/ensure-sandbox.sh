#!/usr/bin/env bash
# Tenant code (python targets, command/python runners, stdio servers, command hooks) runs only
# inside bubblewrap on a worker (service/sandbox/bwrap.py); there is no unconfined fallback. When
# /usr/bin/bwrap is missing and we may (root with apt-get, as in CI), install Debian's
# `bubblewrap` package, saying so first and what came of it; then check that a sandbox can be
# built here (new network, pid, ipc, uts and cgroup namespaces) and fail loudly if not.
set -u
BWRAP=/usr/bin/bwrap
if [ ! -x "$BWRAP" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-sandbox: $BWRAP is missing; installing Debian's bubblewrap package with apt-get" \
         "(the sandbox tenant code runs in)"
    export DEBIAN_FRONTEND=noninteractive
    log=$(mktemp)
    if ! apt-get install -y -q bubblewrap >"$log" 2>&1; then
      echo "ensure-sandbox: apt-get install failed; running apt-get update and trying again"
      apt-get update -q >>"$log" 2>&1 && apt-get install -y -q bubblewrap >>"$log" 2>&1
    fi
    if [ ! -x "$BWRAP" ]; then
      echo "ensure-sandbox: could not install bubblewrap (apt-get output in $log)" >&2
      exit 1
    fi
    rm -f "$log"
    echo "ensure-sandbox: installed $BWRAP"
  else
    echo "ensure-sandbox: $BWRAP is missing and cannot be installed here (needs root and apt-get)" >&2
    exit 1
  fi
fi
# The seccomp filter (service/sandbox/seccomp.py) is compiled by the system's libseccomp, loaded
# through ctypes: without libseccomp.so.2 sandboxes run without the filter, and a worker whose
# ASSAYGATE_SANDBOX_MIN_POSTURE names `seccomp` refuses tenant code.
if ! /sbin/ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2 '; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-sandbox: libseccomp.so.2 is missing; installing Debian's libseccomp2 package" \
         "(the sandbox's seccomp filter)"
    export DEBIAN_FRONTEND=noninteractive
    log=$(mktemp)
    if ! apt-get install -y -q libseccomp2 >"$log" 2>&1; then
      apt-get update -q >>"$log" 2>&1 && apt-get install -y -q libseccomp2 >>"$log" 2>&1
    fi
    if /sbin/ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2 '; then
      rm -f "$log"
      echo "ensure-sandbox: installed libseccomp2"
    else
      echo "ensure-sandbox: could not install libseccomp2 (apt-get output in $log);" \
           "sandboxes will run without the seccomp filter" >&2
    fi
  else
    echo "ensure-sandbox: libseccomp.so.2 is missing and cannot be installed here;" \
         "sandboxes will run without the seccomp filter" >&2
  fi
fi
if [ "$(id -u)" = 0 ]; then
  ns=(--unshare-net --unshare-pid --unshare-ipc --unshare-uts --unshare-cgroup)
else
  ns=(--unshare-all --uid 65534 --gid 65534)
fi
links=()
for d in /bin /sbin /lib /lib64; do
  if [ -L "$d" ]; then links+=(--symlink "$(readlink "$d")" "$d"); elif [ -d "$d" ]; then links+=(--ro-bind "$d" "$d"); fi
done
if out=$("$BWRAP" "${ns[@]}" --die-with-parent --new-session --clearenv --ro-bind /usr /usr \
    "${links[@]}" --proc /proc --dev /dev --tmpfs /tmp -- /usr/bin/true 2>&1); then
  echo "ensure-sandbox: $BWRAP builds sandboxes here ($("$BWRAP" --version))"
else
  echo "ensure-sandbox: $BWRAP cannot create the sandbox's namespaces here: $out" >&2
  echo "ensure-sandbox: (unprivileged: kernel.unprivileged_userns_clone / user.max_user_namespaces;" \
       "in a container: it needs CAP_SYS_ADMIN or user namespaces)" >&2
  exit 1
fi
