#!/usr/bin/env bash
# Every fleet scenario at its full size (scripts/fleet.sh), and the launch again with prefix
# delegation and with custom networking, its figures written to docs/reports/fleet.md with the
# command that produced them, and its plot to docs/reports/fleet-NAME.png.
# Needs no root; takes tens of minutes on two cores (launch and churn run 1,000 nodes).
#
#   scripts/fleet-report.sh [--seed S]
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SEED=1
while [ $# -gt 0 ]; do
  case $1 in
    --seed) SEED=${2:-}; shift 2;;
    *) die "unknown argument '$1' (usage: scripts/fleet-report.sh [--seed S])";;
  esac
done
[[ "$SEED" =~ ^[0-9]+$ ]] || die "--seed must be a number"
ensure_packages jq:jq
# The plots' labels are drawn with DejaVu Sans.
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || install_packages fonts-dejavu-core

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Built once, then the scenarios side by side (each runs on one core).
"$REPO/scripts/fleet.sh" --help >/dev/null
pids=()
# Each run: its name (its section, its plot docs/reports/fleet-NAME.png), then the scenario
# and its options.
RUNS=(
  "launch:launch"
  "churn:churn"
  "scarcity:scarcity"
  "throttle:throttle"
  "fragmented:fragmented"
  "launch-pd:launch --prefix-delegation"
  "launch-cn:launch --custom-networking"
)
command_of() { # run -> its fleet.sh command line, as written in the report
  echo "scripts/fleet.sh --scenario ${1#*:} --seed $SEED --json --plot docs/reports/fleet-${1%%:*}.png"
}
for run in "${RUNS[@]}"; do
  name=${run%%:*}
  say "$name"
  # shellcheck disable=SC2086 # the scenario and its options are words
  "$REPO/scripts/fleet.sh" --scenario ${run#*:} --seed "$SEED" --json --plot "$REPO/docs/reports/fleet-$name.png" >"$out/$name.json" &
  pids+=($!)
done
for pid in "${pids[@]}"; do
  wait "$pid" || die "a scenario failed (see above)"
done

row() { # file side name
  jq -r --arg side "$2" --arg name "$3" '.[$side] | "| \($name) | \(.ec2_calls_per_node * 10 | round / 10) | \(.throttled_calls) | \(.pods_placed) / \(.pods_bound) | \(.pods_failed) | \(.pods_failed_throttling) | \(.pods_delayed) | \(.pods_with_failed_add) | \(.address_p50_ms // "never") | \(.address_p99_ms // "never") | \(.idle_addresses) |"' "$1"
}
fragment_row() { # file side name
  jq -r --arg side "$2" --arg name "$3" '.[$side] | "| \($name) | \(.pods_placed_while_fragmented) / \(.pods_bound_while_fragmented) | \(.prefix_addresses_at_end) | \(.secondary_addresses_at_end) |"' "$1"
}
held_row() { # file side name
  jq -r --arg side "$2" --arg name "$3" '.[$side] | "| \($name) | \(.prefix_addresses_at_end) | \(.secondary_addresses_at_end) |"' "$1"
}
subnet_row() { # file side name
  jq -r --arg side "$2" --arg name "$3" '.[$side] | "| \($name) | \(.pods_in_eni_config_subnets) | \(.pods_in_node_subnets) |"' "$1"
}
{
  echo "# Fleet simulation: ipamd beside the Go CNI's algorithm"
  echo
  echo "Written by \`scripts/fleet-report.sh --seed $SEED\` on $(date -u +%Y-%m-%d) ($(nproc) cores)."
  echo "Each section gives the command that produced it. What the simulator"
  echo "is, what each figure means and what it leaves out: [the notes below](#how-the-simulation-works)."
  for run in "${RUNS[@]}"; do
    s=${run%%:*}
    f=$out/$s.json
    echo
    echo "## $(jq -r '[.scenario] + (if .prefix_delegation then ["prefix delegation"] else [] end) + (if .custom_networking then ["custom networking"] else [] end) | join(", ")' "$f"): $(jq -r '"\(.nodes) nodes, \(.simulated_seconds / 60) min simulated in \(.wall_seconds | round) s"' "$f")"
    echo
    echo "\`$(command_of "$run")\`"
    echo
    echo "| | EC2 calls per node | throttled calls | pods placed | pods failed | of them by throttling | pods delayed (> 5 s) | pods with a failed ADD | address p50 (ms) | address p99 (ms) | idle addresses at the end |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    row "$f" ours "ours (ipamd)"
    if jq -e '.ours_without_scarcity_mode' "$f" >/dev/null; then
      row "$f" ours_without_scarcity_mode "ours, SUBNET_SCARCITY_MODE=false"
    fi
    row "$f" go_cni "the Go CNI's algorithm"
    echo
    if jq -e '.healed_at_seconds' "$f" >/dev/null; then
      healed=$(jq -r '.healed_at_seconds' "$f")
      echo "Every node runs with \`ENABLE_PREFIX_DELEGATION=true\`, \`WARM_PREFIX_TARGET=1\`. Every /28 block of the"
      echo "subnet holds someone else's address until ${healed} s, when they go:"
      echo
      echo "| | pods placed while fragmented (before ${healed} s) | addresses in /28 prefixes at the end | secondary /32s at the end |"
      echo "|---|---|---|---|"
      fragment_row "$f" ours "ours (ipamd)"
      fragment_row "$f" go_cni "the Go CNI's algorithm"
      echo
    elif jq -e '.prefix_delegation' "$f" >/dev/null; then
      echo "Both sides run with prefix delegation (\`ENABLE_PREFIX_DELEGATION=true\`, \`WARM_PREFIX_TARGET=1\`, max pods 110)."
      echo "What the nodes' ENIs hold at the end, as EC2 has it:"
      echo
      echo "| | addresses in /28 prefixes at the end | secondary /32s at the end |"
      echo "|---|---|---|"
      held_row "$f" ours "ours (ipamd)"
      held_row "$f" go_cni "the Go CNI's algorithm"
      echo
    fi
    if jq -e '.custom_networking' "$f" >/dev/null; then
      echo "Both sides run with custom networking: each node's ENIConfig names a pod subnet beside its"
      echo "subnet, in the same AZ, and the primary ENI serves no pod. Where the placed pods' addresses are:"
      echo
      echo "| | pods in the ENIConfig's subnets | pods in the nodes' subnets |"
      echo "|---|---|---|"
      subnet_row "$f" ours "ours (ipamd)"
      subnet_row "$f" go_cni "the Go CNI's algorithm"
      echo
    fi
    echo "![$s: pods with an address over time](fleet-$s.png)"
    echo
    echo "EC2 calls by API:"
    echo
    for side in ours go_cni; do
      echo "- $side: $(jq -r --arg side "$side" '.[$side].calls_by_api | to_entries | map("\(.key) \(.value)") | join(", ")' "$f")"
    done
  done
  echo
  sed -n '/^## How the simulation works/,$p' "$REPO/docs/reports/fleet.md"
} >"$out/fleet.md"
grep -q '^## How the simulation works' "$out/fleet.md" || die "docs/reports/fleet.md lost its notes section"
mv "$out/fleet.md" "$REPO/docs/reports/fleet.md"
say "wrote docs/reports/fleet.md"
