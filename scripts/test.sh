#!/usr/bin/env bash
# The whole suite: installs what it needs, then runs every check and every tier of tests
# (docs/development/testing.md). The tiers are cargo-nextest profiles (.config/nextest.toml):
#   checks     fmt, clippy -D warnings, shellcheck, no unused dependency, config and manifests,
#              a bounded fuzzing run (nightly), the image, the demo (root)
#   tiers 1-2  unit, property and daemon tests: no privileges          (profile default)
#   services   the AWS client against moto, the plugin's log rotation    (profile services)
#   tiers 3-4  root: netlink in fresh namespaces, the real binaries in VPC-in-a-box
#                                                                        (profile root)
#   tier 5     root: kube-in-a-box, one cluster at a time     (profiles cluster, cluster-image)
# Without root, tiers 3-5 are listed test by test as skipped, never passed. Every tier runs even
# when one before it failed, so one run shows every failure; the exit status is 1 if any did.
# The summary at the end is read from nextest's JUnit files (scripts/summary.py).
#
# As root the work runs in three lanes once the binaries are built: the root lane (tiers 3-4,
# then the demo) at once; the cluster lane (tier 5, the clusters that need the image once it is
# built, then the demo on Kubernetes) as soon as the kube cache is there, while the image
# builds; the checks and the unprivileged tiers meanwhile. A box or cluster test mostly
# waits (on ipamd's timers, the API server, kubelets), so the lanes fit beside each other on
# two cores; a lane's output is printed when it ends.
#
#   test.sh                 everything
#   test.sh --tier T        one tier only: default, services, root or cluster (no checks; the
#                           binaries are built first). One test: see docs/development/testing.md.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"

MOTO_PIN="moto[server]==5.2.5"
VENV=${VPC_CNI_VENV:-$HOME/.cache/vpc-cni/venv}
ROOT=0; [ "$(id -u)" -eq 0 ] && ROOT=1
ONLY=""
case ${1:-} in
  "") ;;
  --tier) ONLY=${2:-}; [[ $ONLY =~ ^(default|services|root|cluster)$ ]] || die "--tier takes default, services, root or cluster";;
  *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2;;
