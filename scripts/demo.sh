#!/usr/bin/env bash
# The main job, on VPC-in-a-box: two nodes whose ipamd got VPC addresses and a second ENI from
# EC2 (vpc-sim, through the real AWS SDK); six pods wired by the vpc-cni plugin exactly as a
# container runtime would call it, spread over primary and secondary ENIs; every pod reaching
# every other pod and both nodes across a VPC that enforces EC2's source/destination check;
# pod traffic to the outside SNATed to the node's address; every address released on DEL.
#
#   demo.sh          the plugin run by hand, as a runtime would
#   demo.sh --kube   through a real Kubernetes (kube-in-a-box): kubectl creates a Deployment
#                    of six, kubelet -> containerd -> vpc-cni wire its pods, which ping each
#                    other and both nodes, a Service answers from outside the VPC through a
#                    NodePort on each node (kube-proxy), and scaling to 0 releases every
#                    address (no SNAT part); the first run builds the kube cache (minutes)
#
# Everything it creates is removed on exit, also after a failure. Needs root.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KUBE=0
case ${1:-} in
  "") ;;
  --kube) KUBE=1;;
  *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2;;
esac
need_root "demo.sh"
ensure_box_packages
if command -v cargo >/dev/null 2>&1; then
  say "building (the first build compiles the AWS SDK and takes several minutes)"
  (cd "$REPO" && cargo build --workspace --quiet)
fi
need_binaries

NAME=demo$$
NODES=2
PODS_PER_NODE=3
BOX=$REPO/scripts/vpc-box.sh
cleanup() {
  local n i
  for n in $(seq $NODES); do
    for i in $(seq $PODS_PER_NODE); do ip netns del "$NAME-n${n}p$i" 2>/dev/null || true; done
  done
  "$BOX" down --name "$NAME" || true
}
trap cleanup EXIT

node_field() { jq -r --argjson n "$1" ".nodes[\$n - 1].$2" <<<"$box"; }

# kubectl as the box's administrator.
k() { "$BOX" kubectl --name "$NAME" -- "$@"; }

no_pods_labelled() { [ -z "$(k get pods -l "$1" --no-headers 2>/dev/null)" ]; }

