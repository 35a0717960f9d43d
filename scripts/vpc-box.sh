#!/usr/bin/env bash
# VPC-in-a-box: vpc-sim (EC2 + IMDS + a VPC of network namespaces) and one ipamd per node.
#
#   vpc-box.sh up --name NAME [--nodes N] [--instance-type TYPE] [--ipamd-env KEY=VALUE]...
#                 [--subnet CIDR[,az=AZ][,tag=KEY=VALUE]...[,nodes=N]]... [--vpc-secondary-cidr CIDR]...
#                 [--security-group NAME]... [--imds-lag-ms MS] [--extra-instance-type NAME:ENIS:IPV4]...
#                 [--outside-ip IP] [--attach-latency-ms MS] [--ip-family ipv4|ipv6|dual]
#                 [--kube [--ipamd daemonset [--image FILE]]]
#       Starts everything, returns once every ipamd is ready (serving, under custom networking),
#       prints one JSON object on stdout. Every node has CNI directories of its own in the run
#       dir (cni_conf_dir, cni_bin_dir): the shipped conflist pointed at its ipamd and its plugin
#       log, and the plugins it names.
#       --ip-family (default ipv4) gives the VPC an IPv6 /56 and each subnet a /64 (ipv6,
#       dual), and ipamd its mode: ipv6 is aws-node's IPv6 mode (ENABLE_IPv6=true,
#       ENABLE_IPv4=false: pods get an address of a /80 on the primary ENI), dual gives pods
#       both an IPv4 and an IPv6 address. --ipamd-env settings come after and win.
#       --kube adds Kubernetes (scripts/kube-box.sh): a control plane in NAME-cp and containerd +
#       kubelet on every node calling vpc-cni; returns once every node is Ready. The first
#       time it builds the kube cache (scripts/kube-build.sh, minutes). With --ip-family ipv6
#       the cluster is IPv6 (API server at 2001:db8:ffff:113::10, services fd00:172:20::/108,
#       InternalIPs the nodes' primary IPv6 addresses); with dual it is dual-stack (both
#       service ranges, the IPv6DualStack gate, IPv4 InternalIPs).
#       --ipamd daemonset (with --kube) starts no ipamd itself: it loads the image (FILE, else
#       the one scripts/image.sh builds) on every node and applies config/kubernetes/ with a
#       small overlay, so each node's kubelet runs ipamd as the DaemonSet's pod, which installs
#       the plugin and the conflist into the node's own directories. Returns once the
#       DaemonSet has rolled out and every node is Ready. `ipamd_pid` is then null.
#   vpc-box.sh down --name NAME
#       Stops and removes everything `up` made (the processes it recorded, whatever the
#       environment now); names what it could not stop or remove and then exits 1.
#   vpc-box.sh stop-ipamd --name NAME --node I [--kill]
#   vpc-box.sh start-ipamd --name NAME --node I [--ipamd-env KEY=VALUE]... [--ipamd-unset KEY]...
#       Stop (SIGTERM, or SIGKILL with --kill) or start one node's ipamd with the environment
#       `up` gave it; start-ipamd waits until it is ready and prints its pid. --ipamd-env and
#       --ipamd-unset change that saved environment first (set KEY, remove KEY), for this
#       start and the next ones: a re-configuration, as an operator's edit of the DaemonSet.
#   vpc-box.sh kubectl --name NAME -- ARGS...
#       kubectl ARGS as the administrator of a box made with --kube.
#   vpc-box.sh doctor --name NAME --node I [-- ARGS...]
#       `ipamd doctor ARGS` on node I, as ipamd runs there: in the node's namespace with
#       ipamd's saved environment and the node's CNI directories (cni_conf_dir, cni_bin_dir in
#       the box JSON), or, with --ipamd daemonset, in the node's DaemonSet pod (kubectl exec).
#       Prints what the doctor prints and exits with its status: 0 healthy, 1 degraded,
#       2 broken, 3 when the doctor could not run.
#   vpc-box.sh load-image --name NAME --image FILE
#       Loads an image archive (scripts/image.sh, or any OCI archive) into every node's
#       containerd on a --kube box, whether its ipamd runs as a process or as the DaemonSet.
#   vpc-box.sh deploy --name NAME --tag TAG
#       Applies the DaemonSet (config/kubernetes/ and the box's overlay) with image
#       localhost/vpc-cni:TAG, loaded beforehand, and waits for its rollout.
#
# Nothing is created in the machine's own network namespace: the VPC, the nodes and their
# addresses live in NAME-vpc and NAME-node<i>. Root is required.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=scripts/kube-box.sh
source "$(dirname "${BASH_SOURCE[0]}")/kube-box.sh"

