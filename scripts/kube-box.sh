# shellcheck shell=bash
# kube-in-a-box: a real Kubernetes on VPC-in-a-box, sourced by vpc-box.sh (`up --kube`).
#
# The control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) lives in
# NAME-cp, attached to the VPC router NAME-vpc by a veth of its own and reached at
# $KUBE_API_IP, an address beyond the VPC, as an EKS public endpoint is. Every node runs
# containerd, a kubelet and kube-proxy (iptables mode) in its node namespace; containerd calls
# the shipped conflist (vpc-cni pointed at that node's ipamd, chained with portmap). Each of these namespaces has a holder
# process (`sleep`) that also owns a private mount namespace: what kubelet and containerd mount
# or write at the paths they hard-code lands in the box's run directory, never on the machine.
#
# Uses vpc-box.sh's record, stop_process, stop_recorded, node_field, render_conflist and lib.sh's
# helpers.

# The API endpoint (TEST-NET-3) and the link that carries it to the VPC (TEST-NET-1, next to
# vpc-sim's link to the outside at 192.0.2.0/30).
KUBE_API_IP=203.0.113.10
KUBE_LINK_VPC=192.0.2.5
KUBE_LINK_CP=192.0.2.6
KUBE_LINK_PREFIX=30
KUBE_API_PORT=6443
# Outside every VPC CIDR the box uses, as EKS picks 172.20.0.0/16 for VPCs in 10.0.0.0/8.
KUBE_SERVICE_CIDR=172.20.0.0/16
# With IPv6 (--ip-family ipv6|dual): the endpoint's IPv6 address (a documentation address in
# 2001:db8:8000::/33, the half vpc-sim leaves for what lies beyond the VPC; the VPC routes it
# to the control plane by a /128 more specific than its default route to the outside), the
# link-local addresses of the same veth, and a ULA service range: a /108, the largest
# kube-apiserver 1.20 takes.
KUBE_API_IP6=2001:db8:ffff:113::10
KUBE_LINK6_VPC=fe80::5
KUBE_LINK6_CP=fe80::6
KUBE_SERVICE_CIDR6=fd00:172:20::/108
# The global sysctls kubelet 1.20 rewrites at start (setupKernelTunables); each node sees a
# writable copy instead, so the machine's values never change (kernel.panic_on_oops=1 would
# turn any oops into a reboot).
KUBE_SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
# Paths kubelet and containerd use whatever their flags say (device plugin socket, pod logs,
# shim sockets, libcni's result cache), and the CNI directories a DaemonSet's hostPath names.
# Each node gets its own directory at each of them.
# The last three are the DaemonSet's other hostPaths (ipamd's socket and state, its logs and
# the plugin's, aws-node's checkpoint; /var/run is /run): with them a node's vpc-cni pod
# writes only into the box. Its /run/xtables.lock lands in the node's /run, a tmpfs of its
# own unless the machine has every /run path above (then it is the machine's lock file,
# which only serialises iptables runs).
KUBE_NODE_PATHS=(/var/lib/kubelet /var/lib/cni /var/log/pods /var/log/containers /run/containerd
  /opt/cni/bin /etc/cni/net.d /run/vpc-cni /var/log/aws-routed-eni /run/aws-node)
KUBE_IMAGES=(pause busybox)
# The DaemonSet's name and namespace (config/kubernetes/daemonset.yaml).
KUBE_DS=vpc-cni
KUBE_DS_NS=kube-system

kube_cp_netns() { echo "$1-cp"; }
kube_kubeconfig() { echo "$1/kube/admin.kubeconfig"; }

# The box's family (vpc-sim's ip_family): ipv4, ipv6 or dual.
kube_family() { jq -r '.ip_family // "ipv4"' "$1/sim/sim.json"; } # dir

# The API server's URL: its IPv6 address in an IPv6 cluster, else its IPv4 address.
kube_server() { # family
  if [ "$1" = ipv6 ]; then
    echo "https://[$KUBE_API_IP6]:$KUBE_API_PORT"
  else
    echo "https://$KUBE_API_IP:$KUBE_API_PORT"
  fi
}

# kubectl as the box's administrator, from the control-plane namespace. Its discovery cache
# is the box's, not ~/.kube's.
kube_kubectl() { # dir name args...
  local dir=$1 name=$2; shift 2
  nsenter --net="/run/netns/$(kube_cp_netns "$name")" "$KUBE_CACHE/bin/kubectl" \
    --kubeconfig "$(kube_kubeconfig "$dir")" --cache-dir "$dir/kube/cache" "$@"
}

