#!/usr/bin/env bash
# Counts how many times one cold run of scripts/test.sh compiles a crate (default aws-sdk-ec2):
# the distinct units of that crate across the cargo commands the suite runs, read from cargo's
# unit graph (nightly `--unit-graph`, which plans without building). Two commands share a unit
# only if its mode, profile, features and whole dependency tree agree, as cargo's build hash
# does.
#   count-sdk-builds.sh [CRATE]     prints each distinct unit with the commands that share it
# Exit status 3: no nightly toolchain (the unit graph is unstable).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"
crate=${1:-aws-sdk-ec2}
cargo +nightly --version >/dev/null 2>&1 || { echo "SKIPPED: no nightly toolchain (--unit-graph is unstable)"; exit 3; }
host=$(rustc -vV | sed -n 's/^host: //p')
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
graph() { local name=$1; shift; cargo +nightly -Z unstable-options "$@" --unit-graph >"$dir/$name.json"; }
# The commands of scripts/test.sh and scripts/build-release.sh, in their order.
graph clippy check --workspace --all-targets
graph build build --workspace
graph test test --workspace --no-run
graph release-ipamd build --release --locked -p ipamd
graph release-plugin build --release --locked -p cni-plugin --target "$host"
python3 - "$crate" "$dir"/*.json <<'PY'
import json, pathlib, sys
crate = sys.argv[1].replace("-", "_")
units = {}
for path in sys.argv[2:]:
    graph = json.loads(pathlib.Path(path).read_text())["units"]
    memo = {}
    def key(i):
        if i not in memo:
            u = graph[i]
            profile = {k: v for k, v in u["profile"].items() if k != "name"}
            memo[i] = json.dumps([u["pkg_id"], u["target"]["name"], u["target"]["kind"], u["mode"],
                                  sorted(u["features"]), profile, u.get("platform"),
                                  sorted(key(d["index"]) for d in u["dependencies"])], sort_keys=True)
        return memo[i]
    for i, u in enumerate(graph):
        if u["target"]["name"] == crate and "lib" in u["target"]["kind"]:
            units.setdefault(key(i), []).append(pathlib.Path(path).stem)
for n, (k, cmds) in enumerate(units.items(), 1):
    mode, profile = json.loads(k)[3], json.loads(k)[5]
    print(f"{n}. {mode} opt-level {profile['opt_level']}: {', '.join(cmds)}")
print(f"{sys.argv[1]}: {len(units)} compilation(s) in one cold run")
PY
