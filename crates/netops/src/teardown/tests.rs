//! DEL's host side against the recording fake; the root tests prove the same on the kernel.

use std::os::fd::AsRawFd;

use nix::errno::Errno;

use super::*;
use crate::fake::{FakeNet, FakeNs, NsState};
use crate::messages::link::VethSpec;
use crate::netlink_ops::NetlinkOps;
use crate::pod::tests::{IP, TABLE, VETH, add};

fn ip32() -> ipnetwork::Ipv4Network {
    host_prefix(IP)
}

/// A node with a pod wired on `table`, and the namespaces' objects from before the ADD.
fn wired(table: u32) -> (FakeNet, FakeNs, Vec<NsState>) {
    let (net, host, pod) = FakeNet::node_and_pod();
    let before = net.state();
    add(&host, &pod, table).expect("ADD");
    net.take_calls();
    (net, host, before)
}

#[test]
fn pod_rules_are_recognised() {
    let ip32 = ip32();
    assert!(is_pod_rule(&Rule::to_dst(512, ip32, 254), IP));
    assert!(is_pod_rule(&Rule::from_src(1536, ip32, 2), IP));
    assert!(is_pod_rule(&Rule::from_src(1536, ip32, 7), IP));
    // Not ours: other address, other priority, other table for 512, extra selectors.
    let other = host_prefix(Ipv4Addr::new(10, 0, 0, 6));
    assert!(!is_pod_rule(&Rule::to_dst(512, other, 254), IP));
    assert!(!is_pod_rule(&Rule::from_src(1535, ip32, 2), IP));
    assert!(!is_pod_rule(&Rule::to_dst(512, ip32, 2), IP));
    assert!(!is_pod_rule(&Rule::from_src(32765, ip32, 2), IP));
    let marked = Rule {
        fwmark: Some((0x80, 0x80)),
        ..Rule::from_src(1536, ip32, 2)
    };
    assert!(!is_pod_rule(&marked, IP));
}

#[test]
fn teardown_removes_rules_route_and_veth_in_order_and_then_finds_nothing() {
    let (net, host, before) = wired(TABLE);

    let report = teardown_host(&host, IP, Some(VETH)).expect("DEL");

    assert_eq!(
        net.take_calls(),
        [
            "host: dump IPv4 rules",
            "host: delete rule prio 512 from all to 10.0.0.5/32 lookup main",
            "host: delete rule prio 1536 from 10.0.0.5/32 lookup 3",
            "host: get link enic440f455693",
            "host: delete route 10.0.0.5/32 dev #3 scope link",
            "host: delete link #3",
        ]
    );
    assert_eq!(
        report,
        TeardownReport {
            rules_removed: vec![
                Rule::to_dst(PRIO_TO_POD, ip32(), RT_TABLE_MAIN),
                Rule::from_src(PRIO_FROM_POD, ip32(), TABLE),
            ],
            route_removed: true,
            veth_removed: true,
        }
    );
    assert_eq!(net.state(), before);

    let again = teardown_host(&host, IP, Some(VETH)).expect("second DEL");
    assert!(!again.removed_anything());
    assert_eq!(
        net.take_calls(),
        ["host: dump IPv4 rules", "host: get link enic440f455693"]
    );
}

#[test]
fn without_a_veth_name_the_route_goes_by_destination_and_the_veth_stays() {
    let (net, host, _) = wired(RT_TABLE_MAIN);

    let report = teardown_host(&host, IP, None).expect("DEL");

    assert!(report.route_removed && !report.veth_removed);
    assert!(
        net.take_calls()
            .contains(&"host: delete route 10.0.0.5/32 scope link".to_string())
    );
    assert!(host.state().routes.is_empty());
    assert!(host.state().link_named(VETH).is_some());
}

#[test]
fn a_veth_of_the_same_name_without_the_route_is_a_newer_sandboxs_and_stays() {
    let (net, host, pod) = FakeNet::node_and_pod();
    pod.create_veth(&VethSpec {
        name: "eth0".into(),
        peer_name: VETH.into(),
        peer_mac: None,
        peer_netns_fd: Some(host.netns_fd().as_raw_fd()),
        mtu: 9001,
        up: true,
    })
    .expect("newer sandbox's veth");
    let before = net.state();

    let report = teardown_host(&host, IP, Some(VETH)).expect("DEL");

    assert!(!report.removed_anything());
    assert_eq!(net.state(), before);
}

#[test]
fn a_failed_delete_is_returned_naming_the_veth() {
    let (net, host, _) = wired(RT_TABLE_MAIN);
    net.fail_first("host: delete route", Errno::EPERM as i32);

    let err = teardown_host(&host, IP, Some(VETH)).expect_err("the injected failure");

    assert_eq!(
        err.to_string(),
        "delete route 10.0.0.5/32 dev enic440f455693: Operation not permitted (os error 1)"
    );
    assert!(
        host.state().link_named(VETH).is_some(),
        "the veth carries the route still"
    );
}

#[test]
fn routed_elsewhere_tells_whose_address_it_is() {
    let (_net, host, _) = wired(RT_TABLE_MAIN);
    assert!(!routed_elsewhere(&host, IP, Some(VETH)).unwrap());
    assert!(routed_elsewhere(&host, IP, Some("enic000000000")).unwrap());
    assert!(routed_elsewhere(&host, IP, None).unwrap());
    assert!(!routed_elsewhere(&host, Ipv4Addr::new(10, 0, 0, 6), Some(VETH)).unwrap());
}
