//! Root tests: IPv6-only and dual-stack pods wired by `setup_pod` between two fresh network
//! namespaces, checked, pinged from the "host" namespace and torn down.

use crate::support;

use std::net::{Ipv4Addr, Ipv6Addr};

use netops::{
    CheckError, ExpectedPod, PodSpec, PodWiring, RT_TABLE_MAIN, check_pod, format_mac, setup_pod,
    teardown_host, teardown_pod_host,
};
use support::{NsPair, run};
use testkit::netns::count;

const IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 5);
const IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 5);
const VETH: &str = "enitest0000006";

fn spec(ipv4: Option<Ipv4Addr>) -> PodSpec {
    PodSpec {
        host_veth: VETH.into(),
        container_ifname: "eth0".into(),
        ipv4,
        ipv6: Some(IP6),
        egress_ipv4: None,
        mtu: 9001,
        route_table: RT_TABLE_MAIN,
    }
}

fn expected(ipv4: Option<Ipv4Addr>, wiring: &PodWiring) -> ExpectedPod {
    ExpectedPod {
        container_ifname: "eth0".into(),
        host_veth: VETH.into(),
        ipv4,
        ipv6: Some(IP6),
        egress_ipv4: None,
        route_table: RT_TABLE_MAIN,
        container_mac: Some(wiring.container_mac),
        host_mac: Some(wiring.host_mac),
    }
}

/// The "host" namespace gets its own addresses on `lo` (what a node's addresses are to a pod:
/// a source for pings and the destination of replies), inside the test namespace only.
fn namespaces() -> NsPair {
    let ns = NsPair::new();
    ns.ip_host(&["link", "set", "lo", "up"]);
    ns.ip_host(&["addr", "add", "10.99.0.1/32", "dev", "lo"]);
    ns.ip_host(&["-6", "addr", "add", "fd00:99::1/128", "dev", "lo"]);
    ns
}

/// A setting under /proc/sys/net/ipv6/conf as namespace `ns` sees it.
fn ipv6_conf(ns: &str, ifname: &str, setting: &str) -> String {
    let path = format!("/proc/sys/net/ipv6/conf/{ifname}/{setting}");
    run(&["ip", "netns", "exec", ns, "cat", &path])
        .trim()
        .to_string()
}

/// Pings from the host namespace: up to 3 tries of 2 s each (the host veth's own link-local
/// address may still be in DAD for the first neighbour solicitation).
fn ping(ns: &NsPair, ip: &str) -> bool {
    (0..3).any(|_| testkit::netns::ping(&ns.host, ip))
}

fn assert_ipv6_wired(ns: &NsPair, wiring: &PodWiring) {
    let host_mac = format_mac(&wiring.host_mac);
    let addrs = ns.ip_pod(&["-6", "-o", "addr", "show", "dev", "eth0", "scope", "global"]);
    assert_eq!(addrs.len(), 1, "{addrs:?}");
    assert!(
        addrs[0].contains("inet6 2001:db8::5/128 scope global nodad"),
        "not a /128 without DAD: {addrs:?}"
    );
    assert!(!addrs[0].contains("tentative"), "{addrs:?}");

    let pod_routes = ns.ip_pod(&["-6", "route", "show"]);
    let starting =
        |routes: &[String], prefix: &str| routes.iter().filter(|r| r.starts_with(prefix)).count();
    assert_eq!(
        starting(&pod_routes, "default via fe80::1 dev eth0 "),
        1,
        "{pod_routes:?}"
    );
    assert_eq!(
        starting(&pod_routes, "fe80::1 dev eth0 "),
        1,
        "{pod_routes:?}"
    );
    let neigh = ns.ip_pod(&["-6", "neigh", "show"]);
    assert!(
        neigh.contains(&format!("fe80::1 dev eth0 lladdr {host_mac} PERMANENT")),
        "{neigh:?}"
    );

    let host_routes = ns.ip_host(&["-6", "route", "show"]);
    assert_eq!(
        starting(&host_routes, &format!("2001:db8::5 dev {VETH} ")),
        1,
        "{host_routes:?}"
    );
    let rules = ns.ip_host(&["-6", "rule", "show"]);
    assert_eq!(
        count(&rules, "512: from all to 2001:db8::5 lookup main"),
        1,
        "{rules:?}"
    );
    assert!(!rules.iter().any(|r| r.starts_with("1536:")), "{rules:?}");

    assert_eq!(ipv6_conf(&ns.host, VETH, "accept_ra"), "0");
    assert_eq!(ipv6_conf(&ns.pod, "eth0", "disable_ipv6"), "0");
    assert_eq!(ipv6_conf(&ns.pod, "lo", "disable_ipv6"), "0");
}

