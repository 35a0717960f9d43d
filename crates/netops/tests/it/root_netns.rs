//! Root tests: real pod wiring between two fresh network namespaces.

use crate::support;

use std::fs;
use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use netops::{
    CheckError, ExpectedPod, Netlink, NetlinkError, PodSpec, PodWiring, RT_TABLE_MAIN, check_pod,
    create_pod_veth, format_mac, remove_pod_veth, routed_elsewhere, setup_pod, teardown_host,
    wire_pod_veth,
};
use support::{NsPair, run};
use testkit::netns::count;

const IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 5);
const VETH: &str = "enitest0000001";

fn spec(table: u32) -> PodSpec {
    PodSpec {
        host_veth: VETH.into(),
        container_ifname: "eth0".into(),
        ipv4: Some(IP),
        ipv6: None,
        egress_ipv4: None,
        mtu: 9001,
        route_table: table,
    }
}

fn expected(table: u32, wiring: Option<&PodWiring>) -> ExpectedPod {
    ExpectedPod {
        container_ifname: "eth0".into(),
        host_veth: VETH.into(),
        ipv4: Some(IP),
        ipv6: None,
        egress_ipv4: None,
        route_table: table,
        container_mac: wiring.map(|w| w.container_mac),
        host_mac: wiring.map(|w| w.host_mac),
    }
}

fn setup(ns: &NsPair, table: u32) -> PodWiring {
    setup_pod(&ns.host_nl(), &ns.pod_nl(), &spec(table)).expect("setup_pod")
}

