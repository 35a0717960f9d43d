//! VPC-in-a-box with two nodes and secondary ENIs: real traffic between pods on primary and
//! secondary ENIs of both nodes, SNAT to the outside, the source/destination check, ENIs
//! detached and re-attached through EC2, and node setup that changes nothing when repeated.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use e2e::{Pod, VpcBox, conf, ip, require_root, run_bounded};
use ipam_proto::{Allocation, AttachmentKey};
use serde_json::{Value, json};

/// A pod the plugin wired, with what ipamd says about its address.
struct Wired {
    pod: Pod,
    ip: String,
    allocation: Allocation,
}

fn key(pod: &Pod) -> AttachmentKey {
    AttachmentKey {
        network: "vpc-cni".into(),
        container_id: pod.container_id.clone(),
        ifname: "eth0".into(),
    }
}

/// ADDs a pod on `node`. While ipamd answers "try again later" (the pool is growing), waits
/// (bounded) until it has a free address and tries again, as a runtime would.
fn add_pod(vbox: &VpcBox, node: usize) -> Wired {
    let pod = vbox.pod(node);
    let c = conf("1.1.0", &vbox.node(node).ipamd_socket, json!({}));
    let result = testkit::wait_ok(Duration::from_secs(20), "an address for the pod", || {
        let out = pod.cni("ADD").stdin(c.clone()).run();
        if out.code == 0 {
            return Ok(out.ok());
        }
        out.error(11, "");
        testkit::wait_until(Duration::from_secs(20), "a free address", || {
            vbox.status(node).pool.available > 0
        });
        Err(out.stdout)
    });
    let allocation = vbox.allocation(node, key(&pod));
    Wired {
        ip: pod_ip(&result),
        pod,
        allocation,
    }
}

/// Pods on `node` until at least one sits on a secondary ENI.
fn pods_on_both_kinds_of_eni(vbox: &VpcBox, node: usize) -> Vec<Wired> {
    let mut pods = Vec::new();
    for _ in 0..12 {
        pods.push(add_pod(vbox, node));
        let primary = pods.iter().any(|w| w.allocation.device_number == 0);
        let secondary = pods.iter().any(|w| w.allocation.device_number > 0);
        if primary && secondary {
            return pods;
        }
    }
    panic!("no pod on a secondary ENI of node {node} after 12 pods");
}

fn ping_from(netns: &str, to: &str) -> bool {
    run_bounded(
        5,
        "ip",
        &["netns", "exec", netns, "ping", "-c", "1", "-W", "2", to],
        None,
    )
    .status
    .success()
}

