//! ADD against the recording fake: the order of operations, the idempotent paths and the undo
//! of every step. The root tests prove the same against the kernel.

use nix::errno::Errno;

use super::*;
use crate::fake::{FakeNet, FakeNs};
use crate::messages::addr::Address;
use crate::messages::neigh::Neighbour;

pub(crate) const VETH: &str = "enic440f455693";
pub(crate) const IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 5);
/// The host veth's MAC, fixed instead of random so that every request is predictable.
pub(crate) const MAC: [u8; 6] = [0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee];
/// A secondary ENI's table.
pub(crate) const TABLE: u32 = 3;

const EPERM: i32 = Errno::EPERM as i32;

pub(crate) fn spec(route_table: u32) -> PodSpec {
    PodSpec {
        host_veth: VETH.into(),
        container_ifname: "eth0".into(),
        ipv4: Some(IP),
        ipv6: None,
        egress_ipv4: None,
        mtu: 9001,
        route_table,
    }
}

/// ADD with [`MAC`] as the host veth's MAC.
pub(crate) fn add(host: &FakeNs, pod: &FakeNs, route_table: u32) -> Result<PodWiring> {
    setup_pod_with_mac(host, pod, &spec(route_table), || Ok(MAC))
}

/// The calls of an ADD on a fresh [`FakeNet::node_and_pod`], in order.
fn add_calls(route_table: u32) -> Vec<String> {
    let mut calls = vec![
        "host: get link enic440f455693",
        "pod: get link eth0",
        "pod: create veth eth0 mtu 9001 peer enic440f455693 address 02:aa:bb:cc:dd:ee in host \
         namespace",
        "host: get link enic440f455693",
        "host: set link #3 up",
        "pod: get link eth0",
        "host: replace route 10.0.0.5/32 dev #3 scope link",
        "host: add rule prio 512 from all to 10.0.0.5/32 lookup main",
    ];
    if route_table != RT_TABLE_MAIN {
        calls.push("host: add rule prio 1536 from 10.0.0.5/32 lookup 3");
    }
    calls.extend([
        "pod: add address 10.0.0.5/32 dev #2",
        "pod: replace route 169.254.1.1/32 dev #2 scope link",
        "pod: add route default via 169.254.1.1 dev #2",
        "pod: replace neighbour 169.254.1.1 lladdr 02:aa:bb:cc:dd:ee dev #2 permanent",
    ]);
    calls.into_iter().map(String::from).collect()
}

/// How a successful call of ADD is undone after a later one fails: what it created on the
/// host by the matching delete; the pod's address, routes and neighbour go with the veth.
fn undo_of(call: &str) -> Option<String> {
    if call.starts_with("pod: create veth ") {
        Some(format!("host: delete link {VETH}"))
    } else if let Some(route) = call.strip_prefix("host: replace route ") {
        Some(format!("host: delete route {route}"))
    } else {
        call.strip_prefix("host: add rule ")
            .map(|rule| format!("host: delete rule {rule}"))
    }
}

fn ip32() -> Ipv4Network {
    host_prefix(IP)
}

/// The calls after the first one starting with `failed`: the undo of a failed ADD.
fn calls_after(net: &FakeNet, failed: &str) -> Vec<String> {
    let mut calls = net.take_calls();
    let at = calls
        .iter()
        .position(|call| call.starts_with(failed))
        .expect("the failing call was made");
    calls.split_off(at + 1)
}

fn seed_rule(net: &FakeNet, host: &FakeNs, rule: &Rule) {
    host.add_rule(rule).expect("seed rule");
    net.take_calls();
}

#[test]
fn add_on_the_primary_eni_wires_both_sides_in_order() {
    let (net, host, pod) = FakeNet::node_and_pod();
    let wiring = add(&host, &pod, RT_TABLE_MAIN).expect("ADD");
    assert_eq!(net.take_calls(), add_calls(RT_TABLE_MAIN));

    let host_state = host.state();
    let pod_state = pod.state();
    let veth = &host_state.link_named(VETH).expect("host veth").link;
    let eth0 = &pod_state.link_named("eth0").expect("pod interface").link;
    assert_eq!(
        wiring,
        PodWiring {
            host_mac: MAC,
            container_mac: eth0.mac.expect("pod MAC"),
            host_ifindex: 3,
            container_ifindex: 2,
        }
    );
    assert!(veth.up && eth0.up);
    assert_eq!((veth.mtu, eth0.mtu), (Some(9001), Some(9001)));
    assert_eq!((veth.peer_index, eth0.peer_index), (Some(2), Some(3)));
    assert_eq!(
        host_state.routes,
        [Route::link_scope(ip32(), 3, RT_TABLE_MAIN)]
    );
    assert_eq!(
        host_state.rules,
        [Rule::to_dst(PRIO_TO_POD, ip32(), RT_TABLE_MAIN)]
    );
    assert_eq!(
        pod_state.addresses,
        [Address {
            index: 2,
            network: ip32()
        }]
    );
    assert_eq!(
        pod_state.routes,
        [
            Route::link_scope(host_prefix(POD_GATEWAY), 2, RT_TABLE_MAIN),
            Route::default_via(POD_GATEWAY, 2, RT_TABLE_MAIN),
        ]
    );
    assert_eq!(
        pod_state.neighbours,
        [Neighbour {
            index: 2,
            ip: POD_GATEWAY,
            mac: Some(MAC),
            permanent: true,
        }]
    );
}

