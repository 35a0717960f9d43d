//! VPC-in-a-box with IPv6: aws-node's IPv6 mode (pods get an address of their node's /80) and
//! dual-stack pods (an IPv4 and an IPv6 address each), with real traffic between pods on two
//! nodes, to the nodes and to the outside, and addresses kept across a SIGKILL of ipamd.

use crate::common;

use std::net::{IpAddr, Ipv6Addr};

use common::{delegated, in_prefix};
use e2e::{Pod, VpcBox, require_root, run_bounded};
use ipam_proto::{AttachmentKey, Client, ClientError, ErrorKind};
use serde_json::Value;

fn key(pod: &Pod) -> AttachmentKey {
    AttachmentKey {
        network: "vpc-cni".into(),
        container_id: pod.container_id.clone(),
        ifname: "eth0".into(),
    }
}

/// The addresses an ADD result lists, with their gateways.
fn addresses(result: &Value) -> Vec<(IpAddr, u8, Option<IpAddr>)> {
    result["ips"]
        .as_array()
        .unwrap_or_else(|| panic!("no ips: {result}"))
        .iter()
        .map(|ip| {
            let cidr = ip["address"].as_str().expect("an address");
            let (addr, len) = cidr.split_once('/').expect("a CIDR");
            let gateway = ip["gateway"]
                .as_str()
                .map(|g| g.parse().expect("a gateway"));
            (
                addr.parse().expect("an IP"),
                len.parse().expect("a length"),
                gateway,
            )
        })
        .collect()
}

fn ipv6_of(result: &Value) -> Ipv6Addr {
    addresses(result)
        .into_iter()
        .find_map(|(ip, len, gw)| match ip {
            IpAddr::V6(v6) => {
                assert_eq!(len, 128, "IPv6 pods get a /128: {result}");
                assert_eq!(gw, Some("fe80::1".parse().unwrap()), "{result}");
                Some(v6)
            }
            IpAddr::V4(_) => None,
        })
        .unwrap_or_else(|| panic!("no IPv6 address in {result}"))
}

fn ping_from(netns: &str, to: &str) -> bool {
    let family = if to.contains(':') { "-6" } else { "-4" };
    run_bounded(
        5,
        "ip",
        &[
            "netns", "exec", netns, "ping", family, "-c", "1", "-W", "2", to,
        ],
        None,
    )
    .status
    .success()
}

/// Every pod pings every other pod and every target; returns what failed.
fn unreachable(pods: &[(Pod, Vec<String>)], targets: &[String]) -> Vec<String> {
    let mut failures = Vec::new();
    for (from, own) in pods {
        let others = pods
            .iter()
            .filter(|(p, _)| p.netns != from.netns)
            .flat_map(|(_, ips)| ips.iter());
        for to in others.chain(targets) {
            if !ping_from(&from.netns, to) {
                failures.push(format!("{own:?} -> {to}"));
            }
        }
    }
    failures
}

