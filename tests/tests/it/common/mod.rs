//! Helpers shared by the scenario files.

use e2e::ip;
pub use testkit::cni::{
    assert_eth0_in, assert_host_clean, assert_host_unrouted, assert_host_wired, host_veth, pod_ip,
};

/// True when `ip` is inside `cidr` (IPv4 dotted quads).
pub fn in_cidr(ip: &str, cidr: &str) -> bool {
    let parse = |s: &str| {
        s.parse::<std::net::Ipv4Addr>()
            .map(u32::from)
            .expect("IPv4")
    };
    let (net, len) = cidr.split_once('/').expect("CIDR");
    let len: u32 = len.parse().expect("prefix length");
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    parse(ip) & mask == parse(net) & mask
}

/// ENI id -> its secondary addresses, for every ENI EC2 (vpc-sim) has attached to node `i`;
/// and the ids of ENIs made for that node that are attached to nothing (leaked).
pub fn ec2_view(
    vbox: &e2e::VpcBox,
    i: usize,
) -> (
    std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    Vec<String>,
) {
    let instance = vbox.node(i).instance_id.clone();
    let state = vbox.sim_state();
    let mut attached = std::collections::BTreeMap::new();
    let mut detached = Vec::new();
    for eni in state["enis"].as_array().expect("enis") {
        let id = eni["id"].as_str().expect("id").to_string();
        if eni["attachment"]["instance_id"] == instance.as_str() {
            let ips = eni["secondary_ips"]
                .as_array()
                .expect("secondary_ips")
                .iter()
                .map(|s| s["value"].as_str().expect("ip").to_string())
                .collect();
            attached.insert(id, ips);
        } else if eni["attachment"].is_null()
            && eni["description"]
                .as_str()
                .is_some_and(|d| d.contains(&instance))
        {
            detached.push(id);
        }
    }
    (attached, detached)
}

/// ENI id -> its secondary addresses, and the addresses held by pods, as ipamd on `node`
/// shows them on its introspection endpoint.
pub fn ipamd_view(
    node: &e2e::Node,
) -> (
    std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    std::collections::BTreeSet<String>,
) {
    let enis = node.get_json(&format!("{}/v1/enis", e2e::INTROSPECT));
    let mut pool = std::collections::BTreeMap::new();
    let mut held = std::collections::BTreeSet::new();
    for (id, eni) in enis["0"]["ENIs"].as_object().expect("ENIs of card 0") {
        let mut ips = std::collections::BTreeSet::new();
        for cidr in eni["AvailableIPv4Cidrs"]
            .as_object()
            .expect("cidrs")
            .values()
        {
            for (ip, addr) in cidr["IPAddresses"].as_object().expect("addresses") {
                ips.insert(ip.clone());
                if addr["IPAMKey"]["networkName"] != "" {
                    held.insert(ip.clone());
                }
            }
        }
        pool.insert(id.clone(), ips);
    }
    (pool, held)
}

/// Pod addresses the node still routes to a veth (`<ip> dev eni...` in main).
pub fn node_pod_routes(node_netns: &str) -> Vec<String> {
    ip(&["-n", node_netns, "-4", "route", "show"])
        .into_iter()
        .filter(|l| l.contains(" dev eni") && l.contains("scope link") && !l.contains('/'))
        .collect()
}

/// Whether EC2, ipamd (whose pool is its store's content) and the node agree on node `i`:
/// the same ENIs with the same addresses, no ENI made for the node left unattached, and the
/// addresses ipamd holds for pods exactly those the node routes to pods. Says how not.
pub fn agreement(vbox: &e2e::VpcBox, i: usize) -> Result<(), String> {
    let node = vbox.node(i);
    let (ec2, leaked) = ec2_view(vbox, i);
    let (pool, held) = ipamd_view(node);
    if pool != ec2 {
        return Err(format!("ipamd's pool {pool:?} differs from EC2's {ec2:?}"));
    }
    if !leaked.is_empty() {
        return Err(format!(
            "ENIs made for the node but attached to nothing: {leaked:?}"
        ));
    }
    let routed: std::collections::BTreeSet<String> = node_pod_routes(&node.netns)
        .iter()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    if held != routed {
        return Err(format!(
            "addresses held for pods {held:?} differ from pod routes {routed:?}"
        ));
    }
    Ok(())
}

/// Waits until node `i`'s pool has settled ([`e2e::Node::quiesce`]) and then (bounded) until
/// [`agreement`] holds: the node's routes and ipamd's holds follow a DEL or a reconciliation
/// shortly after the pool's totals. Panics with the last difference.
pub fn settle_and_agree(vbox: &e2e::VpcBox, i: usize) {
    vbox.node(i).quiesce();
    testkit::wait_ok(
        e2e::SETTLE_TIMEOUT,
        "EC2, ipamd and the node to agree",
        || agreement(vbox, i),
    );
}

/// True when `ip` is inside the IPv6 `cidr`.
pub fn in_prefix(ip: std::net::Ipv6Addr, cidr: &str) -> bool {
    let (net, len) = cidr.split_once('/').expect("a CIDR");
    let net: std::net::Ipv6Addr = net.parse().expect("an IPv6 network");
    let len: u32 = len.parse().expect("a length");
    let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
    u128::from(ip) & mask == u128::from(net) & mask
}

/// The /80s EC2 (vpc-sim) has delegated to `node`'s primary ENI.
pub fn delegated(vbox: &e2e::VpcBox, node: &e2e::Node) -> Vec<String> {
    let state = vbox.sim_state();
    let eni = state["enis"]
        .as_array()
        .expect("enis")
        .iter()
        .find(|e| e["id"] == node.primary_eni.as_str())
        .unwrap_or_else(|| panic!("{} not in vpc-sim's state", node.primary_eni))
        .clone();
    eni["ipv6_prefixes"]
        .as_array()
        .expect("ipv6_prefixes")
        .iter()
        .map(|p| p["value"].as_str().expect("a prefix").to_string())
        .collect()
}

/// What ipamd's `/v1/pods` on `node` lists.
pub fn ipamd_pods(node: &e2e::Node) -> Vec<serde_json::Value> {
    node.get_json(&format!("{}/v1/pods", e2e::INTROSPECT))
        .as_array()
        .cloned()
        .expect("/v1/pods is an array")
}

/// A script for `sh -c SCRIPT sh TARGET...` in a pod: prints `<target> ok` or `<target> lost`
/// for every target, one ping each (busybox's ping takes either family).
pub const PING_ALL: &str = r#"for t in "$@"; do
  if ping -c 1 -W 2 "$t" >/dev/null 2>&1; then echo "$t ok"; else echo "$t lost"; fi
done"#;