#[test]
fn add_on_a_secondary_eni_adds_the_from_rule_after_the_to_rule() {
    let (net, host, pod) = FakeNet::node_and_pod();
    add(&host, &pod, TABLE).expect("ADD");
    assert_eq!(net.take_calls(), add_calls(TABLE));
    assert_eq!(
        host.state().rules,
        [
            Rule::to_dst(PRIO_TO_POD, ip32(), RT_TABLE_MAIN),
            Rule::from_src(PRIO_FROM_POD, ip32(), TABLE),
        ]
    );
}

#[test]
fn a_failure_at_any_step_undoes_what_was_created_in_reverse_and_returns_that_failure() {
    for table in [RT_TABLE_MAIN, TABLE] {
        let all = add_calls(table);
        for failing in 0..all.len() {
            let (net, host, pod) = FakeNet::node_and_pod();
            let before = net.state();
            net.fail_call(failing, EPERM);

            let err = add(&host, &pod, table).expect_err("the injected failure");

            let step = &all[failing];
            assert_eq!(err.errno(), Some(EPERM), "failing {step}: {err}");
            let undo: Vec<String> = all[..failing]
                .iter()
                .rev()
                .filter_map(|call| undo_of(call))
                .collect();
            let calls = net.take_calls();
            assert_eq!(calls[..=failing], all[..=failing], "failing {step}");
            assert_eq!(calls[failing + 1..], undo, "failing {step}");
            assert_eq!(net.state(), before, "failing {step}");
        }
    }
}

#[test]
fn the_original_error_is_returned_when_the_undo_fails_too_and_the_undo_goes_on() {
    let (net, host, pod) = FakeNet::node_and_pod();
    net.fail_first("pod: replace neighbour", EPERM);
    net.fail_first("host: delete rule prio 1536", Errno::EBUSY as i32);

    let err = add(&host, &pod, TABLE).expect_err("the injected failure");

    assert_eq!(
        err.to_string(),
        "add permanent neighbour 169.254.1.1 lladdr 02:aa:bb:cc:dd:ee dev eth0 in pod: \
         Operation not permitted (os error 1)"
    );
    assert_eq!(
        calls_after(&net, "pod: replace neighbour"),
        [
            "host: delete rule prio 1536 from 10.0.0.5/32 lookup 3",
            "host: delete rule prio 512 from all to 10.0.0.5/32 lookup main",
            "host: delete route 10.0.0.5/32 dev #3 scope link",
            "host: delete link enic440f455693",
        ]
    );
    // Only what the failed delete could not remove is left.
    assert_eq!(
        host.state().rules,
        [Rule::from_src(PRIO_FROM_POD, ip32(), TABLE)]
    );
    assert!(host.state().link_named(VETH).is_none());
    assert!(host.state().routes.is_empty());
}

#[test]
fn an_existing_identical_rule_is_accepted() {
    let (net, host, pod) = FakeNet::node_and_pod();
    let to_pod = Rule::to_dst(PRIO_TO_POD, ip32(), RT_TABLE_MAIN);
    seed_rule(&net, &host, &to_pod);

    add(&host, &pod, RT_TABLE_MAIN).expect("EEXIST on the rule is the rule we want");

    assert_eq!(net.take_calls(), add_calls(RT_TABLE_MAIN));
    assert_eq!(host.state().rules, [to_pod]);
}