fn two_nodes(extra: &[&str]) -> VpcBox {
    // d3.xlarge: 3 IPv4 per ENI, so two secondaries on each ENI and a second ENI once the
    // first pod takes one of the primary's.
    let mut args = vec!["--nodes", "2", "--instance-type", "d3.xlarge"];
    args.extend_from_slice(extra);
    VpcBox::up(&args)
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn pods_on_primary_and_secondary_enis_of_two_nodes_reach_everything() {
    require_root();
    let vbox = two_nodes(&[]);
    let mut pods = pods_on_both_kinds_of_eni(&vbox, 1);
    pods.extend(pods_on_both_kinds_of_eni(&vbox, 2));
    for w in pods.iter().filter(|w| w.allocation.device_number > 0) {
        assert_eq!(w.allocation.route_table, w.allocation.device_number + 1);
        let rules = ip(&["-n", &w.pod.node.netns, "-4", "rule", "show"]);
        let want = format!("1536: from {} lookup {}", w.ip, w.allocation.route_table);
        assert!(rules.contains(&want), "{want} missing: {rules:?}");
    }
    let nodes = [
        vbox.node(1).primary_ip.to_string(),
        vbox.node(2).primary_ip.to_string(),
    ];
    let mut failures = Vec::new();
    for from in &pods {
        for to in pods.iter().filter(|p| p.ip != from.ip) {
            if !ping_from(&from.pod.netns, &to.ip) {
                failures.push(format!("{} -> {}", from.ip, to.ip));
            }
        }
        for node in &nodes {
            if !ping_from(&from.pod.netns, node) {
                failures.push(format!("{} -> node {node}", from.ip));
            }
        }
    }
    assert!(failures.is_empty(), "unreachable: {failures:?}");
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn pod_traffic_to_the_outside_leaves_snated_to_the_nodes_primary_ip() {
    require_root();
    let vbox = two_nodes(&[]);
    let pods = pods_on_both_kinds_of_eni(&vbox, 1);
    let node_ip = vbox.node(1).primary_ip.to_string();
    let outside = vbox.outside().ip.to_string();
    let mut watched = vec![node_ip.clone()];
    watched.extend(pods.iter().map(|w| w.ip.clone()));
    vbox.watch_outside_sources(&watched.iter().map(String::as_str).collect::<Vec<_>>());
    for w in &pods {
        assert!(
            ping_from(&w.pod.netns, &outside),
            "{} (device {}) cannot reach the outside",
            w.ip,
            w.allocation.device_number
        );
    }
    assert!(
        vbox.outside_seen_from(&node_ip) >= pods.len() as u64,
        "the outside did not see the node's address"
    );
    for w in &pods {
        assert_eq!(
            vbox.outside_seen_from(&w.ip),
            0,
            "the outside saw pod address {}",
            w.ip
        );
    }
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn without_its_1536_rule_a_secondary_eni_pod_is_dropped_by_the_source_destination_check() {
    require_root();
    let vbox = two_nodes(&[]);
    let pods = pods_on_both_kinds_of_eni(&vbox, 1);
    let target = add_pod(&vbox, 2);
    let w = pods
        .iter()
        .find(|w| w.allocation.device_number > 0)
        .unwrap();
    assert!(
        ping_from(&w.pod.netns, &target.ip),
        "the secondary-ENI pod reaches the other node's pod"
    );
    ip(&[
        "-n",
        &w.pod.node.netns,
        "rule",
        "del",
        "from",
        &w.ip,
        "lookup",
        &w.allocation.route_table.to_string(),
        "pref",
        "1536",
    ]);
    // Now its packets leave through the primary ENI, which does not hold its address.
    for _ in 0..3 {
        assert!(
            !ping_from(&w.pod.netns, &target.ip),
            "a packet from the wrong ENI got through"
        );
    }
}

/// The node's rules and every route table, and the ENI at `device` of node 1 in EC2.
fn eni_at(vbox: &VpcBox, device: u64) -> Option<Value> {
    let instance = vbox.node(1).instance_id.clone();
    vbox.sim_state()["enis"]
        .as_array()?
        .iter()
        .find(|e| {
            e["attachment"]["instance_id"] == instance.as_str()
                && e["attachment"]["device_index"].as_u64() == Some(device)
        })
        .cloned()
}

fn wait_until(what: &str, done: impl FnMut() -> bool) {
    testkit::wait_until(Duration::from_secs(20), what, done);
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn an_eni_detached_through_ec2_leaves_nothing_behind_and_comes_back_when_reattached() {
    require_root();
    // WARM_ENI_TARGET=0 and no cooldown: once its pods are gone the pool stays put, so no new
    // ENI takes device 1 while the old one is detached.
    let vbox = VpcBox::up(&[
        "--instance-type",
        "d3.xlarge",
        "--ipamd-env",
        "WARM_ENI_TARGET=0",
        "--ipamd-env",
        "IP_COOLDOWN_PERIOD=0",
        "--ipamd-env",
        "IPAMD_RECONCILE_INTERVAL=1",
    ]);
    let node = vbox.node(1).netns.clone();
    let pods: Vec<_> = (0..3).map(|_| add_pod(&vbox, 1)).collect();
    let on_eni = pods
        .iter()
        .find(|w| w.allocation.device_number == 1)
        .expect("a pod on device 1");
    for w in &pods {
        w.pod
            .cni("DEL")
            .stdin(conf("1.1.0", &w.pod.node.ipamd_socket, json!({})))
            .run()
            .ok_silent();
    }
    let eni = eni_at(&vbox, 1).expect("ENI at device 1");
    let eni_ip = eni["primary_ip"].as_str().unwrap().to_string();
    let rule = format!("32765: from {eni_ip} lookup 2");
    assert!(
        ip(&["-n", &node, "-4", "rule"]).contains(&rule),
        "{rule} missing before the detach"
    );
    assert!(!ip(&["-n", &node, "-4", "route", "show", "table", "2"]).is_empty());

    let (status, body) = vbox.ec2(&[
        ("Action", cloud::Action::DetachNetworkInterface.wire_name()),
        ("AttachmentId", eni["attachment"]["id"].as_str().unwrap()),
    ]);
    assert_eq!(status, 200, "{body}");
    wait_until("the node to drop ENI 1's table and rules", || {
        let rules = ip(&["-n", &node, "-4", "rule"]);
        ip(&["-n", &node, "-4", "route", "show", "table", "2"]).is_empty()
            && !rules.iter().any(|r| r.contains("lookup 2"))
    });
    let routes = ip(&["-n", &node, "-4", "route", "show", "table", "all"]);
    assert!(
        !routes
            .iter()
            .any(|r| r.contains(&eni_ip) || r.contains("table 2")),
        "{routes:?}"
    );
    assert!(
        !ip(&["-n", &node, "-4", "rule"])
            .iter()
            .any(|r| r.contains(&on_eni.ip))
    );

    let (status, body) = vbox.ec2(&[
        ("Action", cloud::Action::AttachNetworkInterface.wire_name()),
        ("NetworkInterfaceId", eni["id"].as_str().unwrap()),
        ("InstanceId", &vbox.node(1).instance_id),
        ("DeviceIndex", "1"),
    ]);
    assert_eq!(status, 200, "{body}");
    wait_until("the node to restore ENI 1's table and rule", || {
        ip(&["-n", &node, "-4", "rule"]).contains(&rule)
            && ip(&["-n", &node, "-4", "route", "show", "table", "2"]).len() == 2
    });
    // And its addresses serve pods again.
    let again: Vec<_> = (0..3).map(|_| add_pod(&vbox, 1)).collect();
    assert!(again.iter().any(|w| w.allocation.device_number == 1));
}

/// `iptables-save -c` of a table in a namespace: rule text -> packet counter.
fn counters(netns: &str, table: &str) -> BTreeMap<String, u64> {
    let out = run_bounded(
        10,
        "ip",
        &["netns", "exec", netns, "iptables-save", "-c", "-t", table],
        None,
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (counts, rule) = l.strip_prefix('[')?.split_once("] ")?;
            Some((rule.to_string(), counts.split(':').next()?.parse().ok()?))
        })
        .collect()
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn node_setup_changes_nothing_when_ipamd_runs_it_again() {
    require_root();
    let vbox = two_nodes(&[]);
    let pods = pods_on_both_kinds_of_eni(&vbox, 1);
    let outside = vbox.outside().ip.to_string();
    for w in &pods {
        assert!(ping_from(&w.pod.netns, &outside));
    }
    let node = vbox.node(1).netns.clone();
    // The controller may still be growing the pool after the last ADD: wait until it holds
    // still, so the snapshot is of a settled node.
    vbox.node(1).quiesce();
    let total = vbox.status(1).pool.total;
    let snapshot = || {
        (
            ip(&["-n", &node, "-4", "rule"]),
            ip(&["-n", &node, "-4", "route", "show", "table", "all"]),
            ip(&["-n", &node, "-4", "-o", "addr"]),
        )
    };
    let before = snapshot();
    let (nat, mangle) = (counters(&node, "nat"), counters(&node, "mangle"));
    assert!(
        nat.values().any(|c| *c > 0),
        "some traffic went through the SNAT rules: {nat:?}"
    );

    vbox.stop_ipamd(1, false);
    vbox.start_ipamd(1);
    assert_eq!(
        vbox.status(1).pool.total,
        total,
        "the restart did not grow the pool"
    );
    assert_eq!(snapshot(), before, "rules, routes or addresses changed");
    for (table, old) in [("nat", nat), ("mangle", mangle)] {
        let new = counters(&node, table);
        let ours = |m: &BTreeMap<String, u64>| {
            m.keys()
                .filter(|r| r.contains("AWS"))
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(ours(&new), ours(&old), "{table} rules changed");
        for (rule, count) in &old {
            // A flushed and re-added rule would start again from zero.
            let now = new.get(rule).copied().unwrap_or(0);
            assert!(
                now >= *count,
                "{table}: counter of {rule} went from {count} to {now}"
            );
        }
    }
}
