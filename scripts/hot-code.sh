#!/usr/bin/env bash
# Writes ipamd/hot-code.order: the functions ipamd runs, in the order the linker is to place
# them (ipamd/build.rs passes the file to lld), so that the code a node runs sits together in
# the binary and the kernel maps in only those pages (docs/reports/memory-profile.md).
#
#   scripts/hot-code.sh
#
# ipamd, built as scripts/build-release.sh builds it (with symbols: the release profile keeps
# ipamd's, build-release.sh strips the copy it ships), runs under valgrind's callgrind in
# VPC-in-a-box, once with secondary addresses and once with prefix delegation. Each run counts
# what ipamd runs until it serves, then, counted apart, what it runs as a node's daemon: filling
# its pool, 250 ADDs (100 with prefixes) and their DELs, CHECK, STATUS and GC, metrics scrapes, every /v1
# endpoint, and three minutes of its timers (reconciliation, cooldowns, the pool's rounds).
# The file lists the second set first, then what only the start ran. Functions that never ran
# follow them in the binary, in the linker's own order.
#
# Needs root (network namespaces). Installs valgrind. Takes about 10 minutes. Rerun it after a
# dependency or toolchain update (symbol names carry a hash of their crate's build): a name
# that no longer matches is only left out of the ordering, and scripts/bench.sh's size
# section says how many still match.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ $# -eq 0 ] || { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
need_root "hot-code.sh"
ensure_box_packages
ensure_packages valgrind:valgrind python3:python3

OUT=$REPO/ipamd/hot-code.order
say "building the release binaries (scripts/build-release.sh) and vpc-sim"
DIST=$("$REPO/scripts/build-release.sh" | tail -n 1)
(cd "$REPO" && cargo build --release --locked --quiet -p vpc-sim)
PROFILED=$CARGO_TARGET_DIR/$(rustc -vV | sed -n 's/^host: //p')/release/ipamd
[ "$(nm "$PROFILED" 2>/dev/null | wc -l)" -gt 0 ] \
  || die "$PROFILED has no symbols: the release profile must keep ipamd's (Cargo.toml)"