/// Asserts the host has nothing of ours: no veth, no route to the pod, no pod rule.
fn assert_host_clean(ns: &NsPair) {
    let links = ns.ip_host(&["-o", "link", "show"]);
    assert!(
        !links.iter().any(|l| l.contains(VETH)),
        "host veth left: {links:?}"
    );
    let routes = ns.ip_host(&["-4", "route", "show", "table", "all"]);
    assert!(
        !routes.iter().any(|l| l.starts_with("10.0.0.5 ")),
        "host route left: {routes:?}"
    );
    let rules = ns.ip_host(&["-4", "rule", "show"]);
    assert!(
        !rules.iter().any(|l| l.contains("10.0.0.5")),
        "host rule left: {rules:?}"
    );
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn setup_pod_creates_every_item_exactly_once() {
    let ns = NsPair::new();
    let wiring = setup(&ns, RT_TABLE_MAIN);
    let host_mac = format_mac(&wiring.host_mac);
    let cont_mac = format_mac(&wiring.container_mac);

    let host_link = ns.ip_host(&["-o", "link", "show", "dev", VETH]).join(" ");
    assert!(host_link.contains("mtu 9001"), "{host_link}");
    assert!(host_link.contains(",UP"), "{host_link}");
    assert!(
        host_link.contains(&format!("link/ether {host_mac}")),
        "{host_link}"
    );
    let pod_link = ns.ip_pod(&["-o", "link", "show", "dev", "eth0"]).join(" ");
    assert!(pod_link.contains("eth0@if"), "{pod_link}");
    assert!(pod_link.contains("mtu 9001"), "{pod_link}");
    assert!(pod_link.contains(",UP"), "{pod_link}");
    assert!(
        pod_link.contains(&format!("link/ether {cont_mac}")),
        "{pod_link}"
    );
    assert_eq!(
        wiring.host_mac[0] & 0x03,
        0x02,
        "locally administered unicast: {host_mac}"
    );

    let addrs = ns.ip_pod(&["-4", "-o", "addr", "show", "dev", "eth0"]);
    assert_eq!(addrs.len(), 1, "{addrs:?}");
    assert!(
        addrs[0].contains("inet 10.0.0.5/32 scope global eth0"),
        "{addrs:?}"
    );

    let pod_routes = ns.ip_pod(&["-4", "route", "show"]);
    assert_eq!(
        pod_routes,
        vec![
            "default via 169.254.1.1 dev eth0".to_string(),
            "169.254.1.1 dev eth0 scope link".to_string(),
        ]
    );
    let neigh = ns.ip_pod(&["-4", "neigh", "show"]);
    assert_eq!(
        neigh,
        vec![format!("169.254.1.1 dev eth0 lladdr {host_mac} PERMANENT")]
    );

    let host_routes = ns.ip_host(&["-4", "route", "show"]);
    assert_eq!(host_routes, vec![format!("10.0.0.5 dev {VETH} scope link")]);
    let rules = ns.ip_host(&["-4", "rule", "show"]);
    assert_eq!(
        count(&rules, "512: from all to 10.0.0.5 lookup main"),
        1,
        "{rules:?}"
    );
    assert!(!rules.iter().any(|r| r.starts_with("1536:")), "{rules:?}");
    // The kernel's three default rules plus ours, nothing else.
    assert_eq!(rules.len(), 4, "{rules:?}");
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn secondary_eni_table_adds_the_1536_rule() {
    let ns = NsPair::new();
    setup(&ns, 3);
    let rules = ns.ip_host(&["-4", "rule", "show"]);
    assert_eq!(
        count(&rules, "512: from all to 10.0.0.5 lookup main"),
        1,
        "{rules:?}"
    );
    assert_eq!(
        count(&rules, "1536: from 10.0.0.5 lookup 3"),
        1,
        "{rules:?}"
    );
    assert_eq!(rules.len(), 5, "{rules:?}");
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn check_pod_passes_after_setup_and_names_each_broken_item() {
    let ns = NsPair::new();
    let wiring = setup(&ns, 3);
    let (host, pod) = (ns.host_nl(), ns.pod_nl());
    check_pod(&host, &pod, &expected(3, Some(&wiring))).expect("fresh pod checks clean");

    run(&["ip", "-n", &ns.pod, "route", "del", "default"]);
    run(&["ip", "-n", &ns.host, "rule", "del", "pref", "512"]);
    run(&[
        "ip",
        "-n",
        &ns.pod,
        "neigh",
        "del",
        "169.254.1.1",
        "dev",
        "eth0",
    ]);
    run(&[
        "ip",
        "-n",
        &ns.pod,
        "addr",
        "add",
        "10.9.9.9/24",
        "dev",
        "eth0",
    ]);
    run(&[
        "ip", "-n", &ns.host, "rule", "add", "from", "10.0.0.5", "lookup", "7", "pref", "1536",
    ]);

    let Err(CheckError::Mismatch(m)) = check_pod(&host, &pod, &expected(3, Some(&wiring))) else {
        panic!("check_pod should report a mismatch");
    };
    let mut problems = m.problems.clone();
    problems.sort();
    assert_eq!(
        problems,
        vec![
            "host rule from 10.0.0.5 lookup 7 prio 1536 unexpected",
            "host rule to 10.0.0.5 lookup main prio 512 missing",
            "pod address 10.9.9.9/24 on eth0 unexpected",
            "pod neighbour 169.254.1.1 dev eth0 missing",
            "pod route default via 169.254.1.1 dev eth0 missing",
        ],
        "{m}"
    );
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn check_pod_reports_wrong_table_and_macs() {
    let ns = NsPair::new();
    let wiring = setup(&ns, RT_TABLE_MAIN);
    let (host, pod) = (ns.host_nl(), ns.pod_nl());
    let mut want = expected(4, Some(&wiring));
    want.host_mac = Some([0x02, 0, 0, 0, 0, 1]);
    let Err(CheckError::Mismatch(m)) = check_pod(&host, &pod, &want) else {
        panic!("mismatch expected");
    };
    assert_eq!(
        m.problems,
        vec![
            format!(
                "host veth {VETH} has MAC {}, expected 02:00:00:00:00:01",
                format_mac(&wiring.host_mac)
            ),
            "host rule from 10.0.0.5 lookup 4 prio 1536 missing".to_string(),
        ]
    );
    // A pod whose veth is gone: every pod-side item is reported via the missing interface.
    run(&["ip", "-n", &ns.host, "link", "del", VETH]);
    let Err(CheckError::Mismatch(m)) = check_pod(&host, &pod, &expected(RT_TABLE_MAIN, None))
    else {
        panic!("mismatch expected");
    };
    assert_eq!(
        m.problems,
        vec![
            "pod interface eth0 missing".to_string(),
            format!("host veth {VETH} missing"),
            format!("host route 10.0.0.5/32 dev {VETH} scope link missing"),
        ]
    );
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn teardown_host_removes_route_rules_and_veth_and_is_idempotent() {
    let ns = NsPair::new();
    setup(&ns, 3);
    // Older versions could leave several prio-1536 rules for one address.
    run(&[
        "ip", "-n", &ns.host, "rule", "add", "from", "10.0.0.5", "lookup", "9", "pref", "1536",
    ]);
    let host = ns.host_nl();

    let first = teardown_host(&host, IP, Some(VETH)).expect("teardown");
    let mut tables: Vec<u32> = first.rules_removed.iter().map(|r| r.table).collect();
    tables.sort();
    assert_eq!(tables, vec![3, 9, RT_TABLE_MAIN]);
    assert!(first.route_removed);
    assert!(first.veth_removed);
    assert_host_clean(&ns);
    // The pod end went with its peer.
    let pod_links = ns.ip_pod(&["-o", "link", "show"]);
    assert!(
        !pod_links.iter().any(|l| l.contains("eth0")),
        "{pod_links:?}"
    );

    let second = teardown_host(&host, IP, Some(VETH)).expect("second teardown");
    assert!(!second.removed_anything(), "{second:?}");
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn teardown_host_without_veth_name_removes_route_by_destination() {
    let ns = NsPair::new();
    setup(&ns, RT_TABLE_MAIN);
    let host = ns.host_nl();
    let report = teardown_host(&host, IP, None).expect("teardown");
    assert_eq!(report.rules_removed.len(), 1);
    assert!(report.route_removed);
    assert!(!report.veth_removed);
    assert!(ns.ip_host(&["-4", "route", "show"]).is_empty());
    // The veth stays: nobody named it.
    assert_eq!(ns.ip_host(&["-o", "link", "show", "dev", VETH]).len(), 1);
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn failed_setup_rolls_back_everything_on_the_host() {
    let ns = NsPair::new();
    // The pod namespace already has a default route: the exclusive default-route step, the
    // last but one, fails after the veth, host route and both host rules exist.
    run(&["ip", "-n", &ns.pod, "link", "set", "lo", "up"]);
    run(&["ip", "-n", &ns.pod, "route", "add", "default", "dev", "lo"]);
    let err = setup_pod(&ns.host_nl(), &ns.pod_nl(), &spec(3)).expect_err("must fail");
    assert!(err.is_exists(), "{err}");
    assert_eq!(
        err.to_string(),
        "add route default via 169.254.1.1 dev eth0 in pod: File exists (os error 17)"
    );
    assert_host_clean(&ns);
    let pod_links = ns.ip_pod(&["-o", "link", "show"]);
    assert!(
        !pod_links.iter().any(|l| l.contains("eth0")),
        "{pod_links:?}"
    );
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn existing_container_ifname_fails_and_touches_nothing() {
    let ns = NsPair::new();
    run(&[
        "ip", "-n", &ns.pod, "link", "add", "eth0", "type", "veth", "peer", "name", "other0",
    ]);
    let err = setup_pod(&ns.host_nl(), &ns.pod_nl(), &spec(3)).expect_err("must fail");
    assert!(matches!(err, NetlinkError::ContainerIfaceExists { ref name } if name == "eth0"));
    assert_eq!(
        err.to_string(),
        "interface eth0 already exists in the pod network namespace"
    );
    assert_host_clean(&ns);
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn stale_host_veth_is_replaced() {
    let ns = NsPair::new();
    run(&[
        "ip", "-n", &ns.host, "link", "add", VETH, "type", "veth", "peer", "name", "stale0",
    ]);
    let wiring = setup(&ns, RT_TABLE_MAIN);
    let links = ns.ip_host(&["-o", "link", "show"]);
    assert!(!links.iter().any(|l| l.contains("stale0")), "{links:?}");
    assert_eq!(links.iter().filter(|l| l.contains(VETH)).count(), 1);
    check_pod(
        &ns.host_nl(),
        &ns.pod_nl(),
        &expected(RT_TABLE_MAIN, Some(&wiring)),
    )
    .expect("clean");
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn a_pair_made_before_the_address_is_wired_as_setup_pod_wires_it() {
    let ns = NsPair::new();
    let (host, pod) = (ns.host_nl(), ns.pod_nl());
    let veth = create_pod_veth(&host, &pod, VETH, "eth0", 9001)
        .expect("create the pair")
        .expect("no veth of that name yet");
    let wiring = wire_pod_veth(&host, &pod, &veth, &spec(3)).expect("wire it");
    check_pod(&host, &pod, &expected(3, Some(&wiring))).expect("checks as setup_pod's");
    assert_eq!(
        create_pod_veth(&host, &pod, VETH, "eth0", 9001).expect("looked up"),
        None,
        "a repeated ADD finds the veth and leaves it to setup_pod"
    );

    // A pair whose pod gets no address goes again, whole.
    teardown_host(&host, IP, Some(VETH)).expect("teardown");
    let veth = create_pod_veth(&host, &pod, VETH, "eth0", 9001)
        .unwrap()
        .expect("the old pair is gone");
    remove_pod_veth(&host, &veth).expect("remove");
    assert_host_clean(&ns);
    let pod_links = ns.ip_pod(&["-o", "link", "show"]);
    assert!(
        !pod_links.iter().any(|l| l.contains("eth0")),
        "pod end left: {pod_links:?}"
    );
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn host_reaches_pod_by_ping() {
    let ns = NsPair::new();
    // The node needs an address of its own to source the ping from.
    run(&["ip", "-n", &ns.host, "link", "set", "lo", "up"]);
    run(&[
        "ip",
        "-n",
        &ns.host,
        "addr",
        "add",
        "192.168.250.1/32",
        "dev",
        "lo",
    ]);
    setup(&ns, RT_TABLE_MAIN);
    run(&[
        "ip", "netns", "exec", &ns.host, "ping", "-c1", "-W1", "10.0.0.5",
    ]);
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn in_netns_restores_the_thread_and_reports_missing_paths() {
    let before = fs::metadata("/proc/thread-self/ns/net").unwrap().ino();
    let ns = NsPair::new();
    let nl = ns.pod_nl();
    assert_eq!(
        fs::metadata("/proc/thread-self/ns/net").unwrap().ino(),
        before
    );
    // The socket works in the pod namespace, not ours: only `lo` is there.
    let links = nl.links().unwrap();
    assert_eq!(
        links.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(),
        vec!["lo"]
    );
    let err = Netlink::in_netns(Path::new("/run/netns/nt-does-not-exist-netops")).unwrap_err();
    assert!(matches!(err, NetlinkError::NetnsNotFound { .. }), "{err}");
    assert!(err.is_not_found());
    assert_eq!(
        fs::metadata("/proc/thread-self/ns/net").unwrap().ino(),
        before
    );
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn low_level_ops_report_kernel_errors_and_find_links_by_mac() {
    let ns = NsPair::new();
    let wiring = setup(&ns, RT_TABLE_MAIN);
    let host = ns.host_nl();
    let found = host.link_by_mac(&wiring.host_mac).unwrap().expect("by mac");
    assert_eq!(found.name, VETH);
    assert_eq!(found.index, wiring.host_ifindex);
    assert!(host.link_by_name("nope0").unwrap().is_none());

    // A second identical rule: EEXIST with a readable message.
    let rule = netops::Rule::to_dst(512, "10.0.0.5/32".parse().unwrap(), RT_TABLE_MAIN);
    let err = host.add_rule(&rule).unwrap_err();
    assert!(err.is_exists(), "{err}");
    assert_eq!(
        err.to_string(),
        "add rule prio 512 from all to 10.0.0.5/32 lookup main: File exists (os error 17)"
    );
    // Deleting what is not there: "not found" family.
    let gone = netops::Route::link_scope("10.7.7.7/32".parse().unwrap(), 1, RT_TABLE_MAIN);
    assert!(host.delete_route(&gone).unwrap_err().is_not_found());

    // The kernel's extended ack text is part of the message.
    let unreachable = netops::Route {
        oif: None,
        ..netops::Route::default_via("10.99.0.1".parse().unwrap(), 0, 1001)
    };
    let err = host.add_route(&unreachable).unwrap_err();
    assert_eq!(
        err.to_string(),
        "add route default via 10.99.0.1 table 1001: Network is unreachable (os error 101) \
         (Nexthop has invalid gateway)"
    );

    // Per-ENI table style routes in a numbered table, dumped back.
    let gw: Ipv4Addr = "10.0.0.1".parse().unwrap();
    let link_route =
        netops::Route::link_scope("10.0.0.1/32".parse().unwrap(), wiring.host_ifindex, 1000);
    let default = netops::Route::default_via(gw, wiring.host_ifindex, 1000);
    host.add_route(&link_route).unwrap();
    host.add_route(&default).unwrap();
    let mut routes = host.routes(1000).unwrap();
    routes.sort_by_key(|r| r.dst.prefix());
    assert_eq!(routes, vec![default, link_route]);
    let shown = ns.ip_host(&["-4", "route", "show", "table", "1000"]);
    assert_eq!(
        shown,
        vec![
            format!("default via 10.0.0.1 dev {VETH}"),
            format!("10.0.0.1 dev {VETH} scope link"),
        ]
    );
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn routed_elsewhere_tells_whose_address_it_is() {
    let ns = NsPair::new();
    setup(&ns, RT_TABLE_MAIN);
    let host = ns.host_nl();
    assert!(
        !routed_elsewhere(&host, IP, Some(VETH)).unwrap(),
        "routed to our veth"
    );
    assert!(
        routed_elsewhere(&host, IP, Some("enigone0000000")).unwrap(),
        "our veth is gone"
    );
    assert!(
        routed_elsewhere(&host, IP, None).unwrap(),
        "nothing to tell it is ours"
    );
    assert!(
        !routed_elsewhere(&host, Ipv4Addr::new(10, 0, 0, 99), Some(VETH)).unwrap(),
        "not routed"
    );
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn teardown_leaves_a_veth_of_the_same_name_that_carries_another_address() {
    // A pod's new sandbox reuses the veth name; tearing down the old attachment's address must
    // not take the new sandbox's link.
    let ns = NsPair::new();
    setup(&ns, RT_TABLE_MAIN);
    let report = teardown_host(&ns.host_nl(), Ipv4Addr::new(10, 0, 0, 77), Some(VETH)).unwrap();
    assert!(!report.veth_removed && !report.route_removed, "{report:?}");
    let links = ns.ip_host(&["-o", "link", "show"]);
    assert!(
        links.iter().any(|l| l.contains(VETH)),
        "the live pod's veth was deleted: {links:?}"
    );
    let routes = ns.ip_host(&["-4", "route", "show"]);
    assert!(
        routes.iter().any(|r| r.starts_with("10.0.0.5 ")),
        "{routes:?}"
    );
}
