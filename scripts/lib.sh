# shellcheck shell=bash disable=SC2034
# Shared by the scripts: paths, checks and dependency installation. Source it; do not run it.

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# CI clones afresh each run: keep build outputs outside the clone so a returning machine reuses them.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/vpc-cni/target}
BIN_DIR=${VPC_CNI_BIN_DIR:-$CARGO_TARGET_DIR/debug}

die() { echo "error: $*" >&2; exit 1; }
say() { echo "==> $*" >&2; }

need_root() {
  [ "$(id -u)" -eq 0 ] || die "$1 needs root (network namespaces); run it with sudo"
}

# Installs Debian packages.
install_packages() {
  [ "$(id -u)" -eq 0 ] || die "missing packages: $* (install them, or run as root)"
  say "installing $*"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; } >&2; then
    die "could not install $*"
  fi
}

# Installs the Debian packages whose commands are missing. Arguments: command:package pairs.
ensure_packages() {
  local missing=() pair
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  [ ${#missing[@]} -eq 0 ] || install_packages "${missing[@]}"
}

# The tools the box, the demo and the root tests use (ipamd programs SNAT with iptables).
ensure_box_packages() {
  ensure_packages ip:iproute2 ping:iputils-ping jq:jq iptables:iptables curl:curl
}

need_binaries() {
  local b
  for b in vpc-sim ipamd vpc-cni; do
    [ -x "$BIN_DIR/$b" ] || die "$BIN_DIR/$b is missing: build with 'cargo build --workspace' (or set VPC_CNI_BIN_DIR)"
  done
}

# Waits up to $1 seconds (in 0.1 s steps) for the command in the remaining arguments to succeed.
wait_for() {
  local tries=$(( $1 * 10 )); shift
  while [ $tries -gt 0 ]; do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1; tries=$((tries - 1))
  done
  return 1
}