#[test]
fn an_existing_identical_rule_is_not_undone_when_a_later_step_fails() {
    let (net, host, pod) = FakeNet::node_and_pod();
    let to_pod = Rule::to_dst(PRIO_TO_POD, ip32(), RT_TABLE_MAIN);
    seed_rule(&net, &host, &to_pod);
    let before = net.state();
    net.fail_first("pod: add route default", EPERM);

    add(&host, &pod, TABLE).expect_err("the injected failure");

    assert_eq!(
        calls_after(&net, "pod: add route default"),
        [
            "host: delete rule prio 1536 from 10.0.0.5/32 lookup 3",
            "host: delete route 10.0.0.5/32 dev #3 scope link",
            "host: delete link enic440f455693",
        ]
    );
    assert_eq!(net.state(), before);
}

#[test]
fn a_stale_host_veth_of_the_same_name_is_deleted_first() {
    let (net, host, pod) = FakeNet::node_and_pod();
    host.create_veth(&VethSpec {
        name: VETH.into(),
        peer_name: "stale0".into(),
        peer_mac: None,
        peer_netns_fd: None,
        mtu: 1500,
        up: false,
    })
    .expect("seed stale veth");
    net.take_calls();

    add(&host, &pod, RT_TABLE_MAIN).expect("ADD");

    let calls = net.take_calls();
    assert_eq!(
        calls[..3],
        [
            "host: get link enic440f455693",
            "host: delete link #3",
            "pod: get link eth0",
        ]
    );
    let state = host.state();
    assert!(state.link_named("stale0").is_none());
    let veth = &state.link_named(VETH).expect("new host veth").link;
    assert_eq!(veth.mac, Some(MAC));
}

#[test]
fn a_host_link_of_the_same_name_that_is_not_a_veth_is_refused_and_left_alone() {
    for (kind, shown) in [(Some("dummy"), "dummy"), (None, "physical")] {
        let (net, host, pod) = FakeNet::node_and_pod();
        host.seed_link(VETH, kind);
        let before = net.state();

        let err = add(&host, &pod, RT_TABLE_MAIN).expect_err("not ours to delete");

        assert_eq!(
            err.to_string(),
            format!(
                "invalid host veth name: {VETH} already exists on the host as a {shown} link, \
                 not a veth"
            )
        );
        assert_eq!(net.take_calls(), [format!("host: get link {VETH}")]);
        assert_eq!(net.state(), before);
    }
}

#[test]
fn an_existing_container_interface_is_refused_before_anything_is_created() {
    let (net, host, pod) = FakeNet::node_and_pod();
    pod.seed_link("eth0", None);
    let before = net.state();

    let err = add(&host, &pod, TABLE).expect_err("eth0 is taken");

    assert!(matches!(err, NetlinkError::ContainerIfaceExists { ref name } if name == "eth0"));
    assert_eq!(
        net.take_calls(),
        [
            format!("host: get link {VETH}"),
            "pod: get link eth0".into()
        ]
    );
    assert_eq!(net.state(), before);
}

#[test]
fn an_invalid_spec_is_refused_before_any_call() {
    let (net, host, pod) = FakeNet::node_and_pod();
    let bad = PodSpec {
        route_table: 0,
        ..spec(RT_TABLE_MAIN)
    };
    setup_pod(&host, &pod, &bad).expect_err("table 0");
    assert!(net.take_calls().is_empty());
}

#[test]
fn validation_names_the_bad_input() {
    assert!(validate(&spec(RT_TABLE_MAIN)).is_ok());
    let cases: Vec<(PodSpec, &str)> = vec![
        (
            PodSpec {
                host_veth: "enic440f4556931234".into(),
                ..spec(RT_TABLE_MAIN)
            },
            "host veth name",
        ),
        (
            PodSpec {
                container_ifname: String::new(),
                ..spec(RT_TABLE_MAIN)
            },
            "container interface name",
        ),
        (
            PodSpec {
                ipv4: Some(Ipv4Addr::UNSPECIFIED),
                ..spec(RT_TABLE_MAIN)
            },
            "pod IP",
        ),
        (
            PodSpec {
                mtu: 0,
                ..spec(RT_TABLE_MAIN)
            },
            "MTU",
        ),
        (
            PodSpec {
                mtu: 70_000,
                ..spec(RT_TABLE_MAIN)
            },
            "MTU",
        ),
        (
            PodSpec {
                route_table: 0,
                ..spec(RT_TABLE_MAIN)
            },
            "route table",
        ),
    ];
    for (bad, what) in cases {
        let err = validate(&bad).unwrap_err();
        assert!(
            err.to_string().starts_with(&format!("invalid {what}")),
            "{err}"
        );
    }
}

/// The pair made ahead of the address, with [`MAC`] as the host veth's MAC.
fn early(host: &FakeNs, pod: &FakeNs) -> Result<Option<PodVeth>> {
    create_pod_veth_with_mac(host, pod, (VETH, "eth0"), 9001, || Ok(MAC))
}

