//! IPv6-only and dual-stack pods against the recording fake: ADD's order and undo, CHECK and
//! DEL. The root tests prove the same on the kernel.

use nix::errno::Errno;

use super::tests::{IP, MAC, TABLE, VETH};
use super::*;
use crate::check::{CheckError, ExpectedPod, check_pod};
use crate::fake::{FakeNet, FakeNs, NsState};
use crate::messages::addr::Address6;
use crate::messages::neigh::Neighbour6;
use crate::teardown::{routed_elsewhere, teardown_host, teardown_pod_host, unroute_pod};

const IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 5);
const EPERM: i32 = Errno::EPERM as i32;

fn ip128() -> Ipv6Network {
    Ipv6Network::host(IP6)
}

fn spec6(ipv4: Option<Ipv4Addr>, route_table: u32) -> PodSpec {
    PodSpec {
        host_veth: VETH.into(),
        container_ifname: "eth0".into(),
        ipv4,
        ipv6: Some(IP6),
        egress_ipv4: None,
        mtu: 9001,
        route_table,
    }
}

fn add6(host: &FakeNs, pod: &FakeNs, spec: &PodSpec) -> Result<PodWiring> {
    setup_pod_with_mac(host, pod, spec, || Ok(MAC))
}

/// The IPv6 part of an ADD on a fresh [`FakeNet::node_and_pod`].
const V6_CALLS: [&str; 10] = [
    "host: set net.ipv6.conf.enic440f455693.accept_ra=0",
    "pod: set net.ipv6.conf.eth0.disable_ipv6=0",
    "pod: set net.ipv6.conf.lo.disable_ipv6=0",
    "host: replace route 2001:db8::5/128 dev #3",
    "host: add rule prio 512 from all to 2001:db8::5/128 lookup main",
    "pod: add address 2001:db8::5/128 dev #2",
    "pod: replace route fe80::1/128 dev #2",
    "pod: add route default via fe80::1 dev #2",
    "pod: replace neighbour fe80::1 lladdr 02:aa:bb:cc:dd:ee dev #2 permanent",
    "host: replace neighbour 2001:db8::5 lladdr 02:00:00:00:01:02 dev #3 permanent",
];

const VETH_CALLS: [&str; 6] = [
    "host: get link enic440f455693",
    "pod: get link eth0",
    "pod: create veth eth0 mtu 9001 peer enic440f455693 address 02:aa:bb:cc:dd:ee in host \
     namespace",
    "host: get link enic440f455693",
    "host: set link #3 up",
    "pod: get link eth0",
];

fn dual_calls() -> Vec<String> {
    let v4 = [
        "host: replace route 10.0.0.5/32 dev #3 scope link",
        "host: add rule prio 512 from all to 10.0.0.5/32 lookup main",
        "host: add rule prio 1536 from 10.0.0.5/32 lookup 3",
        "pod: add address 10.0.0.5/32 dev #2",
        "pod: replace route 169.254.1.1/32 dev #2 scope link",
        "pod: add route default via 169.254.1.1 dev #2",
        "pod: replace neighbour 169.254.1.1 lladdr 02:aa:bb:cc:dd:ee dev #2 permanent",
    ];
    VETH_CALLS
        .iter()
        .chain(&v4)
        .chain(&V6_CALLS)
        .map(|c| c.to_string())
        .collect()
}

#[test]
fn an_ipv6_only_pod_gets_the_go_cnis_ipv6_wiring_in_order() {
    let (net, host, pod) = FakeNet::node_and_pod();
    add6(&host, &pod, &spec6(None, RT_TABLE_MAIN)).expect("ADD");

    let want: Vec<String> = VETH_CALLS
        .iter()
        .chain(&V6_CALLS)
        .map(|c| c.to_string())
        .collect();
    assert_eq!(net.take_calls(), want);

    let (h, p) = (host.state(), pod.state());
    assert!(h.routes.is_empty() && h.rules.is_empty(), "no IPv4 state");
    assert!(p.addresses.is_empty() && p.routes.is_empty() && p.neighbours.is_empty());
    assert_eq!(h.v6.routes, [Route6::link_scope(ip128(), 3, RT_TABLE_MAIN)]);
    assert_eq!(
        h.v6.rules,
        [Rule6::to_dst(PRIO_TO_POD, ip128(), RT_TABLE_MAIN)]
    );
    assert_eq!(
        p.v6.addresses,
        [Address6 {
            index: 2,
            network: ip128()
        }]
    );
    assert_eq!(
        p.v6.routes,
        [
            Route6::link_scope(Ipv6Network::host(POD_GATEWAY6), 2, RT_TABLE_MAIN),
            Route6::default_via(POD_GATEWAY6, 2, RT_TABLE_MAIN),
        ]
    );
    assert_eq!(
        p.v6.neighbours,
        [Neighbour6 {
            index: 2,
            ip: POD_GATEWAY6,
            mac: Some(MAC),
            permanent: true
        }]
    );
    let conf = |s: &NsState, ifname: &str, key: &str| {
        s.ipv6_conf
            .get(&(ifname.to_string(), key.to_string()))
            .cloned()
    };
    assert_eq!(conf(&h, VETH, "accept_ra").as_deref(), Some("0"));
    assert_eq!(conf(&p, "eth0", "disable_ipv6").as_deref(), Some("0"));
    assert_eq!(conf(&p, "lo", "disable_ipv6").as_deref(), Some("0"));
}

