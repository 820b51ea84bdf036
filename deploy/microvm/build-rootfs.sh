#!/usr/bin/env bash
# Lay out acp-relay in a microVM root filesystem tree, so that the relay is the parent of
# one agent process per WebSocket inside the guest:
#
#   PID 1 /sbin/acp-relay-init (mounts, secret, workspace)  --init tini (default)
#     -> /usr/bin/tini -s (reaps orphans, forwards signals)
#       -> acp-relay serve (as uid 10001) -> one agent per socket, each in its own group
#   or systemd (--init systemd) -> acp-relay.service (deploy/systemd) -> agents
#
# Writes into ROOTFS_DIR (created if missing; an existing base tree, such as one made by
# `debootstrap --variant=minbase --include=python3,tini,iproute2 bookworm DIR`, is kept):
#   opt/acp-relay/              a venv for the guest's Python: the relay wheel and its
#                               dependencies, installed by the host's pip for the guest
#   etc/acp-relay/acp-relay.env the relay's ACP_RELAY_* settings (agent, workspace, ...)
#   etc/acp-relay/secret        only with --secret-file; otherwise the VM's host puts it there
#   sbin/acp-relay-init         PID 1 (kernel command line: init=/sbin/acp-relay-init)
#   etc/systemd/system/...      with --init systemd: the unit, enabled, and a sysusers.d user
#   WORKSPACE                   the agent's working directory (default /workspace)
#
# Needs no root, no Docker and no network beyond PyPI (pip: the wheel's dependencies, and
# setuptools when it builds the wheel); pass --pip-option --no-index --pip-option
# --find-links=DIR to stay offline. The guest must provide the interpreter (--interpreter,
# Debian 12's python3 by default), /usr/bin/tini (Debian's tini) for --init tini, and
# util-linux's setpriv and mount (in every Debian base).
#
# Usage: deploy/microvm/build-rootfs.sh [options] ROOTFS_DIR   (--help for the options)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
checkout="$(cd "$here/../.." && pwd)"
prefix=/opt/acp-relay
uid=10001

wheel=""
extras=demo
python_version=3.11
interpreter=/usr/bin/python3
arch="$(uname -m)"
glibc=2.36
agent=""
workspace=/workspace
secret_file=""
init=tini
host_python="${PYTHON:-python3}"
pip_options=()

usage() {
  cat <<EOF
Usage: $0 [options] ROOTFS_DIR

  --wheel FILE           acp-relay wheel to install (default: build one from $checkout)
  --extras LIST          extras to install with it (default: $extras; "" for none)
  --python-version X.Y   the guest's Python (default: $python_version, Debian 12's)
  --interpreter PATH     the guest's python3 (default: $interpreter)
  --arch ARCH            the guest's machine (default: $arch, this machine's)
  --glibc X.Y            the guest's glibc, newest manylinux wheels allowed (default: $glibc)
  --agent "CMD ARGS"     agent command (default: the demo agent, $prefix/bin/python -m relay.demo_agent)
  --workspace DIR        the agent's working directory in the guest (default: $workspace)
  --secret-file FILE     copy this secret file into the tree (default: none; supply it per VM)
  --init tini|systemd    how the guest starts the relay (default: $init)
  --pip-option OPT       extra option for pip install (repeatable), e.g. --no-index
  Environment: PYTHON, the host Python that runs pip and builds the wheel (default: python3).
EOF
}

die() {
  echo "build-rootfs.sh: $*" >&2
  exit 2
}

rootfs=""
while [ $# -gt 0 ]; do
  case "$1" in
    --wheel) wheel="$2"; shift 2 ;;
    --extras) extras="$2"; shift 2 ;;
    --python-version) python_version="$2"; shift 2 ;;
    --interpreter) interpreter="$2"; shift 2 ;;
    --arch) arch="$2"; shift 2 ;;
    --glibc) glibc="$2"; shift 2 ;;
    --agent) agent="$2"; shift 2 ;;
    --workspace) workspace="$2"; shift 2 ;;
    --secret-file) secret_file="$2"; shift 2 ;;
    --init) init="$2"; shift 2 ;;
    --pip-option) pip_options+=("$2"); shift 2 ;;
    -h | --help) usage; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$rootfs" ] || die "one ROOTFS_DIR only"; rootfs="$1"; shift ;;
  esac
