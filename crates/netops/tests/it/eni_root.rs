//! Root tests: a hot-plugged secondary ENI set up and torn down in a fresh "node" namespace
//! (the other namespace of the pair stands in for the VPC side of the link).

use crate::support;

use std::net::Ipv4Addr;

use netops::{EniSpec, NetlinkError, PRIO_FROM_ENI, eni_table, parse_mac, setup_eni, teardown_eni};
use support::{NsPair, run};

const MAC: &str = "02:aa:bb:cc:00:01";

/// An "ENI" as hot-plug leaves it: `eth1` in the node namespace, down, no address.
fn hot_plugged() -> NsPair {
    let ns = NsPair::new();
    run(&[
        "ip", "-n", &ns.pod, "link", "add", "vpcside", "type", "veth", "peer", "name", "eth1",
        "address", MAC, "netns", &ns.host,
    ]);
    run(&["ip", "-n", &ns.pod, "link", "set", "vpcside", "up"]);
    ns
}

fn spec() -> EniSpec {
    EniSpec {
        mac: parse_mac(MAC).unwrap(),
        device_number: 1,
        primary_ip: Ipv4Addr::new(10, 0, 1, 20),
        subnet: "10.0.1.0/24".parse().unwrap(),
        mtu: 9001,
    }
}