#[test]
fn a_pair_made_ahead_and_wired_later_makes_the_calls_and_state_of_one_add() {
    for table in [RT_TABLE_MAIN, TABLE] {
        let (net, host, pod) = FakeNet::node_and_pod();
        let veth = early(&host, &pod)
            .expect("pair")
            .expect("no veth of that name");
        let wiring = wire_pod_veth(&host, &pod, &veth, &spec(table)).expect("wire");
        let calls = net.take_calls();
        let state = net.state();

        let (net2, host2, pod2) = FakeNet::node_and_pod();
        let whole = add(&host2, &pod2, table).expect("ADD");
        assert_eq!(calls, net2.take_calls(), "table {table}");
        assert_eq!(state, net2.state(), "table {table}");
        assert_eq!(wiring, whole);
        assert_eq!(
            (veth.host_index, veth.container_index, veth.host_mac),
            (3, 2, MAC)
        );
    }
}

#[test]
fn no_pair_is_made_ahead_where_the_host_veth_exists_a_repeated_add() {
    let (net, host, pod) = FakeNet::node_and_pod();
    add(&host, &pod, RT_TABLE_MAIN).expect("the first ADD");
    net.take_calls();
    let before = net.state();
    assert_eq!(early(&host, &pod).expect("looked up"), None);
    assert_eq!(net.take_calls(), ["host: get link enic440f455693"]);
    assert_eq!(net.state(), before);
}

#[test]
fn a_pair_ahead_is_refused_when_the_pod_has_the_interface_and_leaves_nothing_on_failure() {
    let (net, host, pod) = FakeNet::node_and_pod();
    pod.seed_link("eth0", None);
    let before = net.state();
    let err = early(&host, &pod).expect_err("eth0 exists");
    assert!(
        matches!(err, NetlinkError::ContainerIfaceExists { ref name } if name == "eth0"),
        "{err}"
    );
    assert_eq!(net.state(), before);

    // A failure once the pair exists takes it away again.
    let (net, host, pod) = FakeNet::node_and_pod();
    let before = net.state();
    net.fail_first("host: set link", EPERM);
    let err = early(&host, &pod).expect_err("the injected failure");
    assert_eq!(err.errno(), Some(EPERM), "{err}");
    assert_eq!(net.state(), before);
    assert!(
        net.take_calls()
            .ends_with(&[format!("host: delete link {VETH}")]),
        "the pair is deleted"
    );
}

#[test]
fn a_failure_wiring_a_pair_made_ahead_removes_everything_the_pair_too() {
    let all = add_calls(TABLE);
    let wiring_starts = all
        .iter()
        .position(|c| c.starts_with("host: replace route"))
        .expect("the first wiring call");
    for (nth, step) in all[wiring_starts..].iter().enumerate() {
        let (net, host, pod) = FakeNet::node_and_pod();
        let before = net.state();
        let veth = early(&host, &pod).unwrap().unwrap();
        net.take_calls();
        net.fail_call(nth, EPERM);
        let err = wire_pod_veth(&host, &pod, &veth, &spec(TABLE)).expect_err("injected");
        assert_eq!(err.errno(), Some(EPERM), "failing {step}: {err}");
        assert_eq!(net.state(), before, "failing {step}");
    }
}

#[test]
fn a_pair_that_went_meanwhile_is_a_not_found_error_and_one_for_another_spec_is_refused() {
    let (net, host, pod) = FakeNet::node_and_pod();
    let veth = early(&host, &pod).unwrap().unwrap();
    host.delete_link_by_name(VETH).unwrap();
    let before = net.state();
    let err = wire_pod_veth(&host, &pod, &veth, &spec(TABLE)).expect_err("the pair is gone");
    assert!(err.is_not_found(), "{err}");
    assert_eq!(net.state(), before);
    remove_pod_veth(&host, &veth).expect("a pair that is gone is removed already");

    let (_net, host, pod) = FakeNet::node_and_pod();
    let veth = early(&host, &pod).unwrap().unwrap();
    let other = PodSpec {
        mtu: 1500,
        ..spec(TABLE)
    };
    let err = wire_pod_veth(&host, &pod, &veth, &other).expect_err("another MTU");
    assert!(err.to_string().starts_with("invalid pod spec"), "{err}");
    remove_pod_veth(&host, &veth).expect("removed");
    assert!(host.state().link_named(VETH).is_none());
    assert!(pod.state().link_named("eth0").is_none());
}