#[test]
fn a_dual_stack_pod_gets_both_families_on_one_veth_ipv4_first() {
    let (net, host, pod) = FakeNet::node_and_pod();
    add6(&host, &pod, &spec6(Some(IP), TABLE)).expect("ADD");
    assert_eq!(net.take_calls(), dual_calls());
    let h = host.state();
    assert_eq!(h.rules.len(), 2, "512 and 1536 for IPv4");
    assert_eq!(
        h.v6.rules,
        [Rule6::to_dst(PRIO_TO_POD, ip128(), RT_TABLE_MAIN)],
        "IPv6 always uses main: no prio-1536 rule"
    );
}

#[test]
fn missing_ipv6_settings_are_skipped_other_failures_are_not() {
    // ENOENT: a kernel without IPv6 settings for the interface.
    let (net, host, pod) = FakeNet::node_and_pod();
    net.fail_first("host: set net.ipv6.conf", Errno::ENOENT as i32);
    add6(&host, &pod, &spec6(None, RT_TABLE_MAIN)).expect("ENOENT is tolerated");

    let (net, host, pod) = FakeNet::node_and_pod();
    net.fail_first("pod: set net.ipv6.conf.eth0", EPERM);
    let err = add6(&host, &pod, &spec6(None, RT_TABLE_MAIN)).expect_err("EPERM");
    assert_eq!(
        err.to_string(),
        "set net.ipv6.conf.eth0.disable_ipv6=0 in pod: Operation not permitted (os error 1)"
    );
    assert!(
        host.state().link_named(VETH).is_none(),
        "the veth is undone"
    );
}

/// The pod's `lo` keeps `disable_ipv6=0` after an undo (as with the Go CNI): everything else
/// must be as before.
fn without_lo_setting(mut states: Vec<NsState>) -> Vec<NsState> {
    for s in &mut states {
        s.ipv6_conf.retain(|(ifname, _), _| ifname != "lo");
    }
    states
}

#[test]
fn a_dual_stack_failure_at_any_step_undoes_both_families_newest_first() {
    let all = dual_calls();
    for failing in 0..all.len() {
        let (net, host, pod) = FakeNet::node_and_pod();
        let before = net.state();
        net.fail_call(failing, EPERM);

        let err = add6(&host, &pod, &spec6(Some(IP), TABLE)).expect_err("injected");

        let step = &all[failing];
        assert_eq!(err.errno(), Some(EPERM), "failing {step}: {err}");
        let calls = net.take_calls();
        assert_eq!(calls[..=failing], all[..=failing], "failing {step}");
        let undo: Vec<String> = all[..failing]
            .iter()
            .rev()
            .filter_map(|call| {
                if call.starts_with("pod: create veth ") {
                    Some(format!("host: delete link {VETH}"))
                } else if let Some(route) = call.strip_prefix("host: replace route ") {
                    Some(format!("host: delete route {route}"))
                } else {
                    call.strip_prefix("host: add rule ")
                        .map(|rule| format!("host: delete rule {rule}"))
                }
            })
            .collect();
        assert_eq!(calls[failing + 1..], undo, "failing {step}");
        assert_eq!(without_lo_setting(net.state()), before, "failing {step}");
    }
}

#[test]
fn validation_wants_an_address_and_a_usable_ipv6_one() {
    let none = PodSpec {
        ipv6: None,
        ..spec6(None, RT_TABLE_MAIN)
    };
    assert_eq!(
        validate(&none).unwrap_err().to_string(),
        "invalid pod IP: neither an IPv4 nor an IPv6 address was given"
    );
    for bad in ["::", "::1", "ff02::1", "fe80::5"] {
        let spec = PodSpec {
            ipv6: Some(bad.parse().unwrap()),
            ..spec6(None, RT_TABLE_MAIN)
        };
        let err = validate(&spec).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("invalid pod IPv6 address: {bad} cannot be a pod address")
        );
    }
    let small = PodSpec {
        mtu: 1200,
        ..spec6(None, RT_TABLE_MAIN)
    };
    assert!(validate(&small).unwrap_err().to_string().contains("1280"));
    assert!(validate(&spec6(Some(IP), TABLE)).is_ok());
}

