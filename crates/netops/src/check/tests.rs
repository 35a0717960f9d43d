//! CHECK against the recording fake: it accepts exactly what ADD builds and names each
//! missing piece. The root tests prove the same on the kernel.

use nix::errno::Errno;

use super::*;
use crate::PodWiring;
use crate::fake::{FakeNet, FakeNs};
use crate::messages::rule::Rule;
use crate::pod::tests::{IP, TABLE, VETH, add};

fn expected(route_table: u32, wiring: &PodWiring) -> ExpectedPod {
    ExpectedPod {
        container_ifname: "eth0".into(),
        host_veth: VETH.into(),
        ipv4: Some(IP),
        ipv6: None,
        egress_ipv4: None,
        route_table,
        container_mac: Some(wiring.container_mac),
        host_mac: Some(wiring.host_mac),
    }
}

fn wired(route_table: u32) -> (FakeNet, FakeNs, FakeNs, ExpectedPod) {
    let (net, host, pod) = FakeNet::node_and_pod();
    let wiring = add(&host, &pod, route_table).expect("ADD");
    (net, host, pod, expected(route_table, &wiring))
}

fn problems(host: &FakeNs, pod: &FakeNs, expected: &ExpectedPod) -> Vec<String> {
    match check_pod(host, pod, expected) {
        Ok(()) => Vec::new(),
        Err(CheckError::Mismatch(m)) => m.problems,
        Err(CheckError::Netlink(e)) => panic!("reading failed: {e}"),
    }
}

#[test]
fn what_add_builds_passes_check() {
    for table in [RT_TABLE_MAIN, TABLE] {
        let (_net, host, pod, expected) = wired(table);
        assert_eq!(problems(&host, &pod, &expected), Vec::<String>::new());
    }
}

#[test]
fn each_missing_piece_is_named() {
    let (_net, host, pod, expected) = wired(TABLE);
    let ip32 = host_prefix(IP);
    host.delete_rule(&Rule::to_dst(PRIO_TO_POD, ip32, RT_TABLE_MAIN))
        .unwrap();
    pod.delete_route(&Route::default_via(POD_GATEWAY, 2, RT_TABLE_MAIN))
        .unwrap();

    assert_eq!(
        problems(&host, &pod, &expected),
        [
            "pod route default via 169.254.1.1 dev eth0 missing",
            "host rule to 10.0.0.5 lookup main prio 512 missing",
        ]
    );
}

#[test]
fn a_from_rule_is_unexpected_for_a_pod_on_the_primary_eni() {
    let (_net, host, pod, expected) = wired(TABLE);
    let on_main = ExpectedPod {
        route_table: RT_TABLE_MAIN,
        ..expected
    };
    assert_eq!(
        problems(&host, &pod, &on_main),
        ["host rule from 10.0.0.5 lookup 3 prio 1536 unexpected"]
    );
}

#[test]
fn a_failed_read_is_a_netlink_error_not_a_mismatch() {
    let (net, host, pod, expected) = wired(RT_TABLE_MAIN);
    net.fail_first("pod: dump IPv4 addresses", Errno::EPERM as i32);
    let err = check_pod(&host, &pod, &expected).expect_err("the injected failure");
    assert!(matches!(err, CheckError::Netlink(ref e) if e.errno() == Some(Errno::EPERM as i32)));
}