# The node's private DNS name (ip-10-0-0-4.ec2.internal), from its IMDS as on EC2: kubelet
# registers under it, as on EKS.
kube_node_name() { # netns imds-endpoint
  local token
  token=$(ip netns exec "$1" curl -sf --max-time 5 -X PUT \
    -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' "$2/latest/api/token") || return 1
  ip netns exec "$1" curl -sf --max-time 5 -H "X-aws-ec2-metadata-token: $token" \
    "$2/latest/meta-data/local-hostname"
}

# Starts a `sleep` that holds network namespace NETNS and a mount namespace of its own whose
# mounts never propagate to the machine (the machine's still propagate in); records it as
# ROLE and prints its pid once the mount namespace exists.
kube_holder() { # dir netns role
  local pid sleep_bin
  sleep_bin=$(readlink -f "$(command -v sleep)")
  # Not `ip netns exec`: that remounts /sys, which hides /sys/fs/cgroup from kubelet and runc.
  setsid nsenter --net="/run/netns/$2" unshare -m --propagation slave "$sleep_bin" infinity \
    </dev/null >/dev/null 2>&1 &
  pid=$!
  record "$1" "$pid" "$3" "$sleep_bin"
  # nsenter and unshare exec in place: the pid runs sleep once both are done.
  wait_for 10 kube_runs "$pid" "$sleep_bin" || die "the namespace holder $3 did not start"
  echo "$pid"
}

kube_runs() { [ "$(readlink "/proc/$1/exe" 2>/dev/null)" = "$2" ]; }

# Starts PROGRAM in HOLDER's namespaces with only the given environment, appending its output
# to LOG, and records it as ROLE.
kube_start() { # dir holder role log program args...
  local dir=$1 holder=$2 role=$3 log=$4; shift 4
  setsid nsenter -t "$holder" -n -m -- env -i PATH="$KUBE_CACHE/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    "$@" >>"$log" 2>&1 </dev/null &
  record "$dir" $! "$role" "$1"
}

# Runs inside a node's mount namespace (nsenter -m): puts directory SRC at TARGET there only.
# A TARGET the machine lacks is made without writing to the machine's filesystem: its nearest
# existing ancestor is covered by a tmpfs holding that ancestor's entries again (bind mounts of
# the originals, submounts included) plus the missing directories. MASKED lists the tmpfs
# covers made so far, which later targets below them reuse.
kube_shadow() { # target src stage
  local target=$1 src=$2 stage=$3 top e name rest
  if [ -d "$target" ]; then
    mount -n --bind "$src" "$target"
    return
  fi
  top=$(dirname "$target")
  while [ ! -e "$top" ]; do top=$(dirname "$top"); done
  if [[ " $MASKED " == *" $top "* ]]; then
    mkdir -p "$target"
    mount -n --bind "$src" "$target"
    return
  fi
  if [ ! -d "$top" ] || [ "$top" = / ]; then
    echo "cannot make $target: $top is not a directory to cover" >&2
    return 1
  fi
  mkdir -p "$stage"
  mount -n -t tmpfs -o "mode=$(stat -c %a "$top")" tmpfs "$stage"
  for e in "$top"/* "$top"/.*; do
    name=${e##*/}
    if [ "$name" = . ] || [ "$name" = .. ] || { [ ! -e "$e" ] && [ ! -L "$e" ]; }; then continue; fi
    if [ -L "$e" ]; then
      ln -s "$(readlink "$e")" "$stage/$name"
    elif [ -d "$e" ]; then
      mkdir "$stage/$name"
      mount -n --rbind "$e" "$stage/$name"
    else
      touch "$stage/$name"
      mount -n --bind "$e" "$stage/$name"
    fi
  done
  rest=${target#"$top"/}
  mkdir -p "$stage/$rest"
  mount -n --bind "$src" "$stage/$rest"
  mount -n --move "$stage" "$top"
  # When the stage sat below TOP (the run directory is below /run), the bind of that entry
  # brought a copy of the stage along; it is not needed. Detached rather than unmounted: the
  # copy holds binds of /run/netns, where namespaces that other boxes make and remove
  # meanwhile can keep a submount busy (seen: "umount: .../netns: target is busy").
  if mountpoint -q "$stage"; then umount -n -l "$stage"; fi
  MASKED="$MASKED $top"
}

# Runs inside a node's mount namespace: the sysctl copies and the per-node directories.
kube_node_mounts() { # node-kube-dir sysctl...
  local k=$1 f copy target i=0
  shift
  MASKED=""
  for f in "$@"; do
    copy=$k/sysctl/${f//\//.}
    cat "/proc/sys/$f" >"$copy"
    mount -n --bind "$copy" "/proc/sys/$f"
  done
  for target in "${KUBE_NODE_PATHS[@]}"; do
    i=$((i + 1))
    kube_shadow "$target" "$k/paths$target" "$k/stage$i"
  done
}

# One cgroup per node in every v1 hierarchy, for kubelet's cgroupRoot (kubelet refuses a root
# that does not exist); recorded before it is made so `down` removes it.
kube_cgroup() { # dir root
  local h
  [ -f /sys/fs/cgroup/memory/cgroup.procs ] \
    || die "kube-in-a-box needs cgroup v1 hierarchies under /sys/fs/cgroup (kubelet 1.20 with cgroupfs)"
  echo "$2" >>"$1/cgroups"
  for h in /sys/fs/cgroup/*/; do
    if [ ! -f "${h}cgroup.procs" ] || [ "${h%/}" = /sys/fs/cgroup/unified ]; then continue; fi
    mkdir -p "$h$2"
    # A new cpuset has no CPUs or memory nodes until given its parent's.
    if [ -f "${h}cpuset.cpus" ]; then
      cat "${h}cpuset.cpus" >"$h$2/cpuset.cpus"
      cat "${h}cpuset.mems" >"$h$2/cpuset.mems"
    fi
  done
}

kube_cp_up() { # dir name
  local dir=$1 name=$2 cp=$1/kube ns token holder family at=$KUBE_API_IP
  local vpc6="" cp6="" api=()
  ns=$(kube_cp_netns "$name")
  family=$(kube_family "$dir")
  mkdir -p "$cp/pki" "$cp/etcd"
  echo "$ns" >>"$dir/namespaces"
  [ "$family" = ipv4 ] || at="$KUBE_API_IP and $KUBE_API_IP6"
  say "starting the control plane in $ns at $at"
  ip netns add "$ns"
  # DAD off before any link exists, as in vpc-sim's namespaces: settled links, as on EC2 (-e: a
  # kernel without IPv6 has no such keys).
  nsenter --net="/run/netns/$ns" sysctl -q -e -w net.ipv6.conf.all.accept_dad=0 \
    net.ipv6.conf.default.accept_dad=0 >/dev/null || die "could not turn DAD off in $ns"
  if [ "$family" != ipv4 ]; then
    # The API server is reached over IPv6 too: nodes and pods send to its /128 through the
    # VPC's router, which has IPv6 on (vpc-sim turns it on with the family).
    nsenter --net="/run/netns/$ns" sysctl -q -w net.ipv6.conf.all.disable_ipv6=0 \
      net.ipv6.conf.default.disable_ipv6=0 >/dev/null || die "could not turn IPv6 on in $ns"
    vpc6="addr add $KUBE_LINK6_VPC/64 dev vpc-cp nodad
route add $KUBE_API_IP6/128 via $KUBE_LINK6_CP dev vpc-cp"
    cp6="addr add $KUBE_API_IP6/128 dev lo nodad
addr add $KUBE_LINK6_CP/64 dev eth0 nodad
route add ::/0 via $KUBE_LINK6_VPC dev eth0 src $KUBE_API_IP6"
  fi
  ip -n "$name-vpc" -batch - <<EOF
link add vpc-cp type veth peer name eth0 netns $ns
addr add $KUBE_LINK_VPC/$KUBE_LINK_PREFIX dev vpc-cp
link set vpc-cp up
route add $KUBE_API_IP/32 via $KUBE_LINK_CP dev vpc-cp
$vpc6
EOF
  ip -n "$ns" -batch - <<EOF
link set lo up
addr add $KUBE_API_IP/32 dev lo
addr add $KUBE_LINK_CP/$KUBE_LINK_PREFIX dev eth0
link set eth0 up
route add default via $KUBE_LINK_VPC dev eth0 src $KUBE_API_IP
$cp6
EOF
  # What differs by family: where the API server is advertised and listens (:: takes both
  # families), the service range(s), and 1.20's alpha dual-stack gate.
  case $family in
    ipv4) api=(--advertise-address "$KUBE_API_IP" --bind-address 0.0.0.0
               --service-cluster-ip-range "$KUBE_SERVICE_CIDR");;
    ipv6) api=(--advertise-address "$KUBE_API_IP6" --bind-address ::
               --service-cluster-ip-range "$KUBE_SERVICE_CIDR6");;
    dual) api=(--advertise-address "$KUBE_API_IP" --bind-address ::
               --service-cluster-ip-range "$KUBE_SERVICE_CIDR,$KUBE_SERVICE_CIDR6"
               --feature-gates IPv6DualStack=true);;
    *) die "unknown IP family '$family' in $dir/sim/sim.json";;
  esac
  token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  (
    umask 077
    echo "$token,box-admin,box-admin,system:masters" >"$cp/tokens.csv"
    openssl genrsa -out "$cp/pki/sa.key" 2048 2>/dev/null
    openssl rsa -in "$cp/pki/sa.key" -pubout -out "$cp/pki/sa.pub" 2>/dev/null
    cat >"$(kube_kubeconfig "$dir")" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $name
  cluster:
    server: $(kube_server "$family")
    insecure-skip-tls-verify: true
users:
- name: box-admin
  user:
    token: $token
contexts:
- name: $name
  context:
    cluster: $name
    user: box-admin
current-context: $name
EOF
  ) || die "could not write the control plane's keys and kubeconfig"
  holder=$(kube_holder "$dir" "$ns" kube-cp)
  # etcd's data on a tmpfs of the control plane's own: fsyncs cost nothing and it goes with
  # the namespace.
  nsenter -t "$holder" -m -- mount -n -t tmpfs -o size=1g,mode=700 tmpfs "$cp/etcd"
  kube_start "$dir" "$holder" etcd "$cp/etcd.log" "$KUBE_CACHE/bin/etcd" \
    --name "$name" --data-dir "$cp/etcd/data" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster "$name=http://127.0.0.1:2380"
  # AlwaysAllow and a static system:masters token: a test cluster. InternalIP first, so exec
  # and logs reach a kubelet at the node's address rather than a name nothing resolves.
  kube_start "$dir" "$holder" kube-apiserver "$cp/kube-apiserver.log" "$KUBE_CACHE/bin/kube-apiserver" \
    "${api[@]}" --secure-port "$KUBE_API_PORT" --insecure-port 0 --cert-dir "$cp/pki" --etcd-servers http://127.0.0.1:2379 \
    --token-auth-file "$cp/tokens.csv" --authorization-mode AlwaysAllow \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$cp/pki/sa.pub" --service-account-signing-key-file "$cp/pki/sa.key" \
    --disable-admission-plugins ServiceAccount --allow-privileged=true \
    --kubelet-preferred-address-types InternalIP --profiling=false
  echo "$holder" >"$cp/holder"
}

# Waits for the API server, then starts the controller manager and the scheduler. The
# controller manager creates its flexvolume directory, by default under /usr/libexec.
kube_cp_ready() { # dir name
  local dir=$1 name=$2 cp=$1/kube holder gates=()
  if ! wait_for 120 kube_kubectl "$dir" "$name" get --raw /readyz; then
    tail -n 20 "$cp/etcd.log" "$cp/kube-apiserver.log" >&2
    die "kube-apiserver did not become ready within 120 s"
  fi
  holder=$(cat "$cp/holder")
  [ "$(kube_family "$dir")" != dual ] || gates=(--feature-gates IPv6DualStack=true)
  kube_start "$dir" "$holder" kube-controller-manager "$cp/kube-controller-manager.log" \
    "$KUBE_CACHE/bin/kube-controller-manager" --kubeconfig "$(kube_kubeconfig "$dir")" \
    --leader-elect=false --bind-address 127.0.0.1 --port 0 --cluster-name "$name" \
    --service-account-private-key-file "$cp/pki/sa.key" --profiling=false \
    --flex-volume-plugin-dir "$cp/volume-plugins" "${gates[@]}"
  kube_start "$dir" "$holder" kube-scheduler "$cp/kube-scheduler.log" \
    "$KUBE_CACHE/bin/kube-scheduler" --kubeconfig "$(kube_kubeconfig "$dir")" \
    --leader-elect=false --bind-address 127.0.0.1 --port 0 --profiling=false
}

# Where the node's directory for PATH (one of KUBE_NODE_PATHS) is on the machine.
kube_node_path() { echo "$1/node$2/kube/paths$3"; } # dir i path

# containerd and kubelet on node I. With an ipamd started by the box, the node's CNI
# directories get the built plugin and the shipped conflist pointed at that ipamd; with IMAGE
# (the DaemonSet's), they stay empty for the DaemonSet's pod to fill, and the image is loaded.
kube_node_up() { # dir name i [image]
  local dir=$1 name=$2 i=$3 image=${4:-} k=$1/node$3/kube netns ip k8s holder root p img family
  local kubelet_gates=""
  netns=$(node_field "$dir" "$i" netns)
  family=$(kube_family "$dir")
  # The node's address (InternalIP, where the API server reaches the kubelet): its primary
  # IPv6 address in an IPv6 cluster. A dual-stack node keeps its IPv4 one (1.20's --node-ip
  # takes a single address) and its pods get both families.
  if [ "$family" = ipv6 ]; then
    ip=$(node_field "$dir" "$i" primary_ipv6)
  else
    ip=$(node_field "$dir" "$i" primary_ip)
  fi
  if [ -z "$ip" ] || [ "$ip" = null ]; then die "node $i has no primary address of its family ($family)"; fi
  [ "$family" != dual ] || kubelet_gates=$'featureGates:\n  IPv6DualStack: true'
  k8s=$(cat "$dir/node$i/k8s_node")
  root=vpc-box-$name-node$i
  say "starting containerd and kubelet on node $i ($k8s)"
  for p in "${KUBE_NODE_PATHS[@]}"; do mkdir -p "$k/paths$p"; done
  mkdir -p "$k/sysctl" "$k/volume-plugins" "$k/containerd"
  if [ -z "$image" ]; then
    ln -s "$(realpath "$BIN_DIR/vpc-cni")" "$k/paths/opt/cni/bin/vpc-cni"
    ln -s /usr/lib/cni/portmap "$k/paths/opt/cni/bin/portmap"
    ln -s /usr/lib/cni/loopback "$k/paths/opt/cni/bin/loopback"
    render_conflist "$dir/node$i/ipamd.sock" "$dir/node$i/plugin.log" \
      >"$k/paths/etc/cni/net.d/10-vpc-cni.conflist"
  fi
  kube_cgroup "$dir" "$root"
  # restrict_oom_score_adj: without CAP_SYS_RESOURCE (as here) runc cannot lower a score and
  # the sandbox fails to start. The opt plugin is off: it would create /opt/containerd.
  cat >"$k/containerd.toml" <<EOF
version = 2
root = "$k/containerd/root"
state = "$k/containerd/state"
disabled_plugins = ["io.containerd.internal.v1.opt"]
[grpc]
  address = "$k/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:box"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$KUBE_CACHE/bin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
    max_conf_num = 1
EOF
  # Test-only: anonymous access and AlwaysAllow. No eviction and no image GC: the images
  # cannot be pulled again. kubelet creates its flexvolume directory, by default under
  # /usr/libexec.
  cat >"$k/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
cgroupDriver: cgroupfs
cgroupRoot: /$root
failSwapOn: false
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
volumePluginDir: $k/volume-plugins
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
$kubelet_gates
EOF
  holder=$(kube_holder "$dir" "$netns" "kube-node$i")
  echo "$holder" >"$k/holder"
  nsenter -t "$holder" -m -- bash -c "set -euo pipefail; $(declare -p KUBE_NODE_PATHS)
    $(declare -f kube_shadow kube_node_mounts); kube_node_mounts $(printf '%q ' "$k" "${KUBE_SYSCTLS[@]}")" \
    || die "could not set up node $i's mount namespace"
  kube_start "$dir" "$holder" "containerd-node$i" "$k/containerd.log" "$KUBE_CACHE/bin/containerd" \
    --config "$k/containerd.toml"
  if ! wait_for 30 nsenter -t "$holder" -n -m -- "$KUBE_CACHE/bin/ctr" --address "$k/containerd.sock" version; then
    tail -n 20 "$k/containerd.log" >&2
    die "containerd on node $i did not start within 30 s"
  fi
  for img in "${KUBE_IMAGES[@]}"; do
    kube_import "$dir" "$i" "$KUBE_CACHE/images/$img.tar" || die "could not load $img.tar on node $i"
  done
  if [ -n "$image" ]; then
    kube_import "$dir" "$i" "$image" || die "could not load $image on node $i"
  fi
  kube_start "$dir" "$holder" "kubelet-node$i" "$k/kubelet.log" "$KUBE_CACHE/bin/kubelet" \
    --config "$k/kubelet.yaml" --kubeconfig "$(kube_kubeconfig "$dir")" \
    --container-runtime remote --container-runtime-endpoint "unix://$k/containerd.sock" \
    --node-ip "$ip" --hostname-override "$k8s"
  kube_proxy_start "$dir" "$i" "$ip"
}

# The --cluster-cidr kube-proxy is given: the pods' addresses are VPC addresses, so the
# cluster's "pod network" is the VPC's CIDR (its first: kube-proxy 1.20 takes one per family),
# and the VPC's IPv6 /56 in an IPv6 or dual-stack box. kube-proxy masquerades what reaches a
# ClusterIP from outside it, and with externalTrafficPolicy Local it sends what comes from
# inside it to any endpoint; traffic from beyond the VPC (the box's outside) keeps Local.
kube_cluster_cidr() { # dir
  local v4 v6
  v4=$(jq -r '.vpc.cidrs[0] // empty' "$1/sim/sim.json")
  v6=$(jq -r '.vpc.ipv6_cidr // empty' "$1/sim/sim.json")
  case $(kube_family "$1") in
    ipv4) echo "$v4";;
    ipv6) echo "$v6";;
    dual) echo "$v4,$v6";;
  esac
}

# host:port for an address of either family.
kube_hostport() { if [[ $1 == *:* ]]; then echo "[$1]:$2"; else echo "$1:$2"; fi; } # ip port

# kube-proxy on node I, in iptables mode, as a process in the node's namespaces (the kubelet's
# holder: its private mount namespace, so its /run/xtables.lock is the node's): it writes
# iptables only in the node's network namespace. It listens only on the node's address
# (healthz :10256, metrics :10249). The one sysctl it writes at start in this mode,
# net.ipv4.conf.all.route_localnet, is the node namespace's own; the conntrack flags at 0 keep
# it from writing the machine's global nf_conntrack_max, the conntrack hash size and the
# conntrack timeouts (all of which it would otherwise set).
kube_proxy_start() { # dir i node-ip
  local dir=$1 i=$2 ip=$3 k=$1/node$2/kube gates=()
  [ "$(kube_family "$dir")" != dual ] || gates=(--feature-gates IPv6DualStack=true)
  kube_start "$dir" "$(cat "$k/holder")" "kube-proxy-node$i" "$k/kube-proxy.log" "$KUBE_CACHE/bin/kube-proxy" \
    --kubeconfig "$(kube_kubeconfig "$dir")" --proxy-mode iptables \
    --hostname-override "$(cat "$dir/node$i/k8s_node")" --bind-address "$ip" \
    --cluster-cidr "$(kube_cluster_cidr "$dir")" \
    --healthz-bind-address "$(kube_hostport "$ip" 10256)" \
    --metrics-bind-address "$(kube_hostport "$ip" 10249)" \
    --conntrack-max-per-core 0 --conntrack-min 0 \
    --conntrack-tcp-timeout-established 0 --conntrack-tcp-timeout-close-wait 0 \
    --oom-score-adj 0 --profiling=false "${gates[@]}"
}

# Whether node I's kube-proxy has synced with the API server at least once: it has written
# the rules of the `kubernetes` Service (of the cluster's first family), and in a dual-stack
# box its IPv6 proxier has written its NodePort jump too.
kube_proxy_synced() { # dir i
  local dir=$1 i=$2 netns
  netns=$(node_field "$dir" "$i" netns)
  case $(kube_family "$dir") in
    ipv4) ip netns exec "$netns" iptables-save -t nat 2>/dev/null | grep -q 'default/kubernetes:https';;
    ipv6) ip netns exec "$netns" ip6tables-save -t nat 2>/dev/null | grep -q 'default/kubernetes:https';;
    dual)
      ip netns exec "$netns" iptables-save -t nat 2>/dev/null | grep -q 'default/kubernetes:https' \
        && ip netns exec "$netns" ip6tables-save -t nat 2>/dev/null | grep -q -- '-A KUBE-SERVICES .*-j KUBE-NODEPORTS';;
  esac
}

# Waits up to 60 s for every node's kube-proxy to have synced.
kube_proxies_ready() { # dir nodes
  local dir=$1 i
  for i in $(seq "$2"); do
    if ! wait_for 60 kube_proxy_synced "$dir" "$i"; then
      tail -n 20 "$dir/node$i/kube/kube-proxy.log" >&2
      die "kube-proxy on node $i wrote no Service rules within 60 s"
    fi
  done
}

# Loads the OCI image archive FILE into node I's containerd, where the kubelet finds it.
kube_import() { # dir i file
  local k=$1/node$2/kube
  nsenter -t "$(cat "$k/holder")" -n -m -- "$KUBE_CACHE/bin/ctr" --address "$k/containerd.sock" \
    -n k8s.io images import "$3" >/dev/null
}

# Applies config/kubernetes/ with the image localhost/vpc-cni:TAG, through a kustomize
# overlay (kubectl's own -k) for what differs in the box: the image's name, the EC2 and IMDS
# endpoints, the environment given with --ipamd-env and --ip-family ($dir/ipamd-env; the
# family's ENABLE_IPv4 and ENABLE_IPv6 reach the init container too, which sets the node up
# for that family), and the API server,
# reached with the box's kubeconfig from the host: the box's API server mounts no service
# account tokens.
kube_deploy() { # dir name tag
  local dir=$1 name=$2 tag=$3 d=$1/kube/deploy extra='[]' patch
  [ -f "$dir/ipamd-env" ] && extra=$(jq -R 'capture("^(?<name>[^=]+)=(?<value>.*)$")' "$dir/ipamd-env" | jq -s .)
  rm -rf "$d"; mkdir -p "$d"
  cp "$REPO"/config/kubernetes/*.yaml "$d/"
  patch=$(jq -n --arg ec2 "$(node_field "$dir" 1 ec2_endpoint)" --arg imds "$(node_field "$dir" 1 imds_endpoint)" \
    --arg kubeconfig "$(kube_kubeconfig "$dir")" --argjson extra "$extra" '
    {apiVersion: "apps/v1", kind: "DaemonSet", metadata: {name: "'"$KUBE_DS"'", namespace: "'"$KUBE_DS_NS"'"},
     spec: {template: {spec: {
       initContainers: [{name: "vpc-cni-init", env: ([{name: "AWS_EC2_METADATA_SERVICE_ENDPOINT", value: $imds}]
         + [$extra[] | select(.name == "ENABLE_IPv4" or .name == "ENABLE_IPv6")])}],
       containers: [{name: "ipamd",
         env: ([{name: "AWS_EC2_ENDPOINT", value: $ec2}, {name: "AWS_EC2_METADATA_SERVICE_ENDPOINT", value: $imds},
                {name: "KUBECONFIG", value: "/etc/vpc-box/kubeconfig"}] + $extra),
         volumeMounts: [{name: "box-kubeconfig", mountPath: "/etc/vpc-box/kubeconfig", readOnly: true}]}],
       volumes: [{name: "box-kubeconfig", hostPath: {path: $kubeconfig, type: "File"}}]}}}}')
  echo "$patch" >"$d/box-patch.yaml"
  {
    echo "resources:"
    for f in "$REPO"/config/kubernetes/*.yaml; do echo "- ${f##*/}"; done
    echo "images:"
    echo "- name: vpc-cni"
    echo "  newName: localhost/vpc-cni"
    echo "  newTag: \"$tag\""
    echo "patchesStrategicMerge:"
    echo "- box-patch.yaml"
  } >"$d/kustomization.yaml"
  kube_kubectl "$dir" "$name" apply -k "$d" >/dev/null || die "kubectl apply -k $d failed"
}