RUN_ROOT=${VPC_BOX_RUN_DIR:-/run/vpc-box}

# The header comment above, whatever its length.
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

check_name() {
  [[ "$1" =~ ^[A-Za-z0-9_-]{1,24}$ ]] || die "--name must be 1-24 characters of [A-Za-z0-9_-], got '$1'"
}

node_field() { jq -r --argjson i "$2" ".nodes[\$i - 1].$3" "$1/sim/sim.json"; }

# What the box runs is recorded in $dir/processes, one process a line: PID START ROLE PROGRAM.
# START (field 22 of /proc/PID/stat, clock ticks since boot) pins the pid to that one process:
# a pid reused after ours died has another start time and is never signalled. `down` stops
# exactly what is recorded, whatever VPC_CNI_BIN_DIR or PATH it runs with; PROGRAM is only for
# the report.

# The fields of /proc/PID/stat from field 3 on (field 2, the command name, may hold spaces and
# parentheses); nothing when there is no such process.
stat_fields() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  echo "${stat##*) }"
}

# Whether the process recorded as PID started at START has ended (a zombie has).
gone() {
  local fields
  read -r -a fields <<<"$(stat_fields "$1")"
  [ "${fields[19]:-}" != "$2" ] || [ "${fields[0]}" = Z ]
}

# Records a process the box started: record DIR PID ROLE PROGRAM. One that has already ended
# is not recorded: there is nothing to stop.
record() {
  local fields
  read -r -a fields <<<"$(stat_fields "$2")"
  [ -n "${fields[19]:-}" ] || return 0
  echo "$2 ${fields[19]} $3 $4" >>"$1/processes"
}

# Signals one recorded process and waits up to 10 s for it to end, then SIGKILLs it and waits
# up to 5 s more; fails if it is still there.
stop_process() { # pid start signal
  gone "$1" "$2" && return 0
  kill "-$3" "$1" 2>/dev/null || true
  wait_for 10 gone "$1" "$2" && return 0
  kill -KILL "$1" 2>/dev/null || true
  wait_for 5 gone "$1" "$2"
}

