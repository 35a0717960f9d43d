#!/usr/bin/env bash
# Checks what an operator installs: the Kubernetes manifests, the conflist, the IAM policy and
# the Dockerfile. scripts/test.sh runs it; it also runs alone, without root.
#   1. every YAML under config/ passes `kubernetes-validate --strict` for Kubernetes 1.25.0 and
#      1.37.0 (PyPI kubernetes-validate, installed into the suite's venv);
#   2. config/10-vpc-cni.conflist is JSON with cniVersion 1.0.0 and network name aws-cni, runs
#      vpc-cni first with the socket the DaemonSet gives ipamd, and chains portmap; the
#      DaemonSet's containers (init included) agree on ENABLE_IPv4 and ENABLE_IPv6;
#   3. config/iam-policy.json allows exactly the EC2 operations that crates/cloud/src calls:
#      every `.op()` there that is an operation of aws-sdk-ec2 (the SDK's own list, from its
#      sources at the version Cargo.lock pins), named as the SDK names it (`describe_subnets` ->
#      ec2:DescribeSubnets);
#   4. the Dockerfile: its build stage runs scripts/build-release.sh, as this script does; every
#      file it copies out of target/dist is one that build made; every file it copies from the
#      build context exists and is not excluded by .dockerignore; ENTRYPOINT runs a binary the
#      final stage copies; every plugin type in the conflist is shipped in /app/cni-bin.
#      docker cannot run on our machines (no daemon, no registry), which is why this exists.
#      Files copied from a Debian stage (the core plugins) are not checked here.
#
# Environment:
#   VPC_CNI_VENV              Python venv for kubernetes-validate (default ~/.cache/vpc-cni/venv,
#                             the one scripts/test.sh uses for moto; created if missing)
#   VPC_CNI_DIST_DIR          where the release artifacts are looked for (default
#                             $CARGO_TARGET_DIR/dist, where scripts/build-release.sh puts them)
#   CHECK_CONFIG_SKIP_BUILD=1 skip the release build; the artifacts must already be in
#                             VPC_CNI_DIST_DIR. A cold release build takes about 15 minutes
#                             on 2 cores (aws-sdk-ec2).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"

KUBERNETES_VALIDATE_PIN="kubernetes-validate==1.37.0"
KUBERNETES_VERSIONS=(1.25.0 1.37.0)
VENV=${VPC_CNI_VENV:-$HOME/.cache/vpc-cni/venv}
DIST_DIR=${VPC_CNI_DIST_DIR:-$CARGO_TARGET_DIR/dist}
# The Dockerfile's build stage must run this, as the suite and scripts/image.sh do.
BUILD_SCRIPT=scripts/build-release.sh
CONFLIST=config/10-vpc-cni.conflist
DAEMONSET=config/kubernetes/daemonset.yaml
POLICY=config/iam-policy.json
DOCKERFILE=Dockerfile
# Where `ipamd entrypoint` takes the plugins and the conflist from, in the image.
IMAGE_CNI_BIN=/app/cni-bin
IMAGE_CONFLIST=/app/10-vpc-cni.conflist