# Whether the DaemonSet has rolled out on all N nodes: the controller has seen its current
# spec, and each node runs a pod of that spec, Ready. Not `kubectl rollout status`, which
# reports success while the controller still counts fewer nodes than the box has (a kubelet
# that has not registered yet) or before it has seen the new spec.
kube_ds_settled() { # dir name n
  local status gen seen
  status=$(kube_kubectl "$1" "$2" -n "$KUBE_DS_NS" get daemonset "$KUBE_DS" -o jsonpath='{.metadata.generation} {.status.observedGeneration} {.status.desiredNumberScheduled} {.status.updatedNumberScheduled} {.status.numberReady} {.status.numberAvailable}') || return 1
  read -r gen seen status <<<"$status"
  [ "$seen" = "$gen" ] && [ "$status" = "$3 $3 $3 $3" ]
}

# Waits up to 180 s for the DaemonSet to roll out on every node of the box.
kube_daemonset_ready() { # dir name
  local dir=$1 name=$2 i n
  n=$(jq '.nodes | length' "$dir/sim/sim.json")
  if ! wait_for 180 kube_ds_settled "$dir" "$name" "$n"; then
    kube_kubectl "$dir" "$name" -n "$KUBE_DS_NS" get pods -o wide >&2 || true
    for i in $(seq "$n"); do
      tail -n 20 "$(kube_node_path "$dir" "$i" /var/log/aws-routed-eni)/ipamd.log" >&2 2>/dev/null || true
    done
    die "the $KUBE_DS DaemonSet did not roll out on all $n nodes within 180 s"
  fi
}

