#!/usr/bin/env bash
# VPC-in-a-box: vpc-sim (EC2 + IMDS + a VPC of network namespaces) and one ipamd per node.
#
#   vpc-box.sh up --name NAME [--nodes N] [--instance-type TYPE] [--ipamd-env KEY=VALUE]...
#                 [--subnet CIDR]... [--imds-lag-ms MS] [--extra-instance-type NAME:ENIS:IPV4]...
#                 [--outside-ip IP] [--attach-latency-ms MS]
#       Starts everything, returns once every ipamd is ready, prints one JSON object on stdout.
#   vpc-box.sh down --name NAME
#       Stops and removes everything `up` made.
#   vpc-box.sh stop-ipamd --name NAME --node I [--kill]
#   vpc-box.sh start-ipamd --name NAME --node I
#       Stop (SIGTERM, or SIGKILL with --kill) or start one node's ipamd with the environment
#       `up` gave it; start-ipamd waits until it is ready and prints its pid.
#
# Nothing is created in the machine's own network namespace: the VPC, the nodes and their
# addresses live in NAME-vpc and NAME-node<i>. Root is required.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RUN_ROOT=${VPC_BOX_RUN_DIR:-/run/vpc-box}

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

check_name() {
  [[ "$1" =~ ^[A-Za-z0-9_-]{1,24}$ ]] || die "--name must be 1-24 characters of [A-Za-z0-9_-], got '$1'"
}

node_field() { jq -r --argjson i "$2" ".nodes[\$i - 1].$3" "$1/sim/sim.json"; }

# Starts node I's ipamd from its saved environment; prints the pid once it is ready.
start_ipamd() {
  local dir=$1 i=$2 node netns pid env
  node=$dir/node$i
  [ -f "$node/ipamd.env" ] || die "no node $i in box $(basename "$dir")"
  netns=$(node_field "$dir" "$i" netns)
  mapfile -t env <"$node/ipamd.env"
  # env -i: ipamd sees exactly the saved environment, nothing of the caller's. Not a process
  # group leader, setsid execs in place, as do ip and env: $! is ipamd's pid.
  setsid ip netns exec "$netns" env -i "${env[@]}" "$BIN_DIR/ipamd" \
    >>"$node/ipamd.stderr" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$node/ipamd.pid"
  if ! wait_for 30 ip netns exec "$netns" "$BIN_DIR/ipamd" health --socket "$node/ipamd.sock"; then
    echo "--- $node/ipamd.log (tail)" >&2; tail -n 30 "$node/ipamd.log" >&2 2>/dev/null || true
    echo "--- $node/ipamd.stderr (tail)" >&2; tail -n 10 "$node/ipamd.stderr" >&2 || true
    die "ipamd of node $i did not become ready within 30 s"
  fi
  echo "$pid"
}

stop_pid() { # pid signal program: signals, waits up to 10 s, then SIGKILLs
  local pid=$1 sig=$2 program=$3
  kill -0 "$pid" 2>/dev/null || return 0
  # After a crash the pid may have been reused: signal only the program the box started.
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$program" || return 0
  kill "-$sig" "$pid" 2>/dev/null || true
  wait_for 10 bash -c "! kill -0 $pid" || { kill -KILL "$pid" 2>/dev/null || true; wait_for 5 bash -c "! kill -0 $pid" || true; }
}

stop_ipamd() {
  local node=$1/node$2 sig=$3
  [ -f "$node/ipamd.pid" ] || return 0
  stop_pid "$(cat "$node/ipamd.pid")" "$sig" "$BIN_DIR/ipamd"
  rm -f "$node/ipamd.pid"
}

down() {
  local dir=$1 node ns
  [ -d "$dir" ] || return 0
  for node in "$dir"/node*; do
    [ -d "$node" ] && stop_ipamd "$dir" "${node##*node}" TERM
  done
  # vpc-sim removes the namespaces it made when it stops...
  [ -f "$dir/vpc-sim.pid" ] && stop_pid "$(cat "$dir/vpc-sim.pid")" TERM "$BIN_DIR/vpc-sim"
  # ...and anything left by a crash is removed here, but only the namespaces it recorded.
  if [ -f "$dir/namespaces" ]; then
    while read -r ns; do
      if [ -n "$ns" ]; then ip netns del "$ns" 2>/dev/null || true; fi
    done <"$dir/namespaces"
  fi
  rm -rf "$dir"
}

