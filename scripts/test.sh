#!/usr/bin/env bash
# The whole suite: installs what it needs, then runs every tier.
#   1. formatting and lints (cargo fmt, clippy -D warnings, shellcheck), and no unused dependency
#      (cargo-machete per crate, and every workspace pin used by some crate)
#   2. unit, property and daemon tests (no privileges), and a bounded coverage-guided fuzzing run
#      of the input parsers (cargo fuzz; needs a nightly toolchain, SKIPPED without one)
#   3. the AWS client against moto, an EC2 we did not write
#   4. root only: netlink tests in fresh namespaces, end-to-end tests of the real binaries in
#      VPC-in-a-box, a real Kubernetes on it (kube-in-a-box; IPv4, IPv6 and dual-stack
#      clusters), the image (scripts/image.sh) run as the DaemonSet there, and the demo in
#      both modes.
#      Without root these are reported as SKIPPED, never passed.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"

MOTO_PIN="moto[server]==5.2.5"
VENV=${VPC_CNI_VENV:-$HOME/.cache/vpc-cni/venv}
ROOT=0; [ "$(id -u)" -eq 0 ] && ROOT=1
declare -a SUMMARY=()
step() { say "$*"; }
passed() { SUMMARY+=("PASSED   $*"); }
skipped() { SUMMARY+=("SKIPPED  $*"); }

command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust (rustup) first"
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
  # Kubernetes, etcd, containerd and the test images: built once (about 8 min of CPU on a
  # fresh machine), then reused from the cache.
  scripts/kube-build.sh >/dev/null
fi