/// What ipamd on node `i` holds for `pod`, or `None` when it holds nothing.
fn held(vbox: &VpcBox, i: usize, pod: &Pod) -> Option<ipam_proto::Allocation> {
    match Client::new(&vbox.node(i).ipamd_socket).check(ipam_proto::CheckRequest { key: key(pod) })
    {
        Ok(reply) => Some(reply.allocation),
        Err(ClientError::Daemon(e)) if e.kind == ErrorKind::UnknownAttachment => None,
        Err(e) => panic!("ipamd check: {e}"),
    }
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn ipv6_pods_on_two_nodes_reach_each_other_the_nodes_and_the_outside_and_survive_a_kill() {
    require_root();
    let vbox = VpcBox::up(&["--nodes", "2", "--ip-family", "ipv6"]);
    let mut pods = Vec::new();
    let mut egress_of = Vec::new();
    for node in [1, 2] {
        let prefixes = delegated(&vbox, vbox.node(node));
        assert_eq!(prefixes.len(), 1, "one /80 on node {node}: {prefixes:?}");
        for _ in 0..2 {
            let pod = vbox.pod(node);
            let result = pod.add();
            let ip = ipv6_of(&result);
            assert_eq!(addresses(&result).len(), 1, "IPv6 only: {result}");
            assert!(in_prefix(ip, &prefixes[0]), "{ip} not in {}", prefixes[0]);
            let allocation = held(&vbox, node, &pod).expect("ipamd holds the pod's address");
            assert_eq!((allocation.ip, allocation.ipv6), (None, Some(ip)));
            let egress = allocation.egress_ipv4.expect("an IPv4 egress address");
            assert!(
                egress.octets()[..2] == [169, 254] && (172..176).contains(&egress.octets()[2]),
                "{egress} is not in 169.254.172.0/22"
            );
            egress_of.push((node, egress));
            pods.push((pod, vec![ip.to_string()]));
        }
    }
    let node_ips: Vec<String> = [1, 2]
        .iter()
        .map(|&i| {
            vbox.node(i)
                .primary_ipv6
                .expect("the node's IPv6")
                .to_string()
        })
        .collect();
    let outside = vbox.outside().ipv6.expect("the outside's IPv6").to_string();
    let mut targets = node_ips.clone();
    targets.push(outside);
    let failures = unreachable(&pods, &targets);
    assert!(failures.is_empty(), "unreachable: {failures:?}");

    // IPv4 egress: each pod reaches the IPv4-only outside through its node-local address,
    // which the outside never sees: it sees the pod's node.
    let node_v4: Vec<String> = [1, 2]
        .iter()
        .map(|&i| vbox.node(i).primary_ip.to_string())
        .collect();
    let egress_ips: Vec<String> = egress_of.iter().map(|(_, e)| e.to_string()).collect();
    let watched: Vec<&str> = node_v4
        .iter()
        .chain(&egress_ips)
        .map(String::as_str)
        .collect();
    vbox.watch_outside_sources(&watched);
    let outside_v4 = vbox.outside().ip.to_string();
    for (pod, own) in &pods {
        assert!(
            ping_from(&pod.netns, &outside_v4),
            "{own:?} cannot reach the outside's IPv4 address {outside_v4}"
        );
    }
    for (i, ip) in node_v4.iter().enumerate() {
        let sent = egress_of.iter().filter(|(n, _)| *n == i + 1).count() as u64;
        assert!(
            vbox.outside_seen_from(ip) >= sent,
            "the outside did not see node {} ({ip}) for its pods",
            i + 1
        );
    }
    for ip in &egress_ips {
        assert_eq!(vbox.outside_seen_from(ip), 0, "the outside saw {ip}");
    }

    // SIGKILL ipamd on node 1: its pods keep their addresses, and a new pod gets another.
    let before: Vec<_> = pods
        .iter()
        .filter(|(p, _)| p.node.netns == vbox.node(1).netns)
        .map(|(p, _)| held(&vbox, 1, p))
        .collect();
    vbox.stop_ipamd(1, true);
    vbox.start_ipamd(1);
    let after: Vec<_> = pods
        .iter()
        .filter(|(p, _)| p.node.netns == vbox.node(1).netns)
        .map(|(p, _)| held(&vbox, 1, p))
        .collect();
    assert_eq!(before, after, "addresses kept across SIGKILL and restart");
    assert_eq!(
        delegated(&vbox, vbox.node(1)).len(),
        1,
        "no second /80 after a restart"
    );
    let pod = vbox.pod(1);
    let fresh_result = pod.add();
    let fresh = ipv6_of(&fresh_result);
    assert!(
        pods.iter().all(|(_, ips)| ips[0] != fresh.to_string()),
        "{fresh} was already held"
    );
    pods.push((pod, vec![fresh.to_string()]));
    let failures = unreachable(&pods, &node_ips);
    assert!(
        failures.is_empty(),
        "unreachable after the restart: {failures:?}"
    );

    // DEL gives the address back; the pod's routes and rules go.
    let (pod, ips) = pods.pop().expect("a pod");
    pod.del(&fresh_result);
    assert_eq!(held(&vbox, 1, &pod), None);
    let routes = e2e::ip(&["-n", &pod.node.netns, "-6", "route", "show"]);
    assert!(
        !routes.iter().any(|r| r.starts_with(&ips[0])),
        "{} still routed: {routes:?}",
        ips[0]
    );
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn dual_stack_pods_reach_each_other_over_both_families_and_keep_both_across_a_kill() {
    require_root();
    let vbox = VpcBox::up(&["--nodes", "2", "--ip-family", "dual"]);
    let mut pods = Vec::new();
    let mut results = Vec::new();
    for node in [1, 2] {
        for _ in 0..2 {
            let pod = vbox.pod(node);
            let result = pod.add();
            results.push(result.clone());
            let all = addresses(&result);
            assert_eq!(all.len(), 2, "an IPv4 and an IPv6 address: {result}");
            let v4 = all
                .iter()
                .find(|(ip, _, _)| ip.is_ipv4())
                .map(|(ip, len, _)| {
                    assert_eq!(*len, 32);
                    ip.to_string()
                })
                .unwrap_or_else(|| panic!("no IPv4 in {result}"));
            let v6 = ipv6_of(&result);
            let routes: Vec<&str> = result["routes"]
                .as_array()
                .expect("routes")
                .iter()
                .filter_map(|r| r["dst"].as_str())
                .collect();
            assert!(
                routes.contains(&"0.0.0.0/0") && routes.contains(&"::/0"),
                "{result}"
            );
            pods.push((pod, vec![v4, v6.to_string()]));
        }
    }
    let mut nodes: Vec<String> = Vec::new();
    for i in [1, 2] {
        nodes.push(vbox.node(i).primary_ip.to_string());
        nodes.push(vbox.node(i).primary_ipv6.expect("IPv6").to_string());
    }
    let failures = unreachable(&pods, &nodes);
    assert!(failures.is_empty(), "unreachable: {failures:?}");

    let on_node1: Vec<&Pod> = pods
        .iter()
        .map(|(p, _)| p)
        .filter(|p| p.node.netns == vbox.node(1).netns)
        .collect();
    let before: Vec<_> = on_node1.iter().map(|p| held(&vbox, 1, p)).collect();
    assert!(before.iter().all(|a| {
        a.as_ref()
            .is_some_and(|a| a.ip.is_some() && a.ipv6.is_some())
    }));
    vbox.stop_ipamd(1, true);
    vbox.start_ipamd(1);
    let after: Vec<_> = on_node1.iter().map(|p| held(&vbox, 1, p)).collect();
    assert_eq!(
        before, after,
        "both addresses kept across SIGKILL and restart"
    );

    // DEL releases both families.
    let (pod, _) = &pods[0];
    pod.del(&results[0]);
    assert_eq!(held(&vbox, 1, pod), None);
    let ipamd_pods = vbox
        .node(1)
        .get_json(&format!("{}/v1/pods", e2e::INTROSPECT));
    let listed: Vec<&str> = ipamd_pods
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|p| p["IP"].as_str())
        .collect();
    for ip in &pods[0].1 {
        assert!(
            !listed.contains(&ip.as_str()),
            "{ip} still listed: {listed:?}"
        );
    }
    assert_eq!(listed.len(), 2, "the other pod's two addresses: {listed:?}");
}