fn assert_ipv6_clean(ns: &NsPair) {
    let routes = ns.ip_host(&["-6", "route", "show", "table", "all"]);
    assert!(
        !routes.iter().any(|l| l.starts_with("2001:db8::5 ")),
        "IPv6 host route left: {routes:?}"
    );
    let rules = ns.ip_host(&["-6", "rule", "show"]);
    assert!(
        !rules.iter().any(|l| l.contains("2001:db8::5")),
        "IPv6 host rule left: {rules:?}"
    );
    let links = ns.ip_host(&["-o", "link", "show"]);
    assert!(
        !links.iter().any(|l| l.contains(VETH)),
        "host veth left: {links:?}"
    );
}

fn problems(ns: &NsPair, expected: &ExpectedPod) -> Vec<String> {
    match check_pod(&ns.host_nl(), &ns.pod_nl(), expected) {
        Ok(()) => Vec::new(),
        Err(CheckError::Mismatch(m)) => m.problems,
        Err(CheckError::Netlink(e)) => panic!("reading failed: {e}"),
    }
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn an_ipv6_only_pod_is_wired_reachable_checked_and_torn_down() {
    let ns = namespaces();
    let wiring = setup_pod(&ns.host_nl(), &ns.pod_nl(), &spec(None)).expect("setup_pod");
    assert_ipv6_wired(&ns, &wiring);
    assert!(
        ns.ip_pod(&["-4", "-o", "addr", "show", "dev", "eth0"])
            .is_empty(),
        "an IPv6-only pod has no IPv4 address"
    );
    assert!(ping(&ns, "2001:db8::5"), "pod not reachable over IPv6");

    let expected = expected(None, &wiring);
    assert_eq!(problems(&ns, &expected), Vec::<String>::new());
    ns.ip_pod(&[
        "-6", "route", "del", "default", "via", "fe80::1", "dev", "eth0",
    ]);
    ns.ip_host(&["-6", "route", "del", "2001:db8::5/128", "dev", VETH]);
    assert_eq!(
        problems(&ns, &expected),
        [
            "pod route default via fe80::1 dev eth0 missing",
            "host route 2001:db8::5/128 dev enitest0000006 missing",
        ]
    );
    // Put the host route back so teardown has the whole wiring to remove.
    ns.ip_host(&["-6", "route", "add", "2001:db8::5/128", "dev", VETH]);

    let report = teardown_host(&ns.host_nl(), IP6, Some(VETH)).expect("teardown");
    assert_eq!(report.rules_removed.len(), 1);
    assert!(report.route_removed && report.veth_removed);
    assert_ipv6_clean(&ns);
    assert!(!ping(&ns, "2001:db8::5"), "pod still reachable after DEL");
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn a_dual_stack_pod_gets_both_families_on_one_veth() {
    let ns = namespaces();
    let wiring = setup_pod(&ns.host_nl(), &ns.pod_nl(), &spec(Some(IP))).expect("setup_pod");
    assert_ipv6_wired(&ns, &wiring);
    let addrs4 = ns.ip_pod(&["-4", "-o", "addr", "show", "dev", "eth0"]);
    assert!(
        addrs4.len() == 1 && addrs4[0].contains("inet 10.0.0.5/32"),
        "{addrs4:?}"
    );
    assert_eq!(
        ns.ip_pod(&["-4", "route", "show"]),
        [
            "default via 169.254.1.1 dev eth0",
            "169.254.1.1 dev eth0 scope link"
        ]
    );
    let rules4 = ns.ip_host(&["-4", "rule", "show"]);
    assert_eq!(count(&rules4, "512: from all to 10.0.0.5 lookup main"), 1);
    assert!(ping(&ns, "10.0.0.5"), "pod not reachable over IPv4");
    assert!(ping(&ns, "2001:db8::5"), "pod not reachable over IPv6");

    let expected = expected(Some(IP), &wiring);
    assert_eq!(problems(&ns, &expected), Vec::<String>::new());
    ns.ip_host(&[
        "-6",
        "rule",
        "del",
        "to",
        "2001:db8::5/128",
        "lookup",
        "main",
        "pref",
        "512",
    ]);
    assert_eq!(
        problems(&ns, &expected),
        ["host rule to 2001:db8::5 lookup main prio 512 missing"]
    );
    ns.ip_host(&[
        "-6",
        "rule",
        "add",
        "to",
        "2001:db8::5/128",
        "lookup",
        "main",
        "pref",
        "512",
    ]);

    let report =
        teardown_pod_host(&ns.host_nl(), Some(IP), Some(IP6), Some(VETH)).expect("teardown");
    assert_eq!((report.rules_removed(), report.routes_removed()), (2, 2));
    assert!(report.veth_removed);
    assert_ipv6_clean(&ns);
    let routes4 = ns.ip_host(&["-4", "route", "show", "table", "all"]);
    assert!(
        !routes4.iter().any(|l| l.starts_with("10.0.0.5 ")),
        "{routes4:?}"
    );
    let rules4 = ns.ip_host(&["-4", "rule", "show"]);
    assert!(!rules4.iter().any(|l| l.contains("10.0.0.5")), "{rules4:?}");
    assert!(!ping(&ns, "10.0.0.5") && !ping(&ns, "2001:db8::5"));
}