esac
# Whether this run includes tier $1 (every tier unless --tier names another).
want() { [ -z "$ONLY" ] || [ "$ONLY" = "$1" ]; }
# Every run starts from nothing: results are files, one per lane (a lane runs in a subshell),
# one entry a line in scripts/summary.py's format, and the JUnit files of earlier runs are removed before
# a tier runs, so the summary can never read an earlier run's results.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/vpc-cni-test.XXXXXX")
LANE=main
declare -a BACKGROUND=()
stop_background() {
  local pid
  for pid in "${BACKGROUND[@]}"; do kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap stop_background EXIT
record() { echo "$1" >>"$WORK/$LANE.results"; }
step_result() { record "step|$1|$2"; }
# Runs a check, recording ok or FAILED by its exit status; the suite goes on either way.
check() { # label command...
  local label=$1; shift
  say "$label"
  if "$@"; then step_result "$label" ok; else step_result "$label" "FAILED (exit $?)"; fi
}
# A nextest tier: runs it and records its JUnit file.
tier() { # label profile nextest-args...
  local label=$1 profile=$2 junit code=0; shift 2
  junit=$REPO/target/nextest/$profile/junit.xml
  rm -f "$junit"
  say "$label (nextest profile $profile)"
  cargo nextest run --workspace --locked --profile "$profile" "$@" || code=$?
  record "ran|$label|$junit|$code"
}
# A tier that cannot run here: what it would have run, named test by test, and why not.
not_run() { # label profile reason nextest-args...
  local label=$1 profile=$2 reason=$3 list; shift 3
  list=$REPO/target/nextest/$profile/list.json
  mkdir -p "$(dirname "$list")"
  cargo nextest list --workspace --locked --profile "$profile" --message-format json "$@" >"$list" \
    || rm -f "$list"
  record "notrun|$label|$list|$reason"
}
# A background job of the main shell that a lane can wait for: the command's output goes to
# $WORK/NAME.out, its errors to $WORK/NAME.log, and its exit status, once it ends, to
# $WORK/NAME.rc. Job control is on while it starts, so it gets a process group of its own,
# which the exit trap can end whole.
job() { # name command...
  local name=$1; shift
  set -m
  ( code=0; "$@" >"$WORK/$name.out" 2>"$WORK/$name.log" || code=$?; echo "$code" >"$WORK/$name.rc" ) &
  set +m
  BACKGROUND+=("$!")
}
# Waits for job NAME to end (at most 90 min, CI's limit) and returns its exit status.
await() { # name
  local rc=$WORK/$1.rc i
  for ((i = 0; i < 5400; i++)); do
    if [ -s "$rc" ]; then return "$(<"$rc")"; fi
    sleep 1
  done
  return 124
}
fmt_check() { cargo fmt --all -- --check && (cd fuzz && cargo fmt -- --check); }
unused_deps() { cargo machete && check_workspace_deps; }
# The demo, its output shown only when it fails.
demo() {
  local log=$WORK/demo$*.log
  scripts/demo.sh "$@" >"$log" 2>&1 || { cat "$log"; return 1; }
}

command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust (rustup) first"
ensure_nextest
KUBE_BUILD=""
if [ $ROOT -eq 1 ]; then
  ensure_box_packages
  # Tests install nothing themselves: what they run is installed here (the SNAT tests use both
  # iptables backends and nft; a test that lacks a command fails naming it).
  ensure_packages shellcheck:shellcheck timeout:coreutils python3:python3 nft:nftables promtool:prometheus \
    iptables-nft-save:iptables iptables-legacy-save:iptables
  python3 -c 'import ensurepip' 2>/dev/null || install_packages python3-venv
  ensure_runtimes
  ensure_cnitool
  export VPC_CNI_CNITOOL=$CNITOOL
  ensure_packages openssl:openssl nsenter:util-linux
  # Kubernetes, etcd, containerd and the test images, which only the cluster lane needs: built
  # once (about 10 min of CPU on a fresh machine) at the lowest priority, in the time the
  # builds and tests before the cluster lane leave the cores idle; then reused from the cache.
  if want cluster && ! scripts/kube-build.sh --check >/dev/null 2>&1; then
    say "building the kube cache in the background (scripts/kube-build.sh, log $WORK/kube-build.log)"
    job kube-build nice -n 19 scripts/kube-build.sh
    KUBE_BUILD=1
  fi
fi

# One build for every tier: the test binaries and the workspace's binaries (vpc-sim, ipamd,
# vpc-cni) that the later tiers and the demo run; workspace-hack keeps `cargo build` on the same
# artifacts.
say "building the tests and binaries"
cargo nextest run --workspace --locked --no-run

# Starts lane NAME in the background: the rest of the arguments, a command, with results and
# output of its own (printed when the lane ends). Job control is on while it starts, so the
# lane gets a process group of its own, which the exit trap can end whole.
declare -a LANES=()
lane() { # name command...
  local name=$1; shift
  say "the $name lane starts in the background (its output below when it ends)"
  set -m
  ( LANE=$name; "$@" ) >"$WORK/$name.log" 2>&1 &
  set +m
  BACKGROUND+=("$!")
  LANES+=("$name:$!")
}
root_lane() {
  tier "tiers 3-4: netlink in namespaces, VPC-in-a-box (root)" root --run-ignored only
  if [ -z "$ONLY" ]; then check "scripts/demo.sh" demo; fi
}
# Tier 5 in two parts: the clusters that run ipamd as a process start as soon as the kube
# cache is there, while the image's release build runs; those that run the shipped image
# (profile cluster-image), and the demo on Kubernetes, once it is built.
cluster_lane() {
  local code=0
  if [ -n "$KUBE_BUILD" ]; then
    say "waiting for the kube cache"
    await kube-build || code=$?
    if [ $code -ne 0 ]; then
      cat "$WORK/kube-build.log"
      step_result "the kube cache (scripts/kube-build.sh)" "FAILED (exit $code)"
      return
    fi
    step_result "the kube cache (scripts/kube-build.sh)" ok
  fi
  tier "tier 5: kube-in-a-box (root)" cluster --run-ignored only
  say "waiting for the image (scripts/image.sh)"
  await image || code=$?
  cat "$WORK/image.log"
  if [ $code -ne 0 ]; then
    step_result "the image (scripts/image.sh)" "FAILED (exit $code)"
    not_run "tier 5: kube-in-a-box, the shipped image" cluster-image "the image did not build" --run-ignored only
    return
  fi
  step_result "the image (scripts/image.sh)" ok
  VPC_CNI_IMAGE=$(<"$WORK/image.out")
  export VPC_CNI_IMAGE
  tier "tier 5: kube-in-a-box, the shipped image (root)" cluster-image --run-ignored only
  if [ -z "$ONLY" ]; then check "scripts/demo.sh --kube" demo --kube; fi
}

# As root, three lanes from here. Tiers 3-4 (mostly waiting on the box) start at once; the
# image's release build runs meanwhile, at a lower priority than the tests; tier 5 starts once
# the kube cache is there; the checks and the unprivileged tiers run beside them.
if [ $ROOT -eq 1 ] && want root; then lane root root_lane; fi
if [ $ROOT -eq 1 ] && want cluster; then
  say "the image (scripts/image.sh) builds in the background (log $WORK/image.log)"
  job image nice -n 10 scripts/image.sh
  lane cluster cluster_lane
fi

if [ -z "$ONLY" ]; then
  check "cargo fmt --check" fmt_check
  check "cargo clippy --all-targets -D warnings" cargo clippy --workspace --all-targets --locked --quiet -- -D warnings
  if command -v shellcheck >/dev/null 2>&1; then
    check "shellcheck" shellcheck -x scripts/*.sh .ci/run
  else
    step_result "shellcheck" "SKIPPED (not installed; installed automatically when run as root)"
  fi
  ensure_cargo_machete
  check "no unused dependency (cargo-machete $MACHETE_VERSION, every workspace pin used)" unused_deps
fi

if want default; then
  tier "tiers 1-2: unit, property and daemon tests" default
fi

if [ -z "$ONLY" ]; then
  FUZZ_SECS=${VPC_CNI_FUZZ_SECS:-20}
  say "fuzzing"
  fuzzed=0; scripts/fuzz.sh --secs "$FUZZ_SECS" || fuzzed=$?
  case $fuzzed in
    0) step_result "fuzzing: cni_conf, cni_args, ipam_frame, ${FUZZ_SECS} s each" ok;;
    3) step_result "fuzzing" "SKIPPED (no nightly toolchain; the committed corpus was replayed in tiers 1-2)";;
    *) step_result "fuzzing: cni_conf, cni_args, ipam_frame, ${FUZZ_SECS} s each" "FAILED (a crash, see above)";;
  esac
  # Runs scripts/build-release.sh, which the image's build made fresh already as root: after
  # it, so that the two never rewrite the release artifacts while the other reads them.
  if [ $ROOT -eq 1 ] && want cluster; then await image || true; fi
  check "config, manifests, IAM policy and Dockerfile (scripts/check-config.sh)" scripts/check-config.sh
fi

if want services; then
  say "moto: installing $MOTO_PIN"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "$MOTO_PIN"
  MOTO_PORT=$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$VENV/bin/moto_server" -H 127.0.0.1 -p "$MOTO_PORT" >"$WORK/moto.log" 2>&1 &
  MOTO_PID=$!
  BACKGROUND+=("$MOTO_PID")
  if wait_for 30 bash -c "exec 3<>/dev/tcp/127.0.0.1/$MOTO_PORT"; then
    export MOTO_ENDPOINT=http://127.0.0.1:$MOTO_PORT
    tier "services: moto, the plugin's log rotation" services --run-ignored only
  else
    cat "$WORK/moto.log"
    step_result "services: moto, the plugin's log rotation" "FAILED (moto did not start, see above)"
  fi
  kill "$MOTO_PID" 2>/dev/null || true
fi

if [ $ROOT -eq 0 ]; then
  if want root; then not_run "tiers 3-4: netlink in namespaces, VPC-in-a-box" root "need root" --run-ignored only; fi
  if want cluster; then
    not_run "tier 5: kube-in-a-box" cluster "needs root" --run-ignored only
    not_run "tier 5: kube-in-a-box, the shipped image" cluster-image "needs root" --run-ignored only
  fi
  if [ -z "$ONLY" ]; then
    step_result "the image (scripts/image.sh)" "SKIPPED (needs root)"
    step_result "scripts/demo.sh, demo.sh --kube" "SKIPPED (need root)"
  fi
fi

for entry in "${LANES[@]}"; do
  name=${entry%%:*}
  say "waiting for the $name lane"
  wait "${entry#*:}" || true
  echo "==> the $name lane's output"
  cat "$WORK/$name.log"
  cat "$WORK/$name.results" >>"$WORK/main.results" 2>/dev/null \
    || step_result "the $name lane" "FAILED (it recorded no result, see its output above)"
done

mapfile -t entries <"$WORK/main.results"
python3 scripts/summary.py "${entries[@]}"
