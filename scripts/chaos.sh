#!/usr/bin/env bash
# A crash-chaos round of your choosing: pods added and deleted in parallel on a VPC-in-a-box
# node while ipamd is SIGKILLed at random moments and restarted (tests/tests/it/chaos.rs, whose
# default round of 1,000 pods and 20 kills scripts/test.sh runs). A seed repeats a round's kill
# moments.
#
#   scripts/chaos.sh [--pods N] [--kills N] [--seed S]     (defaults: 1000 pods, 20 kills)
#
# Prints the figures (ADD failures while ipamd was down, time to agreement) and fails if two
# live pods ever shared an address, a DEL failed, or EC2, the store and the node disagree.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root "scripts/chaos.sh"

PODS=1000 KILLS=20 SEED=
while [ $# -gt 0 ]; do
  case $1 in
    --pods) PODS=${2:-}; shift 2;;
    --kills) KILLS=${2:-}; shift 2;;
    --seed) SEED=${2:-}; shift 2;;
    *) die "unknown argument '$1' (usage: scripts/chaos.sh [--pods N] [--kills N] [--seed S])";;
  esac
done
[[ "$PODS" =~ ^[1-9][0-9]*$ ]] || die "--pods must be a positive number"
[[ "$KILLS" =~ ^[0-9]+$ ]] || die "--kills must be a number"
[ -z "$SEED" ] || [[ "$SEED" =~ ^[1-9][0-9]*$ ]] || die "--seed must be a positive number"

ensure_box_packages
cd "$REPO"
say "chaos: $PODS pods, $KILLS SIGKILLs of ipamd"
VPC_CNI_CHAOS_PODS=$PODS VPC_CNI_CHAOS_KILLS=$KILLS VPC_CNI_CHAOS_SEED=$SEED \
  cargo nextest run --workspace --profile root --run-ignored only --no-capture -E 'package(e2e) & test(/^chaos::/)'