WORK=$(mktemp -d /tmp/vpc-cni-hot.XXXXXX)
BOX=$REPO/scripts/vpc-box.sh
TAG=hot$$
declare -a BOXES=() NETNS=()
cleanup() {
  local b ns
  for b in "${BOXES[@]}"; do "$BOX" down --name "$b" >/dev/null 2>&1 || true; done
  for ns in "${NETNS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# The box runs $BIN_DIR/ipamd: the daemon (no arguments) under callgrind, its subcommands
# (the box's health checks) as they are.
mkdir -p "$WORK/bin" "$WORK/cg"
cat >"$WORK/bin/ipamd" <<EOF
#!/bin/sh
[ \$# -eq 0 ] || exec "$PROFILED" "\$@"
exec valgrind --tool=callgrind --callgrind-out-file="$WORK/cg/\$\$" --dump-instr=no \\
  --compress-strings=no --compress-pos=no --demangle=no "$PROFILED"
EOF
chmod +x "$WORK/bin/ipamd"
ln -s "$DIST/vpc-cni" "$CARGO_TARGET_DIR/release/vpc-sim" "$WORK/bin/"
export VPC_CNI_BIN_DIR=$WORK/bin

pool() { ip netns exec "$1" curl -sf --max-time 30 http://127.0.0.1:61679/v1/pool; }
available_at_least() { [ "$(pool "$1" | jq '.Totals.AvailableIPs')" -ge "$2" ]; }

# The plugin verb $2 for pods 1..$3 of node $1, one after another.
verbs() { # node verb count conf
  # shellcheck disable=SC2016
  ip netns exec "$1" bash -c '
    for i in $(seq "$3"); do
      CNI_COMMAND=$2 CNI_CONTAINERID=hot$i CNI_NETNS=/run/netns/$5-p$i CNI_IFNAME=eth0 \
        CNI_PATH=$6 "$6/vpc-cni" <"$4" >/dev/null 2>&1 || [ "$2" != ADD ] || exit 1
    done' _ "$1" "$2" "$3" "$4" "$TAG" "$WORK/bin" || die "an $2 failed on $1"
}

# One scenario: a box whose ipamd runs under callgrind; callgrind's two dumps land in
# $WORK/cg/<pid>.1 (the start) and <pid>.2 (the daemon at work).
scenario() { # name pods ipamd-env...
  local name=$TAG$1 pods=$2 json node sock pid i; shift 2
  local -a env=()
  for i in "$@"; do env+=(--ipamd-env "$i"); done
  say "scenario $name: starting ipamd under callgrind"
  BOXES+=("$name")
  json=$("$BOX" up --name "$name" --instance-type m5.24xlarge --subnet 10.0.0.0/20 \
    --ipamd-env WARM_IP_TARGET=10 --ipamd-env MINIMUM_IP_TARGET=$((pods + 10)) "${env[@]}" 2>"$WORK/$name.err") \
    || { cat "$WORK/$name.err" >&2; die "the box of scenario $name did not come up"; }
  node=$(jq -r '.nodes[0].netns' <<<"$json"); sock=$(jq -r '.nodes[0].ipamd_socket' <<<"$json")
  pid=$(jq -r '.nodes[0].ipamd_pid' <<<"$json")
  # ipamd serves: the start is over. Filling the pool is work a node does all its life.
  callgrind_control --dump=start "$pid" >/dev/null
  wait_for 300 available_at_least "$node" $((pods + 10)) \
    || die "scenario $name: the pool never held $((pods + 10)) addresses"
  jq -c --arg s "$sock" --arg log "$WORK/$name-plugin.log" \
    '(.plugins[0] | .ipamdSocket = $s | .pluginLogFile = $log) + {cniVersion, name}' \
    "$REPO/config/10-vpc-cni.conflist" >"$WORK/$name.json"
  for i in $(seq "$pods"); do ip netns add "$TAG-p$i"; NETNS+=("$TAG-p$i"); done
  say "scenario $name: $pods ADDs, CHECK, STATUS, GC, the endpoints, $pods DELs, the timers"
  verbs "$node" ADD "$pods" "$WORK/$name.json"
  verbs "$node" CHECK 10 "$WORK/$name.json"
  verbs "$node" STATUS 1 "$WORK/$name.json"
  ip netns exec "$node" curl -sf http://127.0.0.1:61678/metrics >/dev/null
  for i in enis pods pool eni-configs networkutils-env-settings ipamd-env-settings; do
    # Some answer 404 on this node (no ENIConfig without the cluster): read, not checked.
    ip netns exec "$node" curl -s "http://127.0.0.1:61679/v1/$i" >/dev/null
  done
  verbs "$node" DEL "$pods" "$WORK/$name.json"
  verbs "$node" GC 1 "$WORK/$name.json"
  for i in $(seq "$pods"); do ip netns del "$TAG-p$i"; done
  NETNS=()
  sleep 180
  ip netns exec "$node" curl -sf http://127.0.0.1:61678/metrics >/dev/null
  callgrind_control --dump=work "$pid" >/dev/null
  "$BOX" down --name "$name" >/dev/null 2>&1 || true
  BOXES=()
}

# An m5.24xlarge takes 250 pods on secondary addresses; with prefix delegation ipamd keeps to
# the 110 pods the kubelet's default allows.
scenario secondary 250
scenario prefix 100 ENABLE_PREFIX_DELEGATION=true WARM_PREFIX_TARGET=1

nm "$PROFILED" | awk 'NF == 3 && $2 ~ /^[tTwW]$/ {print $3}' >"$WORK/symbols"
python3 - "$WORK/symbols" "$OUT" "$WORK"/cg/*.1 "$WORK"/cg/*.2 <<'EOF'
import re, sys

symbols_file, out, *dumps = sys.argv[1:]
symbols = set(open(symbols_file).read().split())

def ran(path):
    """The functions of the binary a callgrind dump saw run, in its order ('N marks a
    recursion level, not another function)."""
    seen = {}
    for line in open(path):
        if line.startswith("fn="):
            name = re.sub(r"'\d+$", "", line[3:].strip())
            if name in symbols:
                seen.setdefault(name, None)
    return list(seen)

# Each group sorted by name: within one, the order does not matter (all of it is mapped in),
# and a profile taken again then differs only by the names that came or went.
work = sorted({f for d in dumps if d.endswith(".2") for f in ran(d)})
start_only = sorted({f for d in dumps if d.endswith(".1") for f in ran(d)} - set(work))
with open(out, "w") as f:
    f.write("# Generated by scripts/hot-code.sh: the order in which lld places ipamd's functions\n")
    f.write(f"# (ipamd/build.rs). {len(work)} functions a working node runs, then {len(start_only)} only its start runs.\n")
    for name in work + start_only:
        f.write(name + "\n")
print(f"{len(work)} working, {len(start_only)} start-only functions")
EOF
say "wrote $OUT"
