//! Helpers shared by the scenario files.
#![allow(dead_code)]

use e2e::ip;
use serde_json::Value;

/// The pod address of an ADD result (without the /32).
pub fn pod_ip(result: &Value) -> String {
    let address = result["ips"][0]["address"]
        .as_str()
        .expect("ips[0].address");
    let (ip, len) = address.split_once('/').expect("CIDR");
    assert_eq!(len, "32", "pods get a /32: {result}");
    ip.to_string()
}

/// The host veth of an ADD result (the interface without a sandbox).
pub fn host_veth(result: &Value) -> String {
    result["interfaces"]
        .as_array()
        .expect("interfaces")
        .iter()
        .find(|i| i.get("sandbox").is_none())
        .and_then(|i| i["name"].as_str())
        .expect("a host interface")
        .to_string()
}

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

/// Asserts the node holds no route, rule or veth of a pod.
pub fn assert_host_clean(node_netns: &str, pod_ip: &str, veth: &str) {
    let links = ip(&["-n", node_netns, "-o", "link", "show"]);
    assert!(
        !links.iter().any(|l| l.contains(veth)),
        "host veth {veth} left: {links:?}"
    );
    let routes = ip(&["-n", node_netns, "-4", "route", "show", "table", "all"]);
    assert!(
        !routes.iter().any(|l| l.starts_with(&format!("{pod_ip} "))),
        "route to {pod_ip} left: {routes:?}"
    );
    let rules = ip(&["-n", node_netns, "-4", "rule", "show"]);
    assert!(
        !rules
            .iter()
            .any(|l| l.split_whitespace().any(|w| w == pod_ip)),
        "rule for {pod_ip} left: {rules:?}"
    );
}

/// Asserts the node routes `pod_ip` to `veth` with the prio-512 rule.
pub fn assert_host_wired(node_netns: &str, pod_ip: &str, veth: &str) {
    let routes = ip(&["-n", node_netns, "-4", "route", "show"]);
    let want = format!("{pod_ip} dev {veth} scope link");
    assert!(
        routes.iter().any(|l| l == &want),
        "{want} missing: {routes:?}"
    );
    let rules = ip(&["-n", node_netns, "-4", "rule", "show"]);
    let want = format!("512: from all to {pod_ip} lookup main");
    assert!(
        rules.iter().any(|l| l == &want),
        "{want} missing: {rules:?}"
    );
}