fn expected(ipv4: Option<Ipv4Addr>, route_table: u32, wiring: &PodWiring) -> ExpectedPod {
    ExpectedPod {
        container_ifname: "eth0".into(),
        host_veth: VETH.into(),
        ipv4,
        ipv6: Some(IP6),
        egress_ipv4: None,
        route_table,
        container_mac: Some(wiring.container_mac),
        host_mac: Some(wiring.host_mac),
    }
}

fn problems(host: &FakeNs, pod: &FakeNs, expected: &ExpectedPod) -> Vec<String> {
    match check_pod(host, pod, expected) {
        Ok(()) => Vec::new(),
        Err(CheckError::Mismatch(m)) => m.problems,
        Err(CheckError::Netlink(e)) => panic!("reading failed: {e}"),
    }
}

#[test]
fn check_accepts_ipv6_and_dual_wiring_and_names_each_missing_ipv6_piece() {
    for ipv4 in [None, Some(IP)] {
        let (_net, host, pod) = FakeNet::node_and_pod();
        let wiring = add6(&host, &pod, &spec6(ipv4, TABLE)).expect("ADD");
        let expected = expected(ipv4, TABLE, &wiring);
        // The kernel's own link-local address on the interface is not "unexpected".
        pod.add_address(2, "fe80::aa:1/64".parse::<Ipv6Network>().unwrap())
            .unwrap();
        assert_eq!(problems(&host, &pod, &expected), Vec::<String>::new());

        pod.delete_route(&Route6::default_via(POD_GATEWAY6, 2, RT_TABLE_MAIN))
            .unwrap();
        host.delete_rule(&Rule6::to_dst(PRIO_TO_POD, ip128(), RT_TABLE_MAIN))
            .unwrap();
        host.delete_route(&Route6::link_scope(ip128(), 3, RT_TABLE_MAIN))
            .unwrap();
        pod.add_address(2, "2001:db8::9/128".parse::<Ipv6Network>().unwrap())
            .unwrap();
        assert_eq!(
            problems(&host, &pod, &expected),
            [
                "pod address 2001:db8::9/128 on eth0 unexpected",
                "pod route default via fe80::1 dev eth0 missing",
                "host route 2001:db8::5/128 dev enic440f455693 missing",
                "host rule to 2001:db8::5 lookup main prio 512 missing",
            ]
        );
    }
}

#[test]
fn teardown_of_a_dual_stack_pod_removes_both_families_then_the_veth() {
    let (net, host, pod) = FakeNet::node_and_pod();
    let before = net.state();
    add6(&host, &pod, &spec6(Some(IP), TABLE)).expect("ADD");
    net.take_calls();

    let report = teardown_pod_host(&host, Some(IP), Some(IP6), Some(VETH)).expect("DEL");

    assert_eq!(
        net.take_calls(),
        [
            "host: get link enic440f455693",
            "host: dump IPv4 rules",
            "host: delete rule prio 512 from all to 10.0.0.5/32 lookup main",
            "host: delete rule prio 1536 from 10.0.0.5/32 lookup 3",
            "host: delete route 10.0.0.5/32 dev #3 scope link",
            "host: dump IPv6 rules",
            "host: delete rule prio 512 from all to 2001:db8::5/128 lookup main",
            "host: delete route 2001:db8::5/128 dev #3",
            "host: delete link #3",
        ]
    );
    assert_eq!((report.rules_removed(), report.routes_removed()), (3, 2));
    assert!(report.veth_removed);
    assert_eq!(without_lo_setting(net.state()), before);

    let again = teardown_pod_host(&host, Some(IP), Some(IP6), Some(VETH)).expect("again");
    assert_eq!((again.rules_removed(), again.routes_removed()), (0, 0));
    assert!(!again.veth_removed);
}

#[test]
fn unrouting_a_dual_stack_pod_leaves_its_veth_and_nothing_else() {
    let (net, host, pod) = FakeNet::node_and_pod();
    add6(&host, &pod, &spec6(Some(IP), TABLE)).expect("ADD");
    net.take_calls();

    let report = unroute_pod(&host, Some(IP), Some(IP6), Some(VETH)).expect("DEL");

    assert_eq!(
        net.take_calls(),
        [
            "host: get link enic440f455693",
            "host: dump IPv4 rules",
            "host: delete rule prio 512 from all to 10.0.0.5/32 lookup main",
            "host: delete rule prio 1536 from 10.0.0.5/32 lookup 3",
            "host: delete route 10.0.0.5/32 dev #3 scope link",
            "host: dump IPv6 rules",
            "host: delete rule prio 512 from all to 2001:db8::5/128 lookup main",
            "host: delete route 2001:db8::5/128 dev #3",
        ]
    );
    assert_eq!((report.rules_removed(), report.routes_removed()), (3, 2));
    assert!(!report.veth_removed);
    assert!(
        host.link_by_name(VETH).unwrap().is_some(),
        "the veth is left"
    );

    let again = unroute_pod(&host, Some(IP), Some(IP6), Some(VETH)).expect("again");
    assert_eq!((again.rules_removed(), again.routes_removed()), (0, 0));
}