done
[ -n "$rootfs" ] || { usage >&2; exit 2; }
case "$init" in tini | systemd) ;; *) die "--init must be tini or systemd, not $init" ;; esac
case "$python_version" in [0-9].[0-9] | [0-9].[0-9][0-9]) ;; *) die "--python-version X.Y, not $python_version" ;; esac
case "$glibc" in 2.[0-9] | 2.[0-9][0-9]) ;; *) die "--glibc 2.N, not $glibc" ;; esac
case "$workspace" in /*) ;; *) die "--workspace must be an absolute path in the guest" ;; esac
[ -z "$secret_file" ] || [ -r "$secret_file" ] || die "cannot read --secret-file $secret_file"
[ -n "$agent" ] || agent="$prefix/bin/python -m relay.demo_agent"

mkdir -p "$rootfs"
rootfs="$(cd "$rootfs" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# --- the relay wheel --------------------------------------------------------------------
if [ -z "$wheel" ]; then
  echo "building the acp-relay wheel from $checkout" >&2
  "$host_python" -m pip wheel --quiet --no-deps --wheel-dir "$work/wheels" "${pip_options[@]}" "$checkout"
  wheel="$(find "$work/wheels" -name 'acp_relay-*.whl')"
fi
[ -f "$wheel" ] || die "no wheel at $wheel"

# --- the venv, made by hand for the guest's interpreter ---------------------------------
# A venv is pyvenv.cfg, bin/python pointing at the interpreter, and a site-packages
# directory. The host's pip installs into that directory with the guest's Python version
# and platform, so no guest code runs here and nothing needs root or a chroot.
venv="$rootfs$prefix"
site="$venv/lib/python$python_version/site-packages"
mkdir -p "$venv/bin" "$site"
cat >"$venv/pyvenv.cfg" <<EOF
home = $(dirname "$interpreter")
include-system-site-packages = false
version = $python_version
EOF
ln -sfn "$interpreter" "$venv/bin/python"
ln -sfn python "$venv/bin/python3"
ln -sfn python "$venv/bin/python$python_version"

abi="cp${python_version/./}"
platforms=()
for minor in $(seq "${glibc#2.}" -1 17); do
  platforms+=(--platform "manylinux_2_${minor}_${arch}")
done
platforms+=(--platform "manylinux2014_${arch}")
compile=(--no-compile)
if [ "$("$host_python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "$python_version" ]; then
  compile=()  # same version: byte-compile now, the guest may mount its root read-only
fi
requirement="$wheel${extras:+[$extras]}"
echo "installing $(basename "$wheel")${extras:+[$extras]} for CPython $python_version on $arch" >&2
# --target resolves from scratch, but pip still checks the result against the host
# Python's own packages and reports their conflicts: nothing to do with the guest.
"$host_python" -m pip install --quiet --upgrade --no-warn-conflicts --target "$site" \
  --python-version "$python_version" --implementation cp --abi "$abi" --abi abi3 --abi none \
  "${platforms[@]}" --only-binary=:all: "${compile[@]}" "${pip_options[@]}" "$requirement"
rm -rf "${site:?}/bin"  # scripts pip wrote for the host's Python; the guest gets its own below

cat >"$venv/bin/acp-relay" <<EOF
#!$prefix/bin/python
import sys

from relay.commands import main

sys.exit(main())
EOF
chmod 0755 "$venv/bin/acp-relay"

# --- settings, secret, workspace --------------------------------------------------------
install -d -m 0755 "$rootfs/etc/acp-relay"
quoted_agent="${agent//\\/\\\\}"
quoted_agent="${quoted_agent//\"/\\\"}"
cat >"$rootfs/etc/acp-relay/acp-relay.env" <<EOF
# acp-relay settings (ACP_RELAY_<NAME> for every \`acp-relay serve --help\` option).
# Read by /sbin/acp-relay-init (a shell: keep to NAME=value and NAME="value") or by
# acp-relay.service (EnvironmentFile=). The agent never sees ACP_RELAY_* variables.
ACP_RELAY_AGENT="$quoted_agent"
ACP_RELAY_WORKSPACE=$workspace
# The VM's network is private to its host: the host's proxy forwards the ACP endpoint and
# the supervisor asks /busy here (deploy/microvm/SUPERVISOR.md).
ACP_RELAY_LISTEN=0.0.0.0:8765
ACP_RELAY_KILL_GRACE=3
ACP_RELAY_LOG_FORMAT=json
EOF
if [ "$init" = tini ]; then
  # acp-relay-init copies /etc/acp-relay/secret there at boot, readable by the relay only.
  # (Under systemd the unit sets it: LoadCredential= and %d.)
  echo "ACP_RELAY_SECRET_FILE=/run/acp-relay/secret" >>"$rootfs/etc/acp-relay/acp-relay.env"
fi
if [ -n "$secret_file" ]; then
  install -m 0600 "$secret_file" "$rootfs/etc/acp-relay/secret"
fi
install -d -m 0755 "$rootfs$workspace" "$rootfs/home/relay"

# --- how the guest starts it ------------------------------------------------------------
if [ "$init" = tini ]; then
  install -d -m 0755 "$rootfs/sbin"
  install -m 0755 "$here/acp-relay-init" "$rootfs/sbin/acp-relay-init"
  [ -x "$rootfs/usr/bin/tini" ] || echo "note: the guest needs /usr/bin/tini (Debian's tini package)" >&2
else
  units="$rootfs/etc/systemd/system"
  install -d -m 0755 "$units/multi-user.target.wants" "$units/acp-relay.service.d"
  install -m 0644 "$checkout/deploy/systemd/acp-relay.service" "$units/acp-relay.service"
  ln -sfn ../acp-relay.service "$units/multi-user.target.wants/acp-relay.service"
  cat >"$units/acp-relay.service.d/microvm.conf" <<EOF
# The microVM's workspace (the unit's own is for a host).
[Service]
WorkingDirectory=$workspace
ReadWritePaths=
ReadWritePaths=$workspace
EOF
  install -d -m 0755 "$rootfs/usr/lib/sysusers.d" "$rootfs/usr/lib/tmpfiles.d"
  echo "u acp-relay $uid \"acp-relay\" /var/lib/acp-relay /usr/sbin/nologin" \
    >"$rootfs/usr/lib/sysusers.d/acp-relay.conf"
  echo "d $workspace 0750 acp-relay acp-relay -" >"$rootfs/usr/lib/tmpfiles.d/acp-relay.conf"
fi

[ -x "$rootfs$interpreter" ] || [ -L "$rootfs$interpreter" ] \
  || echo "note: the guest needs $interpreter (Python $python_version) in this tree" >&2
echo "acp-relay laid out in $rootfs (init: $init)" >&2
