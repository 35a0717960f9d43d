#!/usr/bin/env bash
# Coverage-guided fuzzing of the plugin's input parsers with cargo fuzz (libFuzzer), a bounded
# run per target starting from the committed seeds in fuzz/corpus/<target>/.
#
#   scripts/fuzz.sh [--secs N] [TARGET...]
#
#   --secs N    seconds per target (default 20)
#   TARGET      cni_conf, cni_args, ipam_frame (default: all of them, one after the other)
#
# The committed corpus never grows: each run works on a copy in a temporary directory. A crash
# is kept in $VPC_CNI_FUZZ_ARTIFACTS (default ~/.cache/vpc-cni/fuzz-artifacts) and printed in
# hex; the script then exits 1. Exit status 3 means SKIPPED: no nightly toolchain, which cargo
# fuzz needs. Builds go to $VPC_CNI_FUZZ_TARGET_DIR (default ~/.cache/vpc-cni/target-fuzz).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CARGO_FUZZ_PIN=0.13.2
TOOLCHAIN=${VPC_CNI_FUZZ_TOOLCHAIN:-nightly}
FUZZ_TARGET_DIR=${VPC_CNI_FUZZ_TARGET_DIR:-$HOME/.cache/vpc-cni/target-fuzz}
KEEP_DIR=${VPC_CNI_FUZZ_ARTIFACTS:-$HOME/.cache/vpc-cni/fuzz-artifacts}
ALL_TARGETS="cni_conf cni_args ipam_frame"
RSS_LIMIT_MB=2048
TIMEOUT_SECS=10   # one input taking this long is a hang

SECS=20
TARGETS=()
while [ $# -gt 0 ]; do
  case $1 in
    --secs) SECS=${2:-}; shift 2;;
    -*) die "unknown argument '$1' (usage: scripts/fuzz.sh [--secs N] [TARGET...])";;
    *) TARGETS+=("$1"); shift;;
  esac
done
[[ "$SECS" =~ ^[1-9][0-9]*$ ]] || die "--secs must be a positive number"
[ ${#TARGETS[@]} -gt 0 ] || read -ra TARGETS <<<"$ALL_TARGETS"
for t in "${TARGETS[@]}"; do
  [[ " $ALL_TARGETS " == *" $t "* ]] || die "unknown target '$t' (targets: $ALL_TARGETS)"
  [ -n "$(ls -A "$REPO/fuzz/corpus/$t" 2>/dev/null)" ] || die "no seeds in fuzz/corpus/$t"
done

command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust (rustup) first"
# cargo fuzz needs nightly (-Z sanitizer flags). No toolchain is downloaded here: say so instead.
CARGO=(cargo) RUSTC=(rustc)
if command -v rustup >/dev/null 2>&1 && rustup run "$TOOLCHAIN" rustc --version >/dev/null 2>&1; then
  CARGO=(cargo "+$TOOLCHAIN") RUSTC=(rustc "+$TOOLCHAIN")
elif ! rustc --version 2>/dev/null | grep -q nightly; then
  echo "SKIPPED: no nightly toolchain (cargo fuzz needs one)"
  exit 3
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  say "installing cargo-fuzz $CARGO_FUZZ_PIN"
  # Built in cargo's own temporary directory, not in the shared target dir lib.sh exports.
  env -u CARGO_TARGET_DIR cargo install --locked --quiet cargo-fuzz --version "$CARGO_FUZZ_PIN" \
    || die "could not install cargo-fuzz $CARGO_FUZZ_PIN"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vpc-cni-fuzz.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

HOST=$("${RUSTC[@]}" -vV | sed -n 's/^host: //p')
say "building fuzz targets (${CARGO[*]} fuzz build, target dir $FUZZ_TARGET_DIR)"
for t in "${TARGETS[@]}"; do
  "${CARGO[@]}" fuzz build --fuzz-dir "$REPO/fuzz" --target-dir "$FUZZ_TARGET_DIR" "$t" >&2
done

# Prints an artifact as hex, the first 4 KiB at most.
hex() {
  od -An -tx1 -v -N 4096 "$1" | tr -d ' \n'
  [ "$(wc -c <"$1")" -le 4096 ] || printf ' ... (%s bytes)' "$(wc -c <"$1")"
  echo
}

declare -a SUMMARY=()
FAILED=0
for t in "${TARGETS[@]}"; do
  corpus=$WORK/corpus-$t artifacts=$WORK/artifacts-$t log=$WORK/$t.log
  mkdir -p "$corpus" "$artifacts"
  cp "$REPO/fuzz/corpus/$t/"* "$corpus/"
  say "fuzzing $t for ${SECS}s from $(find "$corpus" -type f | wc -l) seeds"
  status=0
  "$FUZZ_TARGET_DIR/$HOST/release/$t" "$corpus" \
    -max_total_time="$SECS" -rss_limit_mb="$RSS_LIMIT_MB" -timeout="$TIMEOUT_SECS" \
    -artifact_prefix="$artifacts/" -print_final_stats=1 >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  cov=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*' || true)
  if [ "$status" -eq 0 ]; then
    SUMMARY+=("$t: ${SECS}s, ${execs:-?} execs (${rate:-?}/s), ${cov:-no coverage line}")
    continue
  fi
  FAILED=1
  tail -n 40 "$log" >&2
  SUMMARY+=("$t: FAILED (libFuzzer exit $status) after ${execs:-?} execs")
  mkdir -p "$KEEP_DIR/$t"
  for a in "$artifacts"/*; do
    [ -f "$a" ] || continue
    cp "$a" "$KEEP_DIR/$t/"
    echo "CRASH in $t: reproducer $KEEP_DIR/$t/$(basename "$a")"
    echo "  replay: $FUZZ_TARGET_DIR/$HOST/release/$t $KEEP_DIR/$t/$(basename "$a")"
    echo "  hex: $(hex "$a")"
  done
done

echo
echo "Fuzzing summary"
printf '  %s\n' "${SUMMARY[@]}"
exit $FAILED