# Stops the recorded processes whose ROLE matches the glob PATTERN with SIGNAL (then SIGKILL)
# and forgets them. Each one that could not be stopped is named on stderr and kept in the
# record (so `down` can be run again), and the function fails.
stop_recorded() { # dir signal pattern
  local file=$1/processes pid start role program failed=0 kept=()
  [ -f "$file" ] || return 0
  # All of them first, so they wind down together: each wait below is then mostly over.
  while read -r pid start role program; do
    # shellcheck disable=SC2053 # a glob on purpose
    if [[ $role == $3 ]] && ! gone "$pid" "$start"; then kill "-$2" "$pid" 2>/dev/null || true; fi
  done <"$file"
  while read -r pid start role program; do
    # shellcheck disable=SC2053 # a glob on purpose
    if [[ $role == $3 ]]; then
      stop_process "$pid" "$start" "$2" && continue
      echo "vpc-box: could not stop $role (pid $pid, $program)" >&2
      failed=1
    fi
    kept+=("$pid $start $role $program")
  done <"$file"
  if [ ${#kept[@]} -eq 0 ]; then rm -f "$file"; else printf '%s\n' "${kept[@]}" >"$file"; fi
  return $failed
}

# The pid of the recorded process with ROLE.
recorded_pid() { awk -v role="$2" '$3 == role { pid = $1 } END { print pid }' "$1/processes"; }

# Whether the box's ipamd runs as the DaemonSet's pods (up --ipamd daemonset).
daemonset_box() { [ -f "$1/kube/image-tag" ]; }

# Sets (KEY=VALUE) or removes (-KEY) variables in node I's saved ipamd environment.
edit_ipamd_env() { # dir i change...
  local file=$1/node$2/ipamd.env change key
  shift 2
  [ -f "$file" ] || die "no node $2 in box $(basename "$1")"
  for change in "$@"; do
    key=${change#-}; key=${key%%=*}
    [[ $key =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "not a variable name: '$key'"
    grep -v "^$key=" "$file" >"$file.new" || true
    [[ $change == -* ]] || echo "$change" >>"$file.new"
    mv "$file.new" "$file"
  done
}

# Starts node I's ipamd from its saved environment; prints the pid once it is ready.
start_ipamd() {
  local dir=$1 i=$2 node netns pid env
  node=$dir/node$i
  ! daemonset_box "$dir" || die "box $(basename "$dir") runs ipamd as a DaemonSet: use kubectl (delete its pod, or the DaemonSet)"
  [ -f "$node/ipamd.env" ] || die "no node $i in box $(basename "$dir")"
  netns=$(node_field "$dir" "$i" netns)
  mapfile -t env <"$node/ipamd.env"
  # env -i: ipamd sees exactly the saved environment, nothing of the caller's. Not a process
  # group leader, setsid execs in place, as do ip and env: $! is ipamd's pid.
  setsid ip netns exec "$netns" env -i "${env[@]}" "$BIN_DIR/ipamd" \
    >>"$node/ipamd.stderr" 2>&1 </dev/null &
  pid=$!
  record "$dir" "$pid" "ipamd-node$i" "$BIN_DIR/ipamd"
  # A restart that lost its stored state cools every free address down for 30 s: with no
  # room to grow, ipamd is ready only after that. Under custom networking a node is ready only
  # once the cluster holds its ENIConfig, which a test creates after `up`: then ipamd serving
  # at all (the liveness check) is what `up` waits for.
  local health=(health --socket "$node/ipamd.sock")
  grep -qx 'AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG=true' "$node/ipamd.env" && health+=(--live)
  if ! wait_for 60 ip netns exec "$netns" "$BIN_DIR/ipamd" "${health[@]}"; then
    echo "--- $node/ipamd.log (tail)" >&2; tail -n 30 "$node/ipamd.log" >&2 2>/dev/null || true
    echo "--- $node/ipamd.stderr (tail)" >&2; tail -n 10 "$node/ipamd.stderr" >&2 || true
    die "ipamd of node $i did not become ready within 60 s"
  fi
  echo "$pid"
}

stop_ipamd() { # dir node signal
  ! daemonset_box "$1" || die "box $(basename "$1") runs ipamd as a DaemonSet: use kubectl (delete its pod, or the DaemonSet)"
  stop_recorded "$1" "$3" "ipamd-node$2" || die "ipamd of node $2 is still running"
}

# The shipped conflist with the plugin pointed at ipamd's socket SOCK and logging to LOG.
render_conflist() { # sock log
  jq --arg sock "$1" --arg log "$2" \
    '.plugins[0].ipamdSocket = $sock | .plugins[0].pluginLogFile = $log' "$REPO/config/10-vpc-cni.conflist"
}

# Where node I's CNI directory KIND (conf: the conflists, bin: the plugins) is on the machine:
# with Kubernetes the node's own /etc/cni/net.d or /opt/cni/bin (KUBE_NODE_PATHS), which its
# containerd reads; else the one `up` made in the node's run dir.
node_cni_dir() { # dir i conf|bin
  local path=/etc/cni/net.d
  [ "$3" = conf ] || path=/opt/cni/bin
  if [ -f "$(kube_kubeconfig "$1")" ]; then
    kube_node_path "$1" "$2" "$path"
  else
    echo "$1/node$2/cni/${path##*/}"
  fi
}

# Gives node I of a box without Kubernetes the CNI directories a runtime on it would read, in
# its run dir: the shipped conflist pointed at the node's ipamd and plugin log, and the plugins
# the conflist names (vpc-cni as built; the others from the machine's reference plugins, when
# installed).
plain_node_cni() { # dir i
  local conf bin type
  conf=$(node_cni_dir "$1" "$2" conf)
  bin=$(node_cni_dir "$1" "$2" bin)
  mkdir -p "$conf" "$bin"
  render_conflist "$1/node$2/ipamd.sock" "$1/node$2/plugin.log" >"$conf/10-vpc-cni.conflist"
  while read -r type; do
    if [ "$type" = vpc-cni ]; then
      ln -s "$(realpath "$BIN_DIR/vpc-cni")" "$bin/vpc-cni"
    elif [ -x "/usr/lib/cni/$type" ]; then
      ln -s "/usr/lib/cni/$type" "$bin/$type"
    fi
  done < <(jq -r '.plugins[].type' "$REPO/config/10-vpc-cni.conflist")
}

# Runs `ipamd doctor ARGS` on node I as ipamd runs there and exits with the doctor's status
# (0 healthy, 1 degraded, 2 broken, 3 could not run).
doctor() { # dir i args...
  local dir=$1 i=$2 node pod rc=0 netns env
  shift 2
  node=$dir/node$i
  if daemonset_box "$dir"; then
    [ -f "$node/k8s_node" ] || die "no node $i in box $(basename "$dir")"
    pod=$(kube_kubectl "$dir" "$(basename "$dir")" -n "$KUBE_DS_NS" get pods \
      -l "app.kubernetes.io/name=$KUBE_DS" --field-selector "spec.nodeName=$(cat "$node/k8s_node")" \
      -o jsonpath='{.items[0].metadata.name}') || die "could not list the $KUBE_DS pods"
    [ -n "$pod" ] || die "no $KUBE_DS pod on node $i"
    kube_kubectl "$dir" "$(basename "$dir")" -n "$KUBE_DS_NS" exec "$pod" -c ipamd -- \
      /app/ipamd doctor "$@" || rc=$?
    exit "$rc"
  fi
  [ -f "$node/ipamd.env" ] || die "no node $i in box $(basename "$dir")"
  netns=$(node_field "$dir" "$i" netns)
  mapfile -t env <"$node/ipamd.env"
  # exec: the doctor's output and exit status are the script's own.
  exec ip netns exec "$netns" env -i "${env[@]}" "$BIN_DIR/ipamd" doctor \
    --cni-conf-dir "$(node_cni_dir "$dir" "$i" conf)" --cni-bin-dir "$(node_cni_dir "$dir" "$i" bin)" "$@"
}

# Stops everything the box recorded and removes its namespaces and run dir. What it cannot stop
# or remove is named, the run dir is kept (run `down` again) and it fails.
down() {
  local dir=$1 ns failed=0
  [ -d "$dir" ] || return 0
  # Kubernetes first: its pods hold addresses and its kubelets would restart them...
  kube_down "$dir" || failed=1
  # ...then ipamd, while EC2 still answers; then vpc-sim, which removes the namespaces it made...
  stop_recorded "$dir" TERM 'ipamd-*' || failed=1
  stop_recorded "$dir" TERM '*' || failed=1
  # ...and anything left by a crash is removed here, but only the namespaces it recorded.
  if [ -f "$dir/namespaces" ]; then
    while read -r ns; do
      if [ -z "$ns" ] || [ ! -e "/run/netns/$ns" ]; then continue; fi
      if ! ip netns del "$ns" 2>/dev/null; then
        echo "vpc-box: could not remove namespace $ns" >&2
        failed=1
      fi
    done <"$dir/namespaces"
  fi
  if [ $failed -ne 0 ]; then
    echo "vpc-box: kept $dir; run down again once the above is dealt with" >&2
    return 1
  fi
  rm -rf "$dir"
}

# The tentative (duplicate address detection) IPv6 addresses of the box's namespaces, one
# "NAMESPACE ADDRESS" a line; none once every link can carry traffic.
tentative() {
  local ns
  while read -r ns; do
    [ -e "/run/netns/$ns" ] || continue
    ip -n "$ns" -6 -o addr show tentative 2>/dev/null | awk -v ns="$ns" '{print ns, $4}'
  done <"$1/namespaces"
}

none_tentative() { [ -z "$(tentative "$1")" ]; }

# Returns once no address in the box's namespaces is tentative. The fabric turns DAD off before
# it makes a link, so this normally returns at once; it is the check that `up` never hands out
# a box whose links cannot yet carry a packet, as a still-tentative link-local address cannot.
links_settled() {
  local dir=$1
  wait_for 10 none_tentative "$dir" && return 0
  die "addresses still tentative (duplicate address detection) after 10 s: $(tentative "$dir" | paste -sd, -)"
}

up() {
  local name=$1 nodes=$2 itype=$3; shift 3
  local dir=$RUN_ROOT/$name sim_args=() envs=() i kube=0 k8s image="" tag=""
  while [ $# -gt 0 ]; do
    case $1 in
      --ip-family)
        sim_args+=(--ip-family "$2")
        case $2 in
          ipv6) envs=(ENABLE_IPv6=true ENABLE_IPv4=false "${envs[@]}");;
          dual) envs=(ENABLE_IPv6=true ENABLE_IPv4=true "${envs[@]}");;
        esac
        shift 2;;
      --ipamd-env) envs+=("$2"); shift 2;;
      --sim) sim_args+=("$2" "$3"); shift 3;;
      --kube) kube=1; shift;;
      --image) image=$2; shift 2;;
    esac
  done
  [ -e "$dir" ] && die "box $name exists already ($dir); run: $0 down --name $name"
  mkdir -p "$dir/sim"
  trap 'echo "vpc-box: up failed, removing what it made" >&2; down "$dir"' EXIT
  say "starting vpc-sim ($nodes node(s), $itype)"
  setsid "$BIN_DIR/vpc-sim" --name "$name" --state-dir "$dir/sim" --mode fabric \
    --nodes "$nodes" --instance-type "$itype" "${sim_args[@]}" >"$dir/vpc-sim.log" 2>&1 </dev/null &
  record "$dir" $! vpc-sim "$BIN_DIR/vpc-sim"
  # Recorded before they exist, so `down` can remove them even if vpc-sim dies half way.
  { echo "$name-vpc"; echo "$name-out"; for i in $(seq "$nodes"); do echo "$name-node$i"; done; } >"$dir/namespaces"
  if ! wait_for 30 test -f "$dir/sim/sim.json"; then
    tail -n 20 "$dir/vpc-sim.log" >&2
    die "vpc-sim did not come up within 30 s"
  fi
  [ $kube -eq 0 ] || kube_cp_up "$dir" "$name"
  if [ -n "$image" ]; then
    # The tag the archive's index names, which the DaemonSet's image must match.
    tag=$(tar -xOf "$image" ./index.json | jq -r '.manifests[0].annotations["io.containerd.image.name"] // empty')
    [[ $tag == localhost/vpc-cni:* ]] || die "$image is not a localhost/vpc-cni image (scripts/image.sh)"
    echo "${tag#*:}" >"$dir/kube/image-tag"
    [ ${#envs[@]} -eq 0 ] || printf '%s\n' "${envs[@]}" >"$dir/ipamd-env"
  fi
  for i in $(seq "$nodes"); do
    mkdir -p "$dir/node$i"
    [ $kube -eq 1 ] || plain_node_cni "$dir" "$i"
    if [ $kube -eq 1 ]; then
      k8s=$(kube_node_name "$(node_field "$dir" "$i" netns)" "$(node_field "$dir" "$i" imds_endpoint)") \
        || die "could not read node $i's local-hostname from its IMDS"
      echo "$k8s" >"$dir/node$i/k8s_node"
    fi
    [ -z "$image" ] || continue
    {
      echo "PATH=/usr/sbin:/usr/bin:/sbin:/bin"
      echo "AWS_EC2_ENDPOINT=$(node_field "$dir" "$i" ec2_endpoint)"
      echo "AWS_EC2_METADATA_SERVICE_ENDPOINT=$(node_field "$dir" "$i" imds_endpoint)"
      echo "IPAMD_SOCKET=$dir/node$i/ipamd.sock"
      echo "IPAMD_STATE_DIR=$dir/node$i/state"
      echo "AWS_VPC_K8S_CNI_LOG_FILE=$dir/node$i/ipamd.log"
      # The node's "aws-node checkpoint": never the machine's own.
      echo "AWS_VPC_K8S_CNI_BACKING_STORE=$dir/node$i/aws-node-ipam.json"
      if [ $kube -eq 1 ]; then
        echo "MY_NODE_NAME=$k8s"
        echo "KUBECONFIG=$(kube_kubeconfig "$dir")"
      fi
      [ ${#envs[@]} -eq 0 ] || printf '%s\n' "${envs[@]}"
    } >"$dir/node$i/ipamd.env"
    say "starting ipamd on node $i"
    start_ipamd "$dir" "$i" >/dev/null
  done
  local kube_info=null k8s_nodes=null
  if [ $kube -eq 1 ]; then
    kube_cp_ready "$dir" "$name"
    for i in $(seq "$nodes"); do kube_node_up "$dir" "$name" "$i" "$image"; done
    if [ -n "$image" ]; then
      say "deploying the $KUBE_DS DaemonSet (localhost/vpc-cni:$(cat "$dir/kube/image-tag"))"
      kube_deploy "$dir" "$name" "$(cat "$dir/kube/image-tag")"
      kube_daemonset_ready "$dir" "$name"
    fi
    kube_nodes_ready "$dir" "$name" "$nodes"
    kube_proxies_ready "$dir" "$nodes"
    kube_info=$(kube_json "$dir" "$name")
    k8s_nodes=$(for i in $(seq "$nodes"); do cat "$dir/node$i/k8s_node"; done | jq -R . | jq -s .)
  fi
  links_settled "$dir"
  trap - EXIT
  local pids ds=false confs bins
  pids=$(for i in $(seq "$nodes"); do recorded_pid "$dir" "ipamd-node$i"; done | jq -s .)
  confs=$(for i in $(seq "$nodes"); do node_cni_dir "$dir" "$i" conf; done | jq -R . | jq -s .)
  bins=$(for i in $(seq "$nodes"); do node_cni_dir "$dir" "$i" bin; done | jq -R . | jq -s .)
  [ -z "$image" ] || ds=true
  # With the DaemonSet, ipamd's files are where its hostPath volumes put them on the node:
  # in the node's own directories (KUBE_NODE_PATHS).
  jq --arg dir "$dir" --argjson pids "$pids" --argjson kube "$kube_info" --argjson k8s "$k8s_nodes" \
    --argjson ds "$ds" --argjson confs "$confs" --argjson bins "$bins" '{
      name, ec2_endpoint, vpc_netns, outside, run_dir: $dir,
      ip_family: (.ip_family // "ipv4"),
      vpc: {id: .vpc.id, cidrs: .vpc.cidrs, ipv6_cidr: .vpc.ipv6_cidr},
      subnets: [.subnets[] | {id, cidr, ipv6_cidr, az, tags}],
      security_groups,
      nodes: [.nodes[] | "\($dir)/node\(.index)" as $n | "\($n)/kube/paths" as $p | {
        netns, instance_id, instance_type, primary_ip, primary_ipv6, primary_eni, subnet_id, az,
        cni_conf_dir: $confs[.index - 1],
        cni_bin_dir: $bins[.index - 1]
      } + if $ds then {
        ipamd_socket: "\($p)/run/vpc-cni/ipamd.sock",
        state_dir: "\($p)/run/vpc-cni/state",
        ipamd_log: "\($p)/var/log/aws-routed-eni/ipamd.log",
        go_checkpoint: "\($p)/run/aws-node/ipam.json",
        ipamd_env: null,
        ipamd_pid: null,
        plugin_log: "\($p)/var/log/aws-routed-eni/plugin.log"
      } else {
        ipamd_socket: "\($n)/ipamd.sock",
        state_dir: "\($n)/state",
        ipamd_log: "\($n)/ipamd.log",
        go_checkpoint: "\($n)/aws-node-ipam.json",
        ipamd_env: "\($n)/ipamd.env",
        ipamd_pid: $pids[.index - 1],
        plugin_log: "\($n)/plugin.log"
      } end + if $k8s == null then {} else {
        k8s_node: $k8s[.index - 1],
        kubelet_log: "\($n)/kube/kubelet.log",
        kube_proxy_log: "\($n)/kube/kube-proxy.log",
        containerd_log: "\($n)/kube/containerd.log"
      } end]
    } + if $kube == null then {} else {kube: $kube} end' "$dir/sim/sim.json" >"$dir/box.json"
  cat "$dir/box.json"
}

cmd=${1:-}; [ -n "$cmd" ] || usage; shift
name="" nodes=1 itype=t3.medium node="" kill_sig=TERM rest=() kube=0 pass_args=()
ipamd_mode=process image_file="" tag="" env_changes=()
while [ $# -gt 0 ]; do
  case $1 in
    --name) name=$2; shift 2;;
    --nodes) nodes=$2; shift 2;;
    --instance-type) itype=$2; shift 2;;
    --ipamd-env)
      [[ "$2" == *=* ]] || die "--ipamd-env takes KEY=VALUE, got '$2'"
      rest+=(--ipamd-env "$2"); env_changes+=("$2"); shift 2;;
    --ipamd-unset) env_changes+=("-$2"); shift 2;;
    --subnet|--vpc-secondary-cidr|--security-group|--imds-lag-ms|--extra-instance-type|--outside-ip|--attach-latency-ms)
      rest+=(--sim "$1" "$2"); shift 2;;
    --ip-family)
      case ${2:-} in
        ipv4|ipv6|dual) rest+=(--ip-family "$2");;
        *) die "--ip-family takes ipv4, ipv6 or dual, got '${2:-}'";;
      esac
      shift 2;;
    --node) node=$2; shift 2;;
    --kill) kill_sig=KILL; shift;;
    --kube) kube=1; rest+=(--kube); shift;;
    --ipamd)
      case ${2:-} in
        process) ;;
        daemonset) ipamd_mode=daemonset;;
        *) die "--ipamd takes process or daemonset, got '${2:-}'";;
      esac
      shift 2;;
    --image) image_file=$2; shift 2;;
    --tag) tag=$2; shift 2;;
    --) shift; pass_args=("$@"); break;;
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
  up)
    ensure_box_packages
    need_binaries
    if [ $kube -eq 1 ]; then
      ensure_packages openssl:openssl nsenter:util-linux
      [ -x /usr/lib/cni/portmap ] || install_packages containernetworking-plugins
      "$REPO/scripts/kube-build.sh" >/dev/null || die "the kube cache $KUBE_CACHE could not be built"
    fi
    if [ "$ipamd_mode" = daemonset ]; then
      [ $kube -eq 1 ] || die "--ipamd daemonset needs --kube (the kubelet runs the DaemonSet)"
      if [ -z "$image_file" ]; then
        image_file=$("$REPO/scripts/image.sh") || die "scripts/image.sh could not build the image"
      fi
      [ -f "$image_file" ] || die "--image $image_file: no such file"
      rest+=(--image "$(realpath "$image_file")")
    elif [ -n "$image_file" ]; then
      die "--image goes with --ipamd daemonset"
    fi
    up "$name" "$nodes" "$itype" "${rest[@]}";;
  load-image)
    [ -f "$(kube_kubeconfig "$dir")" ] || die "box $name has no Kubernetes (it was not made with up --kube)"
    [ -f "$image_file" ] || die "--image FILE is required and must exist"
    for i in $(seq "$(jq '.nodes | length' "$dir/sim/sim.json")"); do
      kube_import "$dir" "$i" "$(realpath "$image_file")" || die "could not load $image_file on node $i"
    done;;
  deploy)
    daemonset_box "$dir" || die "box $name runs no DaemonSet (up --kube --ipamd daemonset)"
    [[ $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "--tag TAG is required (an image tag), got '$tag'"
    echo "$tag" >"$dir/kube/image-tag"
    kube_deploy "$dir" "$name" "$tag"
    kube_daemonset_ready "$dir" "$name";;
  down) down "$dir";;
  stop-ipamd) [ -n "$node" ] || die "--node is required"; stop_ipamd "$dir" "$node" "$kill_sig";;
  start-ipamd)
    [ -n "$node" ] || die "--node is required"
    need_binaries
    ! daemonset_box "$dir" || die "box $name runs ipamd as a DaemonSet: use kubectl (delete its pod, or the DaemonSet)"
    [ ${#env_changes[@]} -eq 0 ] || edit_ipamd_env "$dir" "$node" "${env_changes[@]}"
    start_ipamd "$dir" "$node";;
  kubectl)
    [ -f "$(kube_kubeconfig "$dir")" ] || die "box $name has no Kubernetes (it was not made with up --kube)"
    kube_kubectl "$dir" "$name" "${pass_args[@]}";;
  doctor)
    [[ $node =~ ^[1-9][0-9]?$ ]] || die "--node I is required (a node number), got '$node'"
    [ -d "$dir" ] || die "no box $name ($dir)"
    daemonset_box "$dir" || need_binaries
    doctor "$dir" "$node" "${pass_args[@]}";;
  *) die "unknown command '$cmd' (up, down, stop-ipamd, start-ipamd, kubectl, load-image, deploy, doctor)";;
esac