#[test]
fn teardown_of_an_ipv6_only_pod_and_whose_address_it_is() {
    let (net, host, pod) = FakeNet::node_and_pod();
    add6(&host, &pod, &spec6(None, RT_TABLE_MAIN)).expect("ADD");
    assert!(!routed_elsewhere(&host, IP6, Some(VETH)).unwrap());
    assert!(routed_elsewhere(&host, IP6, Some("enic000000000")).unwrap());
    let other: Ipv6Addr = "2001:db8::6".parse().unwrap();
    assert!(!routed_elsewhere(&host, other, Some(VETH)).unwrap());
    net.take_calls();

    let report = teardown_host(&host, IP6, Some(VETH)).expect("DEL");
    assert_eq!(
        report.rules_removed,
        [Rule6::to_dst(PRIO_TO_POD, ip128(), RT_TABLE_MAIN)]
    );
    assert!(report.route_removed && report.veth_removed);
    assert_eq!(
        net.take_calls(),
        [
            "host: dump IPv6 rules",
            "host: delete rule prio 512 from all to 2001:db8::5/128 lookup main",
            "host: get link enic440f455693",
            "host: delete route 2001:db8::5/128 dev #3",
            "host: delete link #3",
        ]
    );
    assert!(host.state().v6.routes.is_empty() && host.state().v6.rules.is_empty());
}

const EGRESS: Ipv4Addr = Ipv4Addr::new(169, 254, 172, 9);

#[test]
fn an_egress_address_is_wired_as_ipv4_without_rules_and_checked_so() {
    let (net, host, pod) = FakeNet::node_and_pod();
    let spec = PodSpec {
        egress_ipv4: Some(EGRESS),
        ..spec6(None, RT_TABLE_MAIN)
    };
    let wiring = add6(&host, &pod, &spec).expect("ADD");
    let egress = [
        "host: replace route 169.254.172.9/32 dev #3 scope link",
        "pod: add address 169.254.172.9/32 dev #2",
        "pod: replace route 169.254.1.1/32 dev #2 scope link",
        "pod: add route default via 169.254.1.1 dev #2",
        "pod: replace neighbour 169.254.1.1 lladdr 02:aa:bb:cc:dd:ee dev #2 permanent",
    ];
    let want: Vec<String> = VETH_CALLS
        .iter()
        .chain(&egress)
        .chain(&V6_CALLS)
        .map(|c| c.to_string())
        .collect();
    assert_eq!(net.take_calls(), want);
    assert!(host.state().rules.is_empty(), "no IPv4 rule");

    let mut want = ExpectedPod {
        egress_ipv4: Some(EGRESS),
        ..expected(None, RT_TABLE_MAIN, &wiring)
    };
    assert_eq!(problems(&host, &pod, &want), Vec::<String>::new());
    // A rule for it would send its packets past the SNAT; CHECK says so.
    host.add_rule(&Rule::to_dst(
        PRIO_TO_POD,
        Ipv4Network::from(EGRESS),
        RT_TABLE_MAIN,
    ))
    .unwrap();
    assert_eq!(
        problems(&host, &pod, &want),
        ["host rule to/from 169.254.172.9 lookup main prio 512 unexpected for an egress address"]
    );
    want.egress_ipv4 = Some(Ipv4Addr::new(169, 254, 172, 10));
    let found = problems(&host, &pod, &want);
    assert!(
        found.contains(&"pod address 169.254.172.10/32 on eth0 missing".to_string()),
        "{found:?}"
    );

    // DEL with the egress address as the IPv4 one removes its route and the veth.
    let report = teardown_pod_host(&host, Some(EGRESS), Some(IP6), Some(VETH)).unwrap();
    assert!(report.veth_removed);
    assert!(host.state().routes.is_empty());
}

#[test]
fn an_egress_address_needs_a_pod_without_ipv4_and_a_node_local_address() {
    let cases = [
        (
            Some(IP),
            Some(IP6),
            EGRESS,
            "with an IPv4 address of its own",
        ),
        (None, Some(IP6), IP, "10.0.0.5 is not a node-local"),
    ];
    for (ipv4, ipv6, egress, why) in cases {
        let spec = PodSpec {
            ipv4,
            ipv6,
            egress_ipv4: Some(egress),
            ..spec6(None, TABLE)
        };
        let err = validate(&spec).unwrap_err().to_string();
        assert!(
            err.starts_with("invalid IPv4 egress address: ") && err.contains(why),
            "{err}"
        );
    }
}