up() {
  local name=$1 nodes=$2 itype=$3; shift 3
  local dir=$RUN_ROOT/$name sim_args=() envs=() i
  while [ $# -gt 0 ]; do
    case $1 in
      --ipamd-env) envs+=("$2"); shift 2;;
      --sim) sim_args+=("$2" "$3"); shift 3;;
    esac
  done
  [ -e "$dir" ] && die "box $name exists already ($dir); run: $0 down --name $name"
  mkdir -p "$dir/sim"
  trap 'echo "vpc-box: up failed, removing what it made" >&2; down "$dir"' EXIT
  say "starting vpc-sim ($nodes node(s), $itype)"
  setsid "$BIN_DIR/vpc-sim" --name "$name" --state-dir "$dir/sim" --mode fabric \
    --nodes "$nodes" --instance-type "$itype" "${sim_args[@]}" >"$dir/vpc-sim.log" 2>&1 </dev/null &
  echo $! >"$dir/vpc-sim.pid"
  # Recorded before they exist, so `down` can remove them even if vpc-sim dies half way.
  { echo "$name-vpc"; echo "$name-out"; for i in $(seq "$nodes"); do echo "$name-node$i"; done; } >"$dir/namespaces"
  if ! wait_for 30 test -f "$dir/sim/sim.json"; then
    tail -n 20 "$dir/vpc-sim.log" >&2
    die "vpc-sim did not come up within 30 s"
  fi
  for i in $(seq "$nodes"); do
    mkdir -p "$dir/node$i"
    {
      echo "PATH=/usr/sbin:/usr/bin:/sbin:/bin"
      echo "AWS_EC2_ENDPOINT=$(node_field "$dir" "$i" ec2_endpoint)"
      echo "AWS_EC2_METADATA_SERVICE_ENDPOINT=$(node_field "$dir" "$i" imds_endpoint)"
      echo "IPAMD_SOCKET=$dir/node$i/ipamd.sock"
      echo "IPAMD_STATE_DIR=$dir/node$i/state"
      echo "AWS_VPC_K8S_CNI_LOG_FILE=$dir/node$i/ipamd.log"
      # The node's "aws-node checkpoint": never the machine's own.
      echo "AWS_VPC_K8S_CNI_BACKING_STORE=$dir/node$i/aws-node-ipam.json"
      [ ${#envs[@]} -eq 0 ] || printf '%s\n' "${envs[@]}"
    } >"$dir/node$i/ipamd.env"
    say "starting ipamd on node $i"
    start_ipamd "$dir" "$i" >/dev/null
  done
  trap - EXIT
  local pids
  pids=$(for i in $(seq "$nodes"); do cat "$dir/node$i/ipamd.pid"; done | jq -s .)
  jq --arg dir "$dir" --argjson pids "$pids" '{
      name, ec2_endpoint, vpc_netns, outside, run_dir: $dir,
      subnets: [.subnets[] | {id, cidr}],
      nodes: [.nodes[] | {
        netns, instance_id, instance_type, primary_ip, primary_eni,
        ipamd_socket: "\($dir)/node\(.index)/ipamd.sock",
        state_dir: "\($dir)/node\(.index)/state",
        ipamd_log: "\($dir)/node\(.index)/ipamd.log",
        go_checkpoint: "\($dir)/node\(.index)/aws-node-ipam.json",
        ipamd_env: "\($dir)/node\(.index)/ipamd.env",
        ipamd_pid: $pids[.index - 1]
      }]
    }' "$dir/sim/sim.json" >"$dir/box.json"
  cat "$dir/box.json"
}

cmd=${1:-}; [ -n "$cmd" ] || usage; shift
name="" nodes=1 itype=t3.medium node="" kill_sig=TERM rest=()
while [ $# -gt 0 ]; do
  case $1 in
    --name) name=$2; shift 2;;
    --nodes) nodes=$2; shift 2;;
    --instance-type) itype=$2; shift 2;;
    --ipamd-env)
      [[ "$2" == *=* ]] || die "--ipamd-env takes KEY=VALUE, got '$2'"
      rest+=(--ipamd-env "$2"); shift 2;;
    --subnet|--imds-lag-ms|--extra-instance-type|--outside-ip|--attach-latency-ms) rest+=(--sim "$1" "$2"); shift 2;;
    --node) node=$2; shift 2;;
    --kill) kill_sig=KILL; shift;;
    -h|--help) usage;;
    *) die "unknown argument '$1' (see $0 --help)";;
  esac
done
[ -n "$name" ] || die "--name is required"
check_name "$name"
[[ "$nodes" =~ ^[1-9][0-9]?$ ]] || die "--nodes must be 1-99, got '$nodes'"
need_root "vpc-box.sh"
dir=$RUN_ROOT/$name

case $cmd in
  up) ensure_box_packages; need_binaries; up "$name" "$nodes" "$itype" "${rest[@]}";;
  down) down "$dir";;
  stop-ipamd) [ -n "$node" ] || die "--node is required"; stop_ipamd "$dir" "$node" "$kill_sig";;
  start-ipamd) [ -n "$node" ] || die "--node is required"; need_binaries; start_ipamd "$dir" "$node";;
  *) die "unknown command '$cmd' (up, down, stop-ipamd, start-ipamd)";;
esac