declare -a PROBLEMS=()
problem() { PROBLEMS+=("$*"); }
# Stops with every problem found so far, if there is any.
check_problems() {
  [ ${#PROBLEMS[@]} -eq 0 ] && return 0
  printf 'error: %s\n' "${PROBLEMS[@]}" >&2
  exit 1
}

# --- 1. kubernetes-validate -------------------------------------------------------------------
say "config: installing $KUBERNETES_VALIDATE_PIN"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "$KUBERNETES_VALIDATE_PIN"
PY="$VENV/bin/python"

mapfile -t MANIFESTS < <(find config -type f \( -name '*.yaml' -o -name '*.yml' \) | sort)
[ ${#MANIFESTS[@]} -gt 0 ] || die "no Kubernetes manifests (*.yaml) under config/"
for version in "${KUBERNETES_VERSIONS[@]}"; do
  say "config: kubernetes-validate --strict -k $version ${MANIFESTS[*]}"
  "$VENV/bin/kubernetes-validate" --strict --quiet -k "$version" "${MANIFESTS[@]}" \
    || problem "the manifests above do not validate against Kubernetes $version"
done
check_problems

# --- 2. the conflist --------------------------------------------------------------------------
say "config: $CONFLIST"
# The Python below prints one problem a line. Its output is assigned (out=$(...)) so that a
# crash stops this script (set -e), which neither a process substitution nor a $(...) argument
# would do.
report_lines() {
  local line
  while IFS= read -r line; do
    [ -z "$line" ] || problem "$line"
  done <<<"$1"
}
out=$("$PY" - "$CONFLIST" "$DAEMONSET" <<'EOF'
import json, sys
import yaml

conflist_path, daemonset_path = sys.argv[1:3]
try:
    with open(conflist_path) as f:
        conf = json.load(f)
except (OSError, ValueError) as e:
    print(f"{conflist_path}: not readable JSON: {e}")
    sys.exit()
if not isinstance(conf, dict):
    print(f"{conflist_path}: expected a JSON object")
    sys.exit()
# 1.0.0, not 1.1.0: libcni 1.1 (containerd 1.6/1.7, cnitool, podman 4) rejects a 1.1.0 result,
# and the portmap we ship (containernetworking-plugins 1.1.1) refuses 1.1.0 configs.
if conf.get("cniVersion") != "1.0.0":
    print(f"{conflist_path}: cniVersion is {conf.get('cniVersion')!r}, expected '1.0.0'")
# The Go CNI's network name: the runtime's cached results and GC are per network.
if conf.get("name") != "aws-cni":
    print(f"{conflist_path}: name is {conf.get('name')!r}, expected 'aws-cni'")
plugins = conf.get("plugins")
if not isinstance(plugins, list) or not plugins or not all(isinstance(p, dict) for p in plugins):
    print(f"{conflist_path}: plugins must be a non-empty list of objects")
    sys.exit()
types = [p.get("type") for p in plugins]
if types[0] != "vpc-cni":
    print(f"{conflist_path}: the first plugin is {types[0]!r}, expected 'vpc-cni'")
if "portmap" not in types[1:]:
    print(f"{conflist_path}: no portmap plugin chained after vpc-cni (types: {types})")
elif not plugins[types.index("portmap", 1)].get("capabilities", {}).get("portMappings"):
    print(f"{conflist_path}: portmap lacks capabilities.portMappings = true")

# The plugin (on the host) must dial the socket ipamd (in the pod) listens on.
socket = plugins[0].get("ipamdSocket", "/run/vpc-cni/ipamd.sock")
try:
    with open(daemonset_path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
except (OSError, yaml.YAMLError) as e:
    print(f"{daemonset_path}: not readable YAML: {e}")
    sys.exit()
envs = [
    e
    for d in docs
    if d.get("kind") == "DaemonSet"
    for c in d["spec"]["template"]["spec"]["containers"]
    for e in c.get("env", [])
    if e.get("name") == "IPAMD_SOCKET"
]
if not envs:
    print(f"{daemonset_path}: no DaemonSet container sets IPAMD_SOCKET")
for e in envs:
    if e.get("value") != socket:
        print(f"{daemonset_path}: IPAMD_SOCKET is {e.get('value')!r} but {conflist_path} "
              f"has ipamdSocket {socket!r}")

# The init container sets the node up for the pods' family (IPv6 mode needs its sysctls, which
# ipamd's unprivileged container cannot write): both containers name the same one.
for d in docs:
    if d.get("kind") != "DaemonSet":
        continue
    spec = d["spec"]["template"]["spec"]
    for var in ("ENABLE_IPv4", "ENABLE_IPv6"):
        values = {
            c.get("name"): next((e.get("value") for e in c.get("env", []) if e.get("name") == var), None)
            for c in spec.get("initContainers", []) + spec.get("containers", [])
        }
        if len(set(values.values())) != 1 or None in values.values():
            print(f"{daemonset_path}: {var} must be set to one value in every container: {values}")
EOF
)
report_lines "$out"
check_problems

# --- the release build (the Dockerfile's, checked in 4; it also unpacks the SDK read in 3) -----
if [ "${CHECK_CONFIG_SKIP_BUILD:-0}" = 1 ]; then
  say "config: CHECK_CONFIG_SKIP_BUILD=1: using the artifacts in $DIST_DIR as they are"
else
  say "config: $BUILD_SCRIPT (the Dockerfile's build)"
  "$BUILD_SCRIPT" >/dev/null
fi

# --- 3. the IAM policy ------------------------------------------------------------------------
say "config: $POLICY against the EC2 calls in crates/cloud/src"
# The SDK's sources, at the version Cargo.lock pins, as cargo unpacked them for the build.
SDK_VERSION=$(awk '$0 == "name = \"aws-sdk-ec2\"" { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
[ -n "$SDK_VERSION" ] || die "Cargo.lock pins no aws-sdk-ec2"
SDK_OPS=""
for dir in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/aws-sdk-ec2-"$SDK_VERSION"/src/operation; do
  if [ -d "$dir" ]; then SDK_OPS=$dir; break; fi
done
[ -n "$SDK_OPS" ] || die "aws-sdk-ec2 $SDK_VERSION's sources are not under ${CARGO_HOME:-$HOME/.cargo}/registry/src: run 'cargo fetch' first"

# Every `.name()` in the crate's sources, comment lines left out; a name is an EC2 operation if
# the SDK has a module for it, whose operation struct carries the API name.
declare -A CALLED=()
while IFS= read -r call; do
  name=${call#.}; name=${name%"()"}
  [ -f "$SDK_OPS/$name.rs" ] || continue
  op=$(sed -nE 's/^pub struct ([A-Za-z0-9]+);$/\1/p' "$SDK_OPS/$name.rs" | head -n 1)
  [ -n "$op" ] || die "cannot read the operation name in $SDK_OPS/$name.rs"
  CALLED["ec2:$op"]=$name
done < <(find crates/cloud/src -name '*.rs' -exec grep -hvE '^[[:space:]]*//' {} + \
           | grep -oE '\.[a-z][a-z0-9_]*\(\)' | sort -u)
[ ${#CALLED[@]} -gt 0 ] || die "found no EC2 call in crates/cloud/src: has the client moved?"

ALLOWED=$("$PY" - "$POLICY" <<'EOF'
import json, sys

path = sys.argv[1]
try:
    with open(path) as f:
        policy = json.load(f)
except (OSError, ValueError) as e:
    print(f"!{path}: not readable JSON: {e}")
    sys.exit()
statements = policy.get("Statement", [])
statements = [statements] if isinstance(statements, dict) else statements
for s in statements:
    if s.get("Effect") != "Allow":
        continue
    actions = s.get("Action", [])
    actions = [actions] if isinstance(actions, str) else actions
    for a in actions:
        print(a)
    # Tags only on network interfaces, as AWS's AmazonEKS_CNI_Policy scopes them.
    if "ec2:CreateTags" in actions:
        resources = s.get("Resource")
        resources = [resources] if isinstance(resources, str) else resources
        if resources != ["arn:aws:ec2:*:*:network-interface/*"]:
            print(f"!{path}: ec2:CreateTags must be limited to "
                  f"arn:aws:ec2:*:*:network-interface/*, not {resources}")
EOF
)
declare -A IN_POLICY=()
while IFS= read -r action; do  # not report_lines: the lines here are actions
  case $action in
    '') ;;
    '!'*) problem "${action#!}" ;;
    *) IN_POLICY["$action"]=1 ;;
  esac
done <<<"$ALLOWED"
# An unreadable policy has nothing to compare.
[ ${#IN_POLICY[@]} -gt 0 ] || { problem "$POLICY allows no action"; check_problems; }
for action in "${!CALLED[@]}"; do
  [ -n "${IN_POLICY[$action]:-}" ] \
    || problem "$POLICY lacks $action, which crates/cloud/src calls (.${CALLED[$action]}())"
done
for action in "${!IN_POLICY[@]}"; do
  [ -n "${CALLED[$action]:-}" ] \
    || problem "$POLICY allows $action, which crates/cloud/src never calls"
done
check_problems

# --- 4. the Dockerfile ------------------------------------------------------------------------
say "config: $DOCKERFILE against $DIST_DIR and the repository"
[ -f "$DOCKERFILE" ] || die "$REPO/$DOCKERFILE is missing"

# True if .dockerignore keeps $1 (a path relative to the context) out of the build context.
# Handles plain paths and shell globs, which covers what .dockerignore files usually hold.
dockerignored() {
  local path=$1 pattern
  [ -f .dockerignore ] || return 1
  while IFS= read -r pattern; do
    pattern=${pattern%%#*}; pattern=${pattern//[[:space:]]/}
    pattern=${pattern#/}; pattern=${pattern%/}; pattern=${pattern#\*\*/}
    if [ -z "$pattern" ] || [ "${pattern:0:1}" = '!' ]; then continue; fi
    # shellcheck disable=SC2053 # the pattern is a glob on purpose
    if [[ $path == $pattern || $path == $pattern/* || $path == */$pattern || $path == */$pattern/* ]]; then
      return 0
    fi
  done < .dockerignore
  return 1
}

declare -A STAGES=()       # stage name -> its index
declare -A FINAL_COPIES=() # destination in the last stage -> what put it there
declare -a ARTIFACTS=()
stage=-1
built=0
entrypoint=""
entrypoints=0
while IFS= read -r instruction; do
  read -ra words <<<"$instruction"
  keyword=${words[0]^^}
  args=("${words[@]:1}")
  case $keyword in
    FROM)
      stage=$((stage + 1))
      # A new stage forgets what earlier stages copied: only the last one is the image.
      FINAL_COPIES=()
      if [ ${#args[@]} -ge 3 ] && [ "${args[-2]^^}" = AS ]; then
        STAGES["${args[-1]}"]=$stage
      fi
      ;;
    RUN)
      [[ " ${args[*]} " == *" $BUILD_SCRIPT "* ]] && built=1
      ;;
    ENTRYPOINT)
      entrypoints=$((entrypoints + 1))
      entrypoint=$(sed -nE 's/^\[ ?"([^"]+)".*/\1/p' <<<"${args[*]}")
      [ -n "$entrypoint" ] || problem "$DOCKERFILE: ENTRYPOINT must be in exec form (a JSON list): ${args[*]}"
      ;;
    COPY|ADD)
      from=""
      while [ ${#args[@]} -gt 0 ] && [ "${args[0]:0:2}" = -- ]; do
        case ${args[0]} in --from=*) from=${args[0]#--from=} ;; esac
        args=("${args[@]:1}")
      done
      if [ ${#args[@]} -lt 2 ] || [ "${args[0]:0:1}" = '[' ]; then
        problem "$DOCKERFILE: cannot read '$instruction': write it as $keyword [--from=stage] src... dest"
        continue
      fi
      dest=${args[-1]}
      for src in "${args[@]:0:${#args[@]}-1}"; do
        target=$dest
        [ "${dest: -1}" = / ] && target=$dest${src##*/}
        FINAL_COPIES["$target"]="$keyword ${from:+--from=$from }$src"
        if [[ $src == *://* ]]; then
          continue
        elif [ -z "$from" ]; then
          rel=${src#./}; rel=${rel#/}
          if [ "$rel" != . ] && [ "$rel" != "" ]; then
            [ -e "$rel" ] || problem "$DOCKERFILE copies $src from the build context, but $REPO/$rel does not exist"
            if dockerignored "$rel"; then
              problem "$DOCKERFILE copies $src from the build context, but .dockerignore excludes it"
            fi
          fi
        elif [ -n "${STAGES[$from]:-}" ] && [[ $src =~ (^|/)target/dist/([^/]+)$ ]]; then
          artifact=${BASH_REMATCH[2]}
          ARTIFACTS+=("$artifact")
          if [ ! -f "$DIST_DIR/$artifact" ] || [ ! -x "$DIST_DIR/$artifact" ]; then
            problem "$DOCKERFILE copies $src from stage $from, but the build made no $DIST_DIR/$artifact"
          fi
        fi
      done
      ;;
  esac
done <<<"$(dockerfile_instructions "$DOCKERFILE")"

[ $stage -ge 0 ] || problem "$DOCKERFILE has no FROM"
[ $built -eq 1 ] || problem "$DOCKERFILE has no 'RUN $BUILD_SCRIPT': the suite would check other artifacts than the image ships"
[ ${#ARTIFACTS[@]} -gt 0 ] || problem "$DOCKERFILE copies nothing out of a stage's target/dist"
if [ $entrypoints -eq 0 ]; then
  problem "$DOCKERFILE has no ENTRYPOINT"
elif [ -z "$entrypoint" ]; then
  : # reported above
elif [ -z "${FINAL_COPIES[$entrypoint]:-}" ]; then
  problem "$DOCKERFILE: ENTRYPOINT runs $entrypoint, which the final stage does not copy"
elif [[ ${FINAL_COPIES[$entrypoint]} != *target/dist/* ]]; then
  problem "$DOCKERFILE: ENTRYPOINT runs $entrypoint, which is not a built artifact (${FINAL_COPIES[$entrypoint]})"
fi
[ -n "${FINAL_COPIES[$IMAGE_CONFLIST]:-}" ] \
  || problem "$DOCKERFILE does not put the conflist at $IMAGE_CONFLIST, where 'ipamd entrypoint' reads it"
TYPES=$("$PY" -c 'import json, sys; [print(p["type"]) for p in json.load(open(sys.argv[1]))["plugins"]]' "$CONFLIST")
while IFS= read -r type; do
  [ -n "${FINAL_COPIES[$IMAGE_CNI_BIN/$type]:-}" ] \
    || problem "$CONFLIST runs plugin '$type', but $DOCKERFILE does not ship $IMAGE_CNI_BIN/$type"
done <<<"$TYPES"
check_problems

say "config: all checks passed"