step "formatting and lints"
cargo fmt --all -- --check
(cd fuzz && cargo fmt -- --check)
cargo clippy --workspace --all-targets --quiet -- -D warnings
if command -v shellcheck >/dev/null 2>&1; then
  shellcheck -x scripts/*.sh .ci/run
  passed "fmt, clippy -D warnings, shellcheck"
else
  passed "fmt, clippy -D warnings"
  skipped "shellcheck (not installed; installed automatically when run as root)"
fi

step "unused dependencies"
ensure_cargo_machete
cargo machete
check_workspace_deps
passed "no unused dependency (cargo-machete $MACHETE_VERSION; every workspace pin used)"

step "building"
cargo build --workspace --quiet

step "unit, property and daemon tests"
cargo test --workspace --quiet
passed "unit, property and daemon tests (tiers 1-2), fuzz corpus replayed"
passed "fleet simulation at reduced size (crates/fleet/tests/scenarios.rs): launch with no pod of ours failed by throttling and fewer EC2 calls per node than the Go CNI's algorithm; scarcity mode placing more pods than without it; a throttling storm; an hour of churn (full size: scripts/fleet-report.sh)"

step "fuzzing"
FUZZ_SECS=${VPC_CNI_FUZZ_SECS:-20}
fuzzed=0; scripts/fuzz.sh --secs "$FUZZ_SECS" || fuzzed=$?
case $fuzzed in
  0) passed "fuzzing: cni_conf, cni_args, ipam_frame, ${FUZZ_SECS} s each, no crash";;
  3) skipped "fuzzing: no nightly toolchain (cargo fuzz needs one); the committed corpus was replayed above";;
  *) die "fuzzing found a crash (see above)";;
esac

step "config, manifests and Dockerfile"
scripts/check-config.sh
passed "config: conflist, kubernetes-validate --strict 1.25 and 1.37, IAM policy matches the EC2 calls, Dockerfile paths match the built artifacts"

step "moto: installing $MOTO_PIN"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "$MOTO_PIN"
MOTO_PORT=$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$VENV/bin/moto_server" -H 127.0.0.1 -p "$MOTO_PORT" >"${TMPDIR:-/tmp}/vpc-cni-moto.log" 2>&1 &
MOTO_PID=$!
trap 'kill $MOTO_PID 2>/dev/null || true' EXIT
wait_for 30 bash -c "exec 3<>/dev/tcp/127.0.0.1/$MOTO_PORT" || die "moto did not start (see ${TMPDIR:-/tmp}/vpc-cni-moto.log)"
export MOTO_ENDPOINT=http://127.0.0.1:$MOTO_PORT

# Only --workspace selections below: selecting single packages can resolve features differently
# and rebuild the AWS SDK.
if [ $ROOT -eq 1 ]; then
  # The DaemonSet's image, for the DaemonSet test: the release build is mostly done by now
  # (check-config ran the same scripts/build-release.sh); the Debian base layer is cached.
  step "the image (scripts/image.sh)"
  VPC_CNI_IMAGE=$(scripts/image.sh)
  export VPC_CNI_IMAGE
  passed "scripts/image.sh: localhost/vpc-cni image from the Dockerfile's runtime stage, its files matching the COPY lines"
  step "root tiers: netlink in fresh namespaces, plugin and end-to-end in VPC-in-a-box; moto"
  # --ignored runs exactly the tests that need root, and the moto smoke test.
  cargo test --workspace --quiet -- --ignored
  passed "AWS client against moto (DescribeInstanceTypes, DescribeNetworkInterfaces, Assign/UnassignPrivateIpAddresses)"
  passed "netlink and plugin tests in fresh namespaces (tier 3)"
  passed "end-to-end tests of the real binaries in VPC-in-a-box (tier 4)"
  passed "real runtimes on a box node: cnitool (libcni) add/check/del/del and portmap traffic, podman (CNI backend) run/exec/rm"
  passed "hardening on box nodes: SIGKILL chaos during parallel churn, EC2 faults during scale-up, IMDS lag, damaged state"
  passed "ipamd doctor on a box node (vpc-box.sh doctor): healthy with pods on two ENIs, a complete bundle; rules 512 and 1536 gone, an orphan route and rule, the SNAT jump and chain gone, a shadowing conflist, a leaked ENI, an exhausted subnet, IAM denials, IMDS out of step with EC2 and ipamd down each named by its check, and undone to healthy"
  passed "kube-in-a-box (Kubernetes $("$KUBE_CACHE/bin/kubelet" --version | awk '{print $2}')): a Deployment of 6 on two nodes through kubelet -> containerd -> vpc-cni, pod-to-pod and pod-to-node pings, scale to 0 releasing every address, every DEL (empty CNI_NETNS included) succeeding"
  passed "the DaemonSet on kube-in-a-box: Ready on two nodes, pods wired, ipamd doctor in the node's pod healthy; rolled to a new tag under 100 ms pings with none lost and every address kept; deleted (new ADDs name the missing socket) and re-applied with every address accounted for; the installed plugin runs in an empty root"
  passed "kube-in-a-box IPv6 (tests/tests/kube_ipv6.rs): an IPv6 cluster with the Go CNI's IPv6 settings, its pods on two nodes with addresses of their node's /80 in kubectl get pods -o wide, pinging each other, the nodes and the API server over IPv6; a dual-stack cluster with podIPs [IPv4, IPv6]; the shipped DaemonSet running an IPv6 cluster"
  passed "ipamd with the scheduler on kube-in-a-box (tests/tests/kube_aware.rs): vpc-cni.io/max-pods equal to the instance's count (secondary, a node MAX_ENI, prefix delegation); a node WARM_IP_TARGET converged to and its removal restoring the default; an invalid node value refused with an InvalidSetting Event; a Deployment scaled 0 -> 40 in a few EC2 calls with no failed ADD; cordon releasing the warm pool and an ENI, uncordon restoring it; FailedAssignIP naming the ENI limit in kubectl describe; MissingIAMPermissions; the startup taint keeping pods off until ipamd serves"
  passed "log rotation: concurrent vpc-cni processes and a churning ipamd rotate their logs, keep N files and lose no line"
  step "demo"
  scripts/demo.sh >"${TMPDIR:-/tmp}/vpc-cni-demo.log" 2>&1 || { cat "${TMPDIR:-/tmp}/vpc-cni-demo.log"; die "the demo failed"; }
  passed "scripts/demo.sh"
  scripts/demo.sh --kube >"${TMPDIR:-/tmp}/vpc-cni-demo-kube.log" 2>&1 || { cat "${TMPDIR:-/tmp}/vpc-cni-demo-kube.log"; die "the kube demo failed"; }
  passed "scripts/demo.sh --kube"
else
  step "moto smoke test against $MOTO_ENDPOINT"
  cargo test --workspace --quiet --test moto_smoke -- --ignored
  passed "AWS client against moto (DescribeInstanceTypes, DescribeNetworkInterfaces, Assign/UnassignPrivateIpAddresses)"
  step "the plugin's log rotation with the real vpc-cni (needs no root)"
  cargo test --workspace --quiet --test log_rotation -- --ignored concurrent_plugin_processes
  passed "kube-in-a-box IPv6 (tests/tests/kube_ipv6.rs): an IPv6 cluster with the Go CNI's IPv6 settings, its pods on two nodes with addresses of their node's /80 in kubectl get pods -o wide, pinging each other, the nodes and the API server over IPv6; a dual-stack cluster with podIPs [IPv4, IPv6]; the shipped DaemonSet running an IPv6 cluster"
  passed "log rotation: concurrent vpc-cni processes rotating one pluginLogFile lose no line"
  skipped "netlink tests in fresh namespaces (tier 3): need root"
  skipped "end-to-end tests in VPC-in-a-box (tier 4): need root"
  skipped "cnitool and podman against a box node: need root"
  skipped "scripts/image.sh and the DaemonSet on kube-in-a-box: need root"
  skipped "chaos, EC2 faults, IMDS lag and damaged state on box nodes: need root"
  skipped "kube-in-a-box (a real Kubernetes on the box, IPv4, IPv6 and dual-stack): needs root"
  skipped "scripts/demo.sh and demo.sh --kube: need root"
fi
kill $MOTO_PID 2>/dev/null || true
trap - EXIT

echo
echo "Summary"
printf '  %s\n' "${SUMMARY[@]}"
