#!/usr/bin/env bash
# The main job, on VPC-in-a-box: a node whose ipamd got VPC addresses from EC2 (vpc-sim, through
# the real AWS SDK), three pods wired by the vpc-cni plugin exactly as a container runtime would
# call it, the node reaching every pod, and every address released on DEL. Everything it creates
# is removed on exit, also after a failure. Needs root.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need_root "demo.sh"
ensure_box_packages
if command -v cargo >/dev/null 2>&1; then
  say "building (the first build compiles the AWS SDK and takes several minutes)"
  (cd "$REPO" && cargo build --workspace --quiet)
fi
need_binaries

NAME=demo$$
PODS=3
BOX=$REPO/scripts/vpc-box.sh
cleanup() {
  local i
  for i in $(seq $PODS); do ip netns del "$NAME-pod$i" 2>/dev/null || true; done
  "$BOX" down --name "$NAME" || true
}
trap cleanup EXIT

ip2int() { local IFS=.; read -r a b c d <<<"$1"; echo $(( (a << 24) | (b << 16) | (c << 8) | d )); }
in_subnet() { # ip cidr
  local net=${2%/*} len=${2#*/} mask
  mask=$(( len == 0 ? 0 : (0xffffffff << (32 - len)) & 0xffffffff ))
  [ $(( $(ip2int "$1") & mask )) -eq $(( $(ip2int "$net") & mask )) ]
}

# Runs the plugin inside the node's namespace, as the node's container runtime does.
cni() { # verb pod-index [prevResult]
  local verb=$1 i=$2 prev=${3:-null} conf
  conf=$(jq -cn --arg sock "$SOCKET" --argjson prev "$prev" \
    '{cniVersion: "1.1.0", name: "vpc-cni", type: "vpc-cni", ipamdSocket: $sock}
     + (if $prev == null then {} else {prevResult: $prev} end)')
  echo "$conf" | ip netns exec "$NODE" env -i \
    CNI_COMMAND="$verb" CNI_CONTAINERID="sandbox$i$NAME" CNI_NETNS="/run/netns/$NAME-pod$i" \
    CNI_IFNAME=eth0 CNI_PATH="$BIN_DIR" \
    CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-$i;K8S_POD_INFRA_CONTAINER_ID=sandbox$i$NAME" \
    "$BIN_DIR/vpc-cni" 2>>"$RUN/plugin.log"
}

health() { ip netns exec "$NODE" "$BIN_DIR/ipamd" health --socket "$SOCKET"; }

echo "== VPC-in-a-box: vpc-sim (EC2 + IMDS + VPC fabric) and ipamd on one node"
box=$("$BOX" up --name "$NAME")
NODE=$(jq -r '.nodes[0].netns' <<<"$box")
SOCKET=$(jq -r '.nodes[0].ipamd_socket' <<<"$box")
SUBNET=$(jq -r '.subnets[0].cidr' <<<"$box")
RUN=$(jq -r '.run_dir' <<<"$box")
jq -r '"   EC2 endpoint   \(.ec2_endpoint)",
       "   subnet         \(.subnets[0].id) \(.subnets[0].cidr)",
       (.nodes[0] | "   node           \(.instance_id) (\(.instance_type)), primary ENI \(.primary_eni), \(.primary_ip), netns \(.netns)")' <<<"$box"
echo "   ipamd          $(health)"

echo
echo "== ADD: $PODS pods get VPC addresses"
declare -a RESULT IPS
for i in $(seq $PODS); do
  ip netns add "$NAME-pod$i"
  RESULT[i]=$(cni ADD "$i") || { tail -n 5 "$RUN/plugin.log" >&2; die "ADD of pod $i failed: ${RESULT[$i]:-}"; }
  IPS[i]=$(jq -r '.ips[0].address | split("/")[0]' <<<"${RESULT[$i]}")
  veth=$(jq -r '.interfaces[0].name' <<<"${RESULT[$i]}")
  in_subnet "${IPS[$i]}" "$SUBNET" || die "pod $i got ${IPS[$i]}, outside $SUBNET"
  printf '   default/web-%s  %-12s  eth0 in %s, host veth %s\n' "$i" "${IPS[$i]}" "$NAME-pod$i" "$veth"
done
[ "$(printf '%s\n' "${IPS[@]}" | sort -u | wc -l)" -eq $PODS ] || die "addresses are not distinct: ${IPS[*]}"
echo "   $PODS distinct addresses, all in $SUBNET"
echo "   ipamd          $(health)"

echo
echo "== Traffic: the node pings every pod"
for i in $(seq $PODS); do
  out=$(ip netns exec "$NODE" ping -c 2 -W 2 "${IPS[$i]}") || die "node cannot reach pod $i (${IPS[$i]})"
  echo "   ${IPS[$i]}: $(grep -o '[0-9]* received' <<<"$out"), $(grep -o 'rtt.*' <<<"$out")"
done

echo
echo "== The node's datapath (ip rule; ip route)"
ip -n "$NODE" rule | sed 's/^/   /'
ip -n "$NODE" route | sed 's/^/   /'

echo
echo "== DEL: every pod released"
for i in $(seq $PODS); do
  cni DEL "$i" "${RESULT[$i]}" >/dev/null || die "DEL of pod $i failed"
  ! ip -n "$NODE" route | grep -q "^${IPS[$i]} " || die "route to ${IPS[$i]} left behind"
  ! ip -n "$NODE" rule | grep -qw "${IPS[$i]}" || die "rule for ${IPS[$i]} left behind"
  echo "   default/web-$i: ${IPS[$i]} released, host route and rule removed"
done
echo "   ipamd          $(health)"

echo
echo "== Clean up"
trap - EXIT
cleanup 2>/dev/null
left=$(ip netns list | grep -c "^$NAME-" || true)
[ "$left" -eq 0 ] || die "$left namespace(s) of $NAME left behind"
echo "   every namespace and process of $NAME removed"