demo_kube() {
  local n pod ip targets=() pods=() lost=0 line t
  echo "== kube-in-a-box: vpc-sim, ipamd on $NODES nodes, a control plane, containerd + kubelet on each node"
  box=$("$BOX" up --name "$NAME" --nodes $NODES --instance-type d3.xlarge --kube)
  RUN=$(jq -r '.run_dir' <<<"$box")
  jq -r '"   API server     \(.kube.server) (Kubernetes \(.kube.version)), in namespace \(.kube.netns)",
         (.nodes[] | "   node           \(.k8s_node)  \(.instance_id) (\(.instance_type)), \(.primary_ip)")' <<<"$box"
  echo
  echo "== kubectl get nodes -o wide"
  k get nodes -o wide | sed 's/^/   /'
  echo
  echo "== How many pods each node can address, as ipamd publishes it (annotation vpc-cni.io/max-pods)"
  wait_for 30 all_published || die "ipamd did not publish vpc-cni.io/max-pods on every node"
  k get nodes -o 'custom-columns=NODE:.metadata.name,VPC-CNI.IO/MAX-PODS:.metadata.annotations.vpc-cni\.io/max-pods' \
    | sed 's/^/   /'

  echo
  echo "== kubectl create deployment web --replicas=$((NODES * PODS_PER_NODE)): kubelet -> containerd -> vpc-cni -> ipamd"
  # sh as PID 1 ignores SIGTERM unless it traps it: without the trap each pod takes its whole
  # grace period to go.
  k create deployment web --image=localhost/busybox:box --replicas=$((NODES * PODS_PER_NODE)) \
    -- sh -c 'trap "exit 0" TERM; while sleep 1; do :; done' | sed 's/^/   /'
  k rollout status deployment/web --timeout=180s >/dev/null || die "the deployment did not roll out"
  k get pods -l app=web -o wide | sed 's/^/   /'

  echo
  echo "== What ipamd assigned, on each node (curl localhost:61679/v1/pods)"
  for n in $(seq $NODES); do
    ip netns exec "$(node_field "$n" netns)" curl -sS --max-time 5 http://127.0.0.1:61679/v1/pods \
      | jq -r --arg node "$(node_field "$n" k8s_node)" \
          '.[] | "   \($node)  \(.Namespace)/\(.Name)  \(.IP)  \(.ENI) (device \(.DeviceNumber))"'
  done

  echo
  echo "== Traffic: kubectl exec ping from every pod to every pod and both nodes (. = reply, X = lost)"
  while read -r pod ip; do pods+=("$pod $ip"); targets+=("$ip"); done \
    < <(k get pods -l app=web -o jsonpath='{range .items[*]}{.metadata.name} {.status.podIP}{"\n"}{end}')
  for n in $(seq $NODES); do targets+=("$(node_field "$n" primary_ip)"); done
  printf '   %-12s' "from \\ to"; printf ' %-11s' "${targets[@]}"; echo
  for line in "${pods[@]}"; do
    read -r pod ip <<<"$line"
    printf '   %-12s' "$ip"
    # One exec per pod: it pings every target and prints one mark each ($0 is the pod's own
    # address).
    # shellcheck disable=SC2016 # expanded by the pod's shell
    for t in $(k exec "$pod" -- sh -c 'for t in "$@"; do
        if [ "$t" = "$0" ]; then echo -; elif ping -c 1 -W 2 "$t" >/dev/null 2>&1; then echo .; else echo X; fi
      done' "$ip" "${targets[@]}"); do
      printf ' %-11s' "$t"
      [ "$t" != X ] || lost=$((lost + 1))
    done
    echo
  done
  [ $lost -eq 0 ] || die "$lost pings lost"

  echo
  echo "== A node's own warm target: kubectl annotate node $(node_field 1 k8s_node) vpc-cni.io/WARM_IP_TARGET=3"
  k annotate --overwrite node "$(node_field 1 k8s_node)" vpc-cni.io/WARM_IP_TARGET=3 >/dev/null
  wait_for 30 targets_are 1 3 || die "node 1's ipamd did not take WARM_IP_TARGET=3"
  for n in $(seq $NODES); do
    echo "   ipamd node $n   $(pool "$n" | jq -c .Targets)"
  done
  k annotate node "$(node_field 1 k8s_node)" vpc-cni.io/WARM_IP_TARGET- >/dev/null

  echo
  echo "== A Service from outside the VPC: kube-proxy on every node, a NodePort, curl from $(jq -r .outside.netns <<<"$box")"
  # busybox httpd answering its pod's name.
  # shellcheck disable=SC2016 # expanded by the pod's shell
  k create deployment hello --image=localhost/busybox:box --replicas=$NODES \
    -- sh -c 'mkdir -p /www && echo $HOSTNAME >/www/index.html && exec httpd -f -p 8080 -h /www' | sed 's/^/   /'
  k expose deployment hello --type=NodePort --port=80 --target-port=8080 | sed 's/^/   /'
  k rollout status deployment/hello --timeout=120s >/dev/null || die "the hello deployment did not roll out"
  local nodeport outside_ns outside_ip ip answer
  nodeport=$(k get service hello -o jsonpath='{.spec.ports[0].nodePort}')
  outside_ns=$(jq -r .outside.netns <<<"$box")
  outside_ip=$(jq -r .outside.ip <<<"$box")
  for n in $(seq $NODES); do
    ip=$(node_field "$n" primary_ip)
    wait_for 60 ip netns exec "$outside_ns" curl -sf -m 2 --interface "$outside_ip" "http://$ip:$nodeport/" >/dev/null \
      || die "the NodePort did not answer through node $n"
    for _ in 1 2 3; do
      answer=$(ip netns exec "$outside_ns" curl -sS -m 2 --interface "$outside_ip" "http://$ip:$nodeport/") \
        || die "no answer from http://$ip:$nodeport/"
      echo "   $outside_ip -> http://$ip:$nodeport/ (node $n): answered by $answer"
    done
  done
  k delete service hello >/dev/null
  k delete deployment hello >/dev/null
  k delete pods -l app=hello --grace-period=1 --wait=true --timeout=60s >/dev/null 2>&1 || true
  wait_for 60 no_pods_labelled app=hello || die "hello pods left: $(k get pods -l app=hello --no-headers)"

  echo
  echo "== kubectl scale deployment web --replicas=0: every address released"
  k scale deployment web --replicas=0 >/dev/null
  wait_for 180 no_pods || die "pods left: $(k get pods -l app=web --no-headers)"
  for n in $(seq $NODES); do
    wait_for 60 ipamd_holds_none "$n" || die "ipamd on node $n still holds pods"
    echo "   ipamd node $n   $(health "$n")"
  done
  for n in $(seq $NODES); do
    jq -rs --arg node "$(node_field "$n" k8s_node)" '
      [.[] | .message // "" | select(startswith("Received CNI "))] as $r
      | "   \($node): \([$r[] | select(startswith("Received CNI add"))] | length) ADD(s), \(
          [$r[] | select(startswith("Received CNI del") and (contains("Netns()") | not))] | length) DEL(s) with the pod netns, \(
          [$r[] | select(startswith("Received CNI del") and contains("Netns()"))] | length) with an empty CNI_NETNS, \(
          [.[] | select(.level == "ERROR")] | length) failed"' "$(node_field "$n" plugin_log)"
  done
  [ "$(cat "$RUN"/node*/plugin.log | jq -s '[.[] | select(.level == "ERROR")] | length')" -eq 0 ] \
    || die "vpc-cni logged errors"

  echo
  echo "== Clean up"
  trap - EXIT
  "$BOX" down --name "$NAME" 2>/dev/null
  left=$(ip netns list | grep -c "^$NAME-" || true)
  [ "$left" -eq 0 ] || die "$left namespace(s) of $NAME left behind"
  echo "   every namespace, process and cgroup of $NAME removed"
}

no_pods() { [ -z "$(k get pods -l app=web --no-headers 2>/dev/null)" ]; }
ipamd_holds_none() {
  [ "$(ip netns exec "$(node_field "$1" netns)" curl -sS --max-time 5 http://127.0.0.1:61679/v1/pods | jq length)" -eq 0 ]
}
pool() { ip netns exec "$(node_field "$1" netns)" curl -sS --max-time 5 http://127.0.0.1:61679/v1/pool; }
targets_are() { [ "$(pool "$1" | jq .Targets.WARM_IP_TARGET)" = "$2" ]; } # node warm_ip
all_published() {
  [ "$(k get nodes -o json | jq '[.items[] | select(.metadata.annotations["vpc-cni.io/max-pods"] == null)] | length')" -eq 0 ]
}

# Runs the plugin inside node $1's namespace for pod $2, as that node's runtime would.
cni() { # verb node pod [prevResult]
  local verb=$1 n=$2 i=$3 prev=${4:-null} conf pod=$NAME-n${2}p$3
  conf=$(jq -cn --arg sock "$(node_field "$n" ipamd_socket)" --argjson prev "$prev" \
    '{cniVersion: "1.1.0", name: "vpc-cni", type: "vpc-cni", ipamdSocket: $sock}
     + (if $prev == null then {} else {prevResult: $prev} end)')
  echo "$conf" | ip netns exec "$(node_field "$n" netns)" env -i \
    CNI_COMMAND="$verb" CNI_CONTAINERID="sandbox-$pod" CNI_NETNS="/run/netns/$pod" \
    CNI_IFNAME=eth0 CNI_PATH="$BIN_DIR" \
    CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-$n-$i" \
    "$BIN_DIR/vpc-cni" 2>>"$RUN/plugin.log"
}

health() { ip netns exec "$(node_field "$1" netns)" "$BIN_DIR/ipamd" health --socket "$(node_field "$1" ipamd_socket)"; }

if [ $KUBE -eq 1 ]; then
  demo_kube
  exit 0
fi

echo "== VPC-in-a-box: vpc-sim (EC2 + IMDS + a routed VPC) and ipamd on $NODES nodes"
box=$("$BOX" up --name "$NAME" --nodes $NODES --instance-type d3.xlarge)
RUN=$(jq -r '.run_dir' <<<"$box")
OUT_NS=$(jq -r '.outside.netns' <<<"$box")
OUT_IP=$(jq -r '.outside.ip' <<<"$box")
jq -r '"   subnet         \(.subnets[0].id) \(.subnets[0].cidr); outside address \(.outside.ip)",
       (.nodes[] | "   node           \(.instance_id) (\(.instance_type)), primary ENI \(.primary_eni), \(.primary_ip)")' <<<"$box"
for n in $(seq $NODES); do echo "   ipamd node $n   $(health "$n")"; done

echo
echo "== ADD: $((NODES * PODS_PER_NODE)) pods get VPC addresses (a second ENI is attached as the pool runs low)"
declare -A RESULT IP WHERE
for n in $(seq $NODES); do
  netns=$(node_field "$n" netns)
  for i in $(seq $PODS_PER_NODE); do
    ip netns add "$NAME-n${n}p$i"
    # Code 11 means "try again later": the pool is growing. A runtime retries; so do we.
    for _ in $(seq 50); do
      if out=$(cni ADD "$n" "$i"); then break; fi
      [ "$(jq -r .code <<<"$out")" = 11 ] || die "ADD of web-$n-$i failed: $out"
      sleep 0.2
    done
    [ "$(jq -r .code <<<"$out")" != 11 ] || die "ADD of web-$n-$i kept failing: $out"
    RESULT[$n,$i]=$out
    IP[$n,$i]=$(jq -r '.ips[0].address | split("/")[0]' <<<"$out")
    table=$(ip -n "$netns" rule | awk -v ip="${IP[$n,$i]}" '$1 == "1536:" && $3 == ip {print $5}')
    WHERE[$n,$i]=${table:+secondary ENI (table $table)}
    WHERE[$n,$i]=${WHERE[$n,$i]:-primary ENI}
    printf '   node %s  default/web-%s-%s  %-11s  %s\n' "$n" "$n" "$i" "${IP[$n,$i]}" "${WHERE[$n,$i]}"
  done
done
[ "$(printf '%s\n' "${IP[@]}" | sort -u | wc -l)" -eq $((NODES * PODS_PER_NODE)) ] || die "addresses are not distinct: ${IP[*]}"
printf '%s\n' "${WHERE[@]}" | grep -q secondary || die "no pod landed on a secondary ENI"

echo
echo "== Traffic: every pod pings every pod and both nodes (. = reply, X = lost)"
targets=()
for n in $(seq $NODES); do for i in $(seq $PODS_PER_NODE); do targets+=("${IP[$n,$i]}"); done; done
for n in $(seq $NODES); do targets+=("$(node_field "$n" primary_ip)"); done
printf '   %-12s' "from \\ to"; printf ' %-11s' "${targets[@]}"; echo
lost=0
for n in $(seq $NODES); do
  for i in $(seq $PODS_PER_NODE); do
    printf '   %-12s' "${IP[$n,$i]}"
    for t in "${targets[@]}"; do
      if [ "$t" = "${IP[$n,$i]}" ]; then printf ' %-11s' "-"
      elif ip netns exec "$NAME-n${n}p$i" ping -c 1 -W 2 "$t" >/dev/null 2>&1; then printf ' %-11s' "."
      else printf ' %-11s' "X"; lost=$((lost + 1)); fi
    done
    echo
  done
done
[ $lost -eq 0 ] || die "$lost pings lost"

echo
echo "== Node 1's policy rules and ENI 2's route table (ip rule; ip route show table 2)"
ip -n "$(node_field 1 netns)" rule | sed 's/^/   /'
ip -n "$(node_field 1 netns)" route show table 2 | sed 's/^/   /'

echo
echo "== What an operator sees on node 1 (curl localhost:61679/v1/pods; curl :61678/metrics)"
ip netns exec "$(node_field 1 netns)" curl -sS --max-time 5 http://127.0.0.1:61679/v1/pods \
  | jq -r '.[] | "   \(.Namespace)/\(.Name)  \(.IP)  \(.ENI) (device \(.DeviceNumber))"'
ip netns exec "$(node_field 1 netns)" curl -sS --max-time 5 http://127.0.0.1:61678/metrics \
  | grep -E '^awscni_(assigned_ip_addresses|total_ip_addresses|eni_allocated) ' | sed 's/^/   /'

echo
echo "== SNAT: every pod pings $OUT_IP outside the VPC; sources the outside saw"
ip netns exec "$OUT_NS" iptables -w -N SEEN
ip netns exec "$OUT_NS" iptables -w -I INPUT -p icmp -j SEEN
for n in $(seq $NODES); do
  ip netns exec "$OUT_NS" iptables -w -A SEEN -s "$(node_field "$n" primary_ip)" -j RETURN
  for i in $(seq $PODS_PER_NODE); do ip netns exec "$OUT_NS" iptables -w -A SEEN -s "${IP[$n,$i]}" -j RETURN; done
done
for n in $(seq $NODES); do
  for i in $(seq $PODS_PER_NODE); do
    ip netns exec "$NAME-n${n}p$i" ping -c 1 -W 2 "$OUT_IP" >/dev/null || die "web-$n-$i cannot reach $OUT_IP"
  done
done
ip netns exec "$OUT_NS" iptables -w -nvxL SEEN | awk 'NR > 2 && $1 > 0 {printf "   %-11s %s packet(s)\n", $8, $1}'
for n in $(seq $NODES); do
  for i in $(seq $PODS_PER_NODE); do
    seen=$(ip netns exec "$OUT_NS" iptables -w -nvxL SEEN | awk -v ip="${IP[$n,$i]}" '$8 == ip {print $1}')
    [ "${seen:-0}" -eq 0 ] || die "the outside saw pod address ${IP[$n,$i]}"
  done
done
echo "   only the nodes' primary addresses; no pod address left the VPC"

echo
echo "== DEL: every pod released"
for n in $(seq $NODES); do
  for i in $(seq $PODS_PER_NODE); do
    cni DEL "$n" "$i" "${RESULT[$n,$i]}" >/dev/null || die "DEL of web-$n-$i failed"
    ! ip -n "$(node_field "$n" netns)" rule | grep -qw "${IP[$n,$i]}" || die "rule for ${IP[$n,$i]} left behind"
  done
  echo "   ipamd node $n   $(health "$n")"
done

echo
echo "== Clean up"
trap - EXIT
cleanup 2>/dev/null
left=$(ip netns list | grep -c "^$NAME-" || true)
[ "$left" -eq 0 ] || die "$left namespace(s) of $NAME left behind"
echo "   every namespace and process of $NAME removed"
