#!/usr/bin/env bash
# Every fleet scenario at its full size (scripts/fleet.sh), its figures written to
# docs/reports/fleet.md with the command that produced them, and its plot to
# docs/reports/fleet-NAME.png.
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
SCENARIOS=(launch churn scarcity throttle fragmented)
for s in "${SCENARIOS[@]}"; do
  say "scenario $s"
  "$REPO/scripts/fleet.sh" --scenario "$s" --seed "$SEED" --json --plot "$REPO/docs/reports/fleet-$s.png" >"$out/$s.json" &
  pids+=($!)
done
for pid in "${pids[@]}"; do
  wait "$pid" || die "a scenario failed (see above)"
done

row() { # file side name
  jq -r --arg side "$2" --arg name "$3" '.[$side] | "| \($name) | \(.ec2_calls_per_node * 10 | round / 10) | \(.throttled_calls) | \(.pods_placed) / \(.pods_bound) | \(.pods_failed) | \(.pods_failed_throttling) | \(.pods_delayed) | \(.pods_with_failed_add) | \(.address_p50_ms) | \(.address_p99_ms) | \(.idle_addresses) |"' "$1"
}
fragment_row() { # file side name
  jq -r --arg side "$2" --arg name "$3" '.[$side] | "| \($name) | \(.pods_placed_while_fragmented) / \(.pods_bound_while_fragmented) | \(.prefix_addresses_at_end) | \(.secondary_addresses_at_end) |"' "$1"
}
{
  echo "# Fleet simulation: ipamd beside the Go CNI's algorithm"
  echo
  echo "Written by \`scripts/fleet-report.sh --seed $SEED\` on $(date -u +%Y-%m-%d) ($(nproc) cores)."
  echo "Each scenario: \`scripts/fleet.sh --scenario NAME --seed $SEED --json --plot docs/reports/fleet-NAME.png\`. What the simulator"
  echo "is, what each figure means and what it leaves out: [the notes below](#how-the-simulation-works)."
  for s in "${SCENARIOS[@]}"; do
    f=$out/$s.json
    echo
    echo "## $s: $(jq -r '"\(.nodes) nodes, \(.simulated_seconds / 60) min simulated in \(.wall_seconds | round) s"' "$f")"
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
