#!/usr/bin/env bash
# One fleet scenario: ipamd beside the Go CNI's algorithm as its code has it, on one simulated EC2
# account and a simulated clock (crates/fleet).
#
#   scripts/fleet.sh --scenario launch|churn|scarcity|throttle|fragmented [--nodes N]
#                    [--prefix-delegation] [--custom-networking] [--json] [--seed S] [--plot FILE]
#
#   launch     1,000 nodes launched within a minute, each given 20 to 40 pods
#   churn      1,000 nodes running 30 pods each, every pod replaced after a random lifetime
#              (10 min on average), for an hour
#   scarcity   200 nodes sharing one /17 that others already use to 95%, 3 to 9 pods each;
#              ipamd runs with and without subnet-scarcity mode
#   throttle   300 nodes launched while EC2 refuses every call for a minute
#   fragmented 200 nodes with prefix delegation (WARM_PREFIX_TARGET=1) in one /17 where every
#              /28 block holds someone else's address, so EC2 refuses every prefix; 10 to 30
#              pods each; halfway through the strays go
#
# Options, for both sides and any scenario, alone or together:
#   --prefix-delegation  pods on delegated /28s: ENABLE_PREFIX_DELEGATION=true,
#                        WARM_PREFIX_TARGET=1, max pods 110 (fragmented always runs so)
#   --custom-networking  pods on ENIs in an ENIConfig's subnet (one beside each node subnet,
#                        same AZ), never on the primary ENI: AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG
#                        for ours, custom_networking with that subnet for the Go CNI's model
#
# --nodes runs a smaller (or larger) fleet: up to 5,000 nodes in launch, churn and throttle
# (one /18 subnet per 250 nodes; past 1,000, a secondary /16 CIDR per 1,000 more), up to 400
# in fragmented. --json prints {"scenario", "nodes", "prefix_delegation",
# "custom_networking", "ours": {...}, "go_cni": {...}} with each side's figures; --plot draws
# the pods with an address over time. Needs no root. Builds the simulator (release) first.
# scripts/fleet-report.sh runs every scenario at full size, and the launch with each option,
# and writes docs/reports/fleet.md.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ $# -gt 0 ] || die "usage: scripts/fleet.sh --scenario launch|churn|scarcity|throttle|fragmented [--nodes N] [--prefix-delegation] [--custom-networking] [--json] [--seed S] [--plot FILE]"
(cd "$REPO" && cargo build --release --locked --quiet --workspace --bin fleet) \
  || die "could not build the fleet simulator"
exec "$CARGO_TARGET_DIR/release/fleet" "$@"