/// Everything setup may touch in the node namespace.
fn state(ns: &NsPair) -> Vec<String> {
    let mut all = ns.ip_host(&["-o", "link", "show", "dev", "eth1"]);
    all.extend(ns.ip_host(&["-4", "-o", "addr", "show"]));
    all.extend(ns.ip_host(&["-4", "route", "show", "table", "all"]));
    all.extend(ns.ip_host(&["-4", "rule", "show"]));
    all
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn setup_configures_link_table_and_rule_and_a_second_run_changes_nothing() {
    let ns = hot_plugged();
    let nl = ns.host_nl();
    let first = setup_eni(&nl, &spec()).expect("setup");
    assert_eq!(first.ifname, "eth1");
    assert!(!first.changes.is_empty());

    let link = ns.ip_host(&["-o", "link", "show", "dev", "eth1"]).join(" ");
    assert!(link.contains("mtu 9001") && link.contains(",UP"), "{link}");
    let addrs = ns
        .ip_host(&["-4", "-o", "addr", "show", "dev", "eth1"])
        .join(" ");
    assert!(addrs.contains("inet 10.0.1.20/24"), "{addrs}");
    let table = ns.ip_host(&["-4", "route", "show", "table", "2"]);
    assert_eq!(
        table,
        vec![
            "default via 10.0.1.1 dev eth1",
            "10.0.1.1 dev eth1 scope link"
        ],
        "table {}",
        eni_table(1)
    );
    let main = ns.ip_host(&["-4", "route", "show", "table", "main"]);
    assert!(
        !main.iter().any(|r| r.contains("dev eth1")),
        "connected route left in main: {main:?}"
    );
    let rules = ns.ip_host(&["-4", "rule", "show"]);
    let want = format!("{PRIO_FROM_ENI}: from 10.0.1.20 lookup 2");
    assert_eq!(rules.iter().filter(|r| **r == want).count(), 1, "{rules:?}");

    let before = state(&ns);
    let second = setup_eni(&nl, &spec()).expect("setup again");
    assert!(
        second.changes.is_empty(),
        "a second run changed {:?}",
        second.changes
    );
    assert_eq!(state(&ns), before);
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn setup_repairs_what_was_changed_by_hand() {
    let ns = hot_plugged();
    let nl = ns.host_nl();
    setup_eni(&nl, &spec()).unwrap();
    let good = state(&ns);
    run(&[
        "ip", "-n", &ns.host, "route", "del", "default", "table", "2",
    ]);
    run(&[
        "ip",
        "-n",
        &ns.host,
        "route",
        "add",
        "10.9.0.0/16",
        "dev",
        "eth1",
        "table",
        "2",
    ]);
    run(&[
        "ip",
        "-n",
        &ns.host,
        "addr",
        "add",
        "192.168.7.7/24",
        "dev",
        "eth1",
    ]);
    run(&["ip", "-n", &ns.host, "rule", "del", "pref", "32765"]);
    let repaired = setup_eni(&nl, &spec()).unwrap();
    assert!(repaired.changes.len() >= 4, "{:?}", repaired.changes);
    assert_eq!(state(&ns), good);
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn teardown_removes_the_table_the_eni_rule_and_its_pods_rules() {
    let ns = hot_plugged();
    let nl = ns.host_nl();
    setup_eni(&nl, &spec()).unwrap();
    // A pod on this ENI, and one on another ENI's table that must stay.
    run(&[
        "ip",
        "-n",
        &ns.host,
        "rule",
        "add",
        "from",
        "10.0.1.30",
        "lookup",
        "2",
        "pref",
        "1536",
    ]);
    run(&[
        "ip",
        "-n",
        &ns.host,
        "rule",
        "add",
        "from",
        "10.0.1.40",
        "lookup",
        "3",
        "pref",
        "1536",
    ]);
    let report = teardown_eni(&nl, 1, Ipv4Addr::new(10, 0, 1, 20), false).unwrap();
    assert_eq!(report.rules.len(), 2, "{report:?}");
    assert_eq!(report.routes.len(), 2, "{report:?}");
    assert!(
        ns.ip_host(&["-4", "route", "show", "table", "2"])
            .is_empty()
    );
    let rules = ns.ip_host(&["-4", "rule", "show"]).join("\n");
    assert!(
        !rules.contains("10.0.1.20") && !rules.contains("10.0.1.30"),
        "{rules}"
    );
    assert!(
        rules.contains("from 10.0.1.40 lookup 3"),
        "another ENI's pod rule was removed: {rules}"
    );
    let again = teardown_eni(&nl, 1, Ipv4Addr::new(10, 0, 1, 20), false).unwrap();
    assert!(again.rules.is_empty() && again.routes.is_empty());
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn an_eni_whose_link_has_not_appeared_is_reported_as_such() {
    let ns = NsPair::new();
    match setup_eni(&ns.host_nl(), &spec()) {
        Err(NetlinkError::NoLinkWithMac { mac }) => assert_eq!(mac, MAC),
        other => panic!("{other:?}"),
    }
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn teardown_keeping_the_table_leaves_the_successor_at_that_index_working() {
    // The successor at device 1 is set up; the gone ENI (10.0.1.9) left its own rule behind.
    let ns = hot_plugged();
    let nl = ns.host_nl();
    setup_eni(&nl, &spec()).unwrap();
    let pref = PRIO_FROM_ENI.to_string();
    run(&[
        "ip", "-n", &ns.host, "rule", "add", "from", "10.0.1.9", "lookup", "2", "pref", &pref,
    ]);
    run(&[
        "ip",
        "-n",
        &ns.host,
        "rule",
        "add",
        "from",
        "10.0.1.30",
        "lookup",
        "2",
        "pref",
        "1536",
    ]);
    let table_before = ns.ip_host(&["-4", "route", "show", "table", "2"]);

    let report = teardown_eni(&nl, 1, Ipv4Addr::new(10, 0, 1, 9), true).unwrap();
    assert_eq!(
        report.rules.len(),
        1,
        "only the gone ENI's rule: {report:?}"
    );
    assert!(report.routes.is_empty(), "{report:?}");
    assert_eq!(
        ns.ip_host(&["-4", "route", "show", "table", "2"]),
        table_before
    );
    let rules = ns.ip_host(&["-4", "rule", "show"]).join("\n");
    assert!(!rules.contains("10.0.1.9 "), "{rules}");
    assert!(
        rules.contains("from 10.0.1.20 lookup 2") && rules.contains("from 10.0.1.30 lookup 2"),
        "the successor's rules were removed: {rules}"
    );
}