kube_registered() { # dir name k8s-node...
  local dir=$1 name=$2 have n
  shift 2
  have=$(kube_kubectl "$dir" "$name" get nodes -o name) || return 1
  for n in "$@"; do grep -qx "node/$n" <<<"$have" || return 1; done
}

kube_nodes_ready() { # dir name nodes
  local dir=$1 name=$2 i names=()
  for i in $(seq "$3"); do names+=("$(cat "$dir/node$i/k8s_node")"); done
  # `kubectl wait` watches rather than polls, but fails at once on a node not registered yet.
  if ! wait_for 60 kube_registered "$dir" "$name" "${names[@]}" \
    || ! kube_kubectl "$dir" "$name" wait --for=condition=Ready --timeout=120s "${names[@]/#/node/}" >/dev/null; then
    for i in $(seq "$3"); do tail -n 20 "$dir/node$i/kube/kubelet.log" "$dir/node$i/kube/containerd.log" >&2; done
    kube_kubectl "$dir" "$name" get nodes >&2 || true
    die "the nodes did not become Ready within 180 s"
  fi
}

# The "kube" object of the box JSON.
kube_json() { # dir name
  jq -n --arg kubeconfig "$(kube_kubeconfig "$1")" --arg netns "$(kube_cp_netns "$2")" \
    --arg kubectl "$KUBE_CACHE/bin/kubectl" --arg server "$(kube_server "$(kube_family "$1")")" \
    --arg version "$("$KUBE_CACHE/bin/kubelet" --version | awk '{print $2}')" \
    '{kubeconfig: $kubeconfig, netns: $netns, kubectl: $kubectl, server: $server, version: $version}'
}

# The pids of the processes in any of the box's cgroups (the pods' containers).
kube_cgroup_pids() { # dir
  local root h
  [ -f "$1/cgroups" ] || return 0
  while read -r root; do
    for h in /sys/fs/cgroup/*/; do
      [ -d "$h$root" ] && find "$h$root" -name cgroup.procs -exec cat {} +
    done
  done <"$1/cgroups" | sort -un
}

# The containerd shims of the box's nodes: their command line names their containerd's socket.
kube_shim_pids() { # dir
  local p cmdline
  for p in /proc/[0-9]*; do
    cmdline=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
    # shellcheck disable=SC2254 # the node number is a glob on purpose
    case $cmdline in
      *containerd-shim*" -address $1/node"*"/kube/containerd.sock "*) echo "${p#/proc/}";;
    esac
  done
}

# Kills every process in the box's cgroups; true once there are none left.
kube_kill_pods() { # dir
  local pid fields left=0
  for pid in $(kube_cgroup_pids "$1"); do
    read -r -a fields <<<"$(stat_fields "$pid")"
    [ -n "${fields[19]:-}" ] || continue
    stop_process "$pid" "${fields[19]}" KILL || left=1
  done
  [ $left -eq 0 ] && [ -z "$(kube_cgroup_pids "$1")" ]
}

kube_rmdir_tree() { find "$1" -depth -type d -exec rmdir {} + 2>/dev/null; [ ! -d "$1" ]; }

# Stops the nodes' kubelets, their pods, shims and containerds and the namespace holders, and
# removes the cgroups; the control plane's processes are stopped with the rest of the box.
# Names what it could not stop or remove and fails.
kube_down() { # dir
  local dir=$1 failed=0 pid fields root h
  [ -d "$dir/kube" ] || return 0
  stop_recorded "$dir" TERM 'kubelet-node*' || failed=1
  if ! wait_for 10 kube_kill_pods "$dir"; then
    echo "vpc-box: pods still running: $(kube_cgroup_pids "$dir" | paste -sd' ')" >&2
    failed=1
  fi
  stop_recorded "$dir" TERM 'containerd-node*' || failed=1
  for pid in $(kube_shim_pids "$dir"); do
    read -r -a fields <<<"$(stat_fields "$pid")"
    [ -n "${fields[19]:-}" ] || continue
    stop_process "$pid" "${fields[19]}" TERM || { echo "vpc-box: could not stop shim $pid" >&2; failed=1; }
  done
  stop_recorded "$dir" TERM 'kube-*' || failed=1
  if [ -f "$dir/cgroups" ]; then
    while read -r root; do
      for h in /sys/fs/cgroup/*/; do
        [ -d "$h$root" ] || continue
        # Depth first: a cgroup goes only once it has no children; retried while the
        # kernel finishes with processes that just ended.
        wait_for 10 kube_rmdir_tree "$h$root" || { echo "vpc-box: could not remove cgroup $h$root" >&2; failed=1; }
      done
    done <"$dir/cgroups"
  fi
  return $failed
}
