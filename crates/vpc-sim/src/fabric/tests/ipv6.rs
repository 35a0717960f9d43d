//! The fabric's IPv6: startup lines, delivery and source rules following assign, unassign,
//! attach and detach, the `ip -6` batch, and an IPv4-only VPC left exactly as it was.

use std::net::Ipv6Addr;

use ipnetwork::Ipv6Network;

use super::*;
use crate::fabric::v6::{LINK_LOCAL, ROUTER6, eui64_link_local};
use crate::model::Assign6Request;

fn model6() -> Model {
    let t = Topology {
        vpc_cidr: "10.0.0.0/16".parse().unwrap(),
        secondary_cidrs: vec![],
        region: "us-west-2".into(),
        subnets: vec![
            SubnetSpec::new("10.0.0.0/24".parse().unwrap()),
            SubnetSpec::new("10.0.1.0/24".parse().unwrap()),
        ],
        security_groups: vec![],
        ipv6: true,
        vpc_ipv6_cidr: Some("2001:db8:0:100::/56".parse().unwrap()),
        nodes: 2,
        instance_type: "t3.medium".into(),
        extra_types: vec![],
    };
    Model::build(&t, Rng::seeded(9), 0).unwrap()
}

fn out() -> String {
    format!("{NAME}-out")
}

/// The lines of the `ip -n VPC -6 -batch -` in `log` (without the prefix).
fn rule_batch(log: &[String]) -> Vec<String> {
    let start = format!("ip -n {} -6 -batch -", vpc());
    let at = log
        .iter()
        .position(|l| *l == start)
        .unwrap_or_else(|| panic!("no -6 batch in {log:#?}"));
    let prefix = format!("ip -n {} -6 ", vpc());
    log[at + 1..]
        .iter()
        .map(|l| l.strip_prefix(&prefix).unwrap_or(l).to_string())
        .collect()
}

/// The lines of the plain VPC batch in `log`, up to the `-6` batch if any.
fn plain_batch(log: &[String]) -> Vec<String> {
    let end = log
        .iter()
        .position(|l| l.ends_with(" -6 -batch -"))
        .unwrap_or(log.len());
    vpc_batch(&log[..end])
}

fn hop(m: &Model, eni: &str) -> Ipv6Addr {
    eui64_link_local(&m.eni(eni).unwrap().mac).unwrap()
}

fn host(ip: Ipv6Addr) -> Ipv6Network {
    Ipv6Network::new(ip, 128).unwrap()
}

#[test]
fn the_next_hop_is_the_macs_eui64_link_local_address() {
    assert_eq!(
        eui64_link_local("02:00:00:00:00:01"),
        Some("fe80::ff:fe00:1".parse().unwrap())
    );
    assert_eq!(
        eui64_link_local("0a:1b:2c:3d:4e:5f"),
        Some("fe80::81b:2cff:fe3d:4e5f".parse().unwrap())
    );
    for bad in [
        "",
        "02:00:00:00:00",
        "02:00:00:00:00:01:02",
        "zz:00:00:00:00:01",
    ] {
        assert_eq!(eui64_link_local(bad), None, "{bad:?}");
    }
    assert_eq!(ROUTER6.to_string(), "fe80:ec2::1");
    assert_eq!(LINK_LOCAL.to_string(), "fe80::/10");
}

#[test]
fn plan_has_the_vpc_56_the_nodes_ipv6_and_the_outsides() {
    let m = model6();
    let p = plan(&m);
    let vpc6: Ipv6Network = "2001:db8:0:100::/56".parse().unwrap();
    assert_eq!(p.vpc_ipv6_cidr, Some(vpc6));
    assert_eq!(p.outside.ipv6, Some(DEFAULT_OUTSIDE_IPV6));
    assert_eq!(DEFAULT_OUTSIDE_IPV6.to_string(), "2001:db8:8000::10");
    assert!(!crate::model::VPC_V6_POOL.contains(DEFAULT_OUTSIDE_IPV6));
    for (n, inst) in p.nodes.iter().zip(m.instances()) {
        let eni = m.eni(&inst.primary_eni).unwrap();
        let subnet = m.subnet(&eni.subnet_id).unwrap().ipv6_cidr().unwrap();
        let ip6 = n.ipv6.expect("a primary IPv6");
        assert!(subnet.contains(ip6) && vpc6.contains(ip6), "{ip6}");
        assert_eq!(Some(ip6), eni.ipv6_addresses.first().map(|a| a.value));
    }
    // IPv4 only: nothing of it.
    let p4 = plan(&model());
    assert_eq!(p4.vpc_ipv6_cidr, None);
    assert_eq!(p4.outside.ipv6, None);
    assert!(p4.nodes.iter().all(|n| n.ipv6.is_none()));
}

#[test]
fn build_adds_ipv6_to_the_vpc_the_outside_the_links_and_the_nodes() {
    let m = model6();
    let plan = plan(&m);
    let rec = Recorder::default();
    let log = rec.log.clone();
    let mut f = Fabric::new(rec);
    f.build(&plan, &m).unwrap();
    let lines = log.borrow().clone();
    let (v, o, n1) = (vpc(), out(), node(1));
    let pos = |needle: &str| {
        lines
            .iter()
            .position(|l| l == needle)
            .unwrap_or_else(|| panic!("missing {needle:?} in {lines:#?}"))
    };
    // Sysctls: the IPv4 ones unchanged, then IPv6 on and forwarding, before any link.
    assert!(lines[2].starts_with(&format!(
        "ip netns exec {v} sysctl -q -w net.ipv4.ip_forward=1"
    )));
    assert_eq!(
        lines[3],
        format!(
            "ip netns exec {v} sysctl -q -w net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.default.disable_ipv6=0 net.ipv6.conf.all.forwarding=1 net.ipv6.conf.default.forwarding=1"
        )
    );
    let first_link = lines.iter().position(|l| l.contains("link add")).unwrap();
    assert!(first_link > 3);
    pos(&format!("ip -n {v} route add blackhole 10.0.0.0/16"));
    pos(&format!(
        "ip -n {v} route add blackhole 2001:db8:0:100::/56"
    ));

    // The outside: IPv6 on, link-locals on both ends, its address, routes both ways.
    assert!(
        pos(&format!(
            "ip netns exec {o} sysctl -q -w net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.default.disable_ipv6=0"
        )) > pos(&format!("ip netns add {o}"))
    );
    let vpc_out = pos(&format!(
        "ip -n {v} link add vpc-out mtu 1500 type veth peer name eth0 mtu 1500 netns {o}"
    ));
    assert_eq!(
        lines[vpc_out + 1..vpc_out + 6],
        [
            format!("ip -n {v} addr add 192.0.2.1/30 dev vpc-out"),
            format!("ip -n {v} link set vpc-out up"),
            format!("ip -n {v} route add default via 192.0.2.2 dev vpc-out"),
            format!("ip -n {v} addr add fe80::1/64 dev vpc-out nodad"),
            format!("ip -n {v} route add default via fe80::2 dev vpc-out"),
        ]
    );
    let out_batch = pos(&format!("ip -n {o} -batch -"));
    assert_eq!(
        lines[out_batch + 1..out_batch + 9],
        [
            format!("ip -n {o} link set lo up"),
            format!("ip -n {o} addr add 198.51.100.10/32 dev lo"),
            format!("ip -n {o} addr add 192.0.2.2/30 dev eth0"),
            format!("ip -n {o} link set eth0 up"),
            format!("ip -n {o} route add 10.0.0.0/16 via 192.0.2.1 dev eth0"),
            format!("ip -n {o} addr add 2001:db8:8000::10/128 dev lo nodad"),
            format!("ip -n {o} addr add fe80::2/64 dev eth0 nodad"),
            format!("ip -n {o} route add 2001:db8:0:100::/56 via fe80::1 dev eth0"),
        ]
    );

    // Node 1's primary ENI: the IPv4 link, then EC2's IPv6 router and the next hop's
    // neighbour, its primary IPv6 routed via that next hop.
    let p1 = &plan.nodes[0];
    let ip6 = p1.ipv6.unwrap();
    let nh = eui64_link_local(&p1.mac).unwrap();
    pos(&format!(
        "ip netns exec {n1} sysctl -q -w net.ipv4.ip_forward=1 net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.default.disable_ipv6=0 net.ipv6.conf.all.forwarding=1 net.ipv6.conf.default.forwarding=1"
    ));
    let link = pos(&format!(
        "ip -n {v} link add n1d0 mtu 9001 type veth peer name eth0 address {} mtu 9001 netns {n1}",
        p1.mac
    ));
    assert_eq!(
        lines[link + 1..link + 6],
        [
            format!("ip -n {v} addr add 10.0.0.1/32 dev n1d0"),
            format!("ip -n {v} ntable change name arp_cache dev n1d0 proxy_delay 0"),
            format!("ip -n {v} link set n1d0 up"),
            format!("ip -n {v} addr add fe80:ec2::1/64 dev n1d0 nodad"),
            format!(
                "ip -n {v} neigh replace {nh} lladdr {} dev n1d0 nud permanent",
                p1.mac
            ),
        ]
    );
    assert!(
        pos(&format!(
            "ip -n {v} route replace {ip6}/128 via {nh} dev n1d0"
        )) > link
    );
    // The source check, in an `ip -6` batch after the links: the blackhole, then what the ENI
    // holds and link-local sources.
    let rules = pos(&format!("ip -n {v} -6 -batch -"));
    assert!(
        rules
            > pos(&format!(
                "ip -n {v} route replace {ip6}/128 via {nh} dev n1d0"
            ))
    );
    let guard = pos(&format!(
        "ip -n {v} -6 rule add iif n1d0 blackhole pref 110"
    ));
    for allowed in [LINK_LOCAL, host(ip6)] {
        let l = pos(&format!(
            "ip -n {v} -6 rule add iif n1d0 from {allowed} lookup main pref 100"
        ));
        assert!(l > guard, "allowed after the blackhole is in place");
    }
    // The node side: IPv4 as before, then its /128 and the default route via EC2's router.
    let node_batch = pos(&format!("ip -n {n1} -batch -"));
    assert_eq!(
        lines[node_batch + 1..node_batch + 8],
        [
            format!("ip -n {n1} link set lo up"),
            format!("ip -n {n1} addr add 169.254.169.254/32 dev lo scope host"),
            format!("ip -n {n1} addr add {} dev eth0", p1.address),
            format!("ip -n {n1} link set eth0 up"),
            format!("ip -n {n1} route add default via 10.0.0.1 dev eth0"),
            format!("ip -n {n1} addr add {ip6}/128 dev eth0 nodad"),
            format!("ip -n {n1} route add default via fe80:ec2::1 dev eth0"),
        ]
    );
    assert!(lines.iter().all(|l| l.contains(NAME)));
    let w = f.wiring();
    assert_eq!(w.routes6.len(), 2);
    assert_eq!(w.guarded6.len(), 2);
    assert_eq!(
        w.allowed6.len(),
        4,
        "link-local and the primary IPv6, per node"
    );
    assert!(w.links.values().all(|l| l.router6 && l.next_hop6));
}

#[test]
fn an_ipv4_vpc_gets_no_ipv6_line_at_all() {
    let mut m = model();
    let rec = Recorder::default();
    let log = rec.log.clone();
    let mut f = Fabric::new(rec);
    f.build(&plan(&m), &m).unwrap();
    let id = attached_eni(&mut m, 0, 0, 1);
    m.assign_private_ips(&id, AssignRequest::PrefixCount(1), 1)
        .unwrap();
    f.sync(&m).unwrap();
    let att = m.eni(&id).unwrap().attachment.clone().unwrap();
    m.detach_eni(&att.id, false).unwrap();
    f.sync(&m).unwrap();
    // DAD is off in every namespace whatever the family (an IPv4 box's links get link-local
    // addresses too): that line aside, nothing of IPv6.
    let dad_off =
        "sysctl -q -e -w net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0";
    let lines: Vec<String> = log
        .borrow()
        .iter()
        .filter(|l| !l.ends_with(dad_off))
        .cloned()
        .collect();
    for word in ["-6", "nodad", "fe80", "ipv6", "rule", "2001:"] {
        assert!(
            lines.iter().all(|l| !l.contains(word)),
            "{word:?} in {lines:#?}"
        );
    }
    let w = f.wiring();
    assert!(w.routes6.is_empty() && w.allowed6.is_empty() && w.guarded6.is_empty());
    assert!(w.links.values().all(|l| !l.router6 && !l.next_hop6));
}

#[test]
fn a_delegated_80_is_one_route_and_one_rule_and_goes_again_on_unassign() {
    let mut m = model6();
    let id = attached_eni(&mut m, 0, 0, 1);
    let (mut f, log) = built(&m);
    let nh = hop(&m, &id);
    let got = m
        .assign_ipv6(&id, Assign6Request::PrefixCount(1), 2)
        .unwrap();
    let p = got.prefixes[0];
    assert_eq!(p.prefix(), 80);
    assert_eq!(f.sync(&m).unwrap(), 2);
    let lines = take(&log);
    assert_eq!(
        plain_batch(&lines),
        [format!("route replace {p} via {nh} dev n1d1")]
    );
    assert_eq!(
        rule_batch(&lines),
        [format!("rule add iif n1d1 from {p} lookup main pref 100")]
    );
    assert_eq!(f.wiring().routes6[&p], ("n1d1".to_string(), nh));

    m.unassign_ipv6(&id, &[], &[p]).unwrap();
    assert_eq!(f.sync(&m).unwrap(), 2);
    let lines = take(&log);
    assert_eq!(plain_batch(&lines), [format!("route del {p} dev n1d1")]);
    assert_eq!(
        rule_batch(&lines),
        [format!("rule del iif n1d1 from {p} lookup main pref 100")]
    );
    assert_eq!(f.wiring(), &Wiring::wanted(&m, &plan(&m).node_map()));
}

#[test]
fn a_single_address_is_a_128_route_and_rule_and_goes_again_on_unassign() {
    let mut m = model6();
    let eni = m.instances()[1].primary_eni.clone();
    let (mut f, log) = built(&m);
    let nh = hop(&m, &eni);
    let got = m.assign_ipv6(&eni, Assign6Request::Count(2), 2).unwrap();
    assert_eq!(f.sync(&m).unwrap(), 4);
    let lines = take(&log);
    let mut routes: Vec<String> = got
        .addresses
        .iter()
        .map(|a| format!("route replace {a}/128 via {nh} dev n2d0"))
        .collect();
    let mut rules: Vec<String> = got
        .addresses
        .iter()
        .map(|a| format!("rule add iif n2d0 from {a}/128 lookup main pref 100"))
        .collect();
    let (mut got_routes, mut got_rules) = (plain_batch(&lines), rule_batch(&lines));
    for v in [&mut routes, &mut rules, &mut got_routes, &mut got_rules] {
        v.sort();
    }
    assert_eq!((got_routes, got_rules), (routes, rules));

    let gone = got.addresses[0];
    m.unassign_ipv6(&eni, &[gone], &[]).unwrap();
    f.sync(&m).unwrap();
    let lines = take(&log);
    assert_eq!(
        plain_batch(&lines),
        [format!("route del {gone}/128 dev n2d0")]
    );
    assert_eq!(
        rule_batch(&lines),
        [format!(
            "rule del iif n2d0 from {gone}/128 lookup main pref 100"
        )]
    );
    assert!(f.wiring().routes6.contains_key(&host(got.addresses[1])));
}

#[test]
fn attach_brings_the_link_with_ipv6_and_detach_removes_its_rules_too() {
    let mut m = model6();
    let (mut f, log) = built(&m);
    let id = attached_eni(&mut m, 1, 1, 1);
    let eni = m.eni(&id).unwrap().clone();
    let ip6 = eni.ipv6_addresses[0].value;
    let nh = hop(&m, &id);
    let n2 = node(2);
    assert_eq!(f.sync(&m).unwrap(), 6 + 3 + 3);
    let lines = take(&log);
    assert_eq!(
        plain_batch(&lines),
        [
            format!(
                "link add n2d1 mtu 9001 type veth peer name eth1 address {} mtu 9001 netns {n2}",
                eni.mac
            ),
            "addr add 10.0.1.1/32 dev n2d1".to_string(),
            "ntable change name arp_cache dev n2d1 proxy_delay 0".to_string(),
            "link set n2d1 up".to_string(),
            "addr add fe80:ec2::1/64 dev n2d1 nodad".to_string(),
            format!(
                "neigh replace {nh} lladdr {} dev n2d1 nud permanent",
                eni.mac
            ),
            format!("route replace {}/32 dev n2d1", eni.primary_ip),
            format!(
                "neigh replace {} lladdr {} dev n2d1 nud permanent",
                eni.primary_ip, eni.mac
            ),
            format!("route replace {ip6}/128 via {nh} dev n2d1"),
        ]
    );
    assert_eq!(
        rule_batch(&lines),
        [
            "rule add iif n2d1 blackhole pref 110".to_string(),
            format!("rule add iif n2d1 from {ip6}/128 lookup main pref 100"),
            "rule add iif n2d1 from fe80::/10 lookup main pref 100".to_string(),
        ]
    );
    assert_eq!(f.sync(&m).unwrap(), 0);

    let got = m
        .assign_ipv6(&id, Assign6Request::PrefixCount(1), 3)
        .unwrap();
    f.sync(&m).unwrap();
    take(&log);
    let att = m.eni(&id).unwrap().attachment.clone().unwrap();
    m.detach_eni(&att.id, false).unwrap();
    f.sync(&m).unwrap();
    let lines = take(&log);
    // The link takes its routes and neighbours along; the rules outlive it, so they go
    // explicitly, the blackhole last.
    assert_eq!(plain_batch(&lines), ["link del n2d1"]);
    let mut allows = vec![
        format!(
            "rule del iif n2d1 from {} lookup main pref 100",
            got.prefixes[0]
        ),
        format!("rule del iif n2d1 from {ip6}/128 lookup main pref 100"),
        "rule del iif n2d1 from fe80::/10 lookup main pref 100".to_string(),
    ];
    let mut rules = rule_batch(&lines);
    assert_eq!(rules.pop().unwrap(), "rule del iif n2d1 blackhole pref 110");
    rules.sort();
    allows.sort();
    assert_eq!(rules, allows);
    let w = f.wiring();
    assert!(w.routes6.values().all(|(l, _)| l != "n2d1"));
    assert!(w.allowed6.iter().all(|(l, _)| l != "n2d1"));
    assert!(!w.guarded6.contains("n2d1"));

    // Re-attached: link, both IPv4 lines, the /128 and the /80, and four rules again.
    let inst = instance(&m, 1);
    m.attach_eni(&id, &inst, 1, 0, 4).unwrap();
    assert_eq!(f.sync(&m).unwrap(), 6 + 2 + 2 + 4);
    assert_eq!(f.wiring(), &Wiring::wanted(&m, &plan(&m).node_map()));
}

#[test]
fn an_ipv6_address_moving_to_another_eni_is_rerouted_and_its_rule_moved() {
    let mut m = model6();
    let a = attached_eni(&mut m, 0, 0, 1);
    let b = attached_eni(&mut m, 0, 1, 1);
    let (mut f, log) = built(&m);
    let got = m.assign_ipv6(&a, Assign6Request::Count(1), 2).unwrap();
    let ip = got.addresses[0];
    f.sync(&m).unwrap();
    take(&log);
    m.unassign_ipv6(&a, &[ip], &[]).unwrap();
    m.assign_ipv6(&b, Assign6Request::Addresses(vec![ip]), 3)
        .unwrap();
    f.sync(&m).unwrap();
    let lines = take(&log);
    let nh = hop(&m, &b);
    assert_eq!(
        plain_batch(&lines),
        [format!("route replace {ip}/128 via {nh} dev n2d1")]
    );
    assert_eq!(
        rule_batch(&lines),
        [
            format!("rule del iif n1d1 from {ip}/128 lookup main pref 100"),
            format!("rule add iif n2d1 from {ip}/128 lookup main pref 100"),
        ]
    );
}

#[test]
fn a_failed_rule_line_keeps_the_record_exact_and_the_next_sync_runs_only_the_rest() {
    let mut m = model6();
    let (mut f, log, fail) = built_failable(&m);
    let id = attached_eni(&mut m, 0, 0, 1);
    let ip6 = m.eni(&id).unwrap().ipv6_addresses[0].value;
    fail_with(
        &fail,
        "-6 rule add iif n1d1 from 2001:",
        "RTNETLINK answers: boom",
    );
    let e = f.sync(&m).unwrap_err();
    match &e {
        FabricError::BatchLine { line, text, .. } => {
            assert_eq!(*line, 2, "the blackhole first, then what the ENI holds");
            assert_eq!(
                text,
                &format!("rule add iif n1d1 from {ip6}/128 lookup main pref 100")
            );
        }
        other => panic!("{other}"),
    }
    let w = f.wiring();
    assert!(w.links["n1d1"].router6 && w.routes6.contains_key(&host(ip6)));
    assert!(w.guarded6.contains("n1d1"));
    assert!(w.allowed6.iter().all(|(l, _)| l != "n1d1"));

    *fail.borrow_mut() = None;
    take(&log);
    assert_eq!(f.sync(&m).unwrap(), 2);
    let lines = take(&log);
    assert_eq!(
        lines[0],
        format!("ip -n {} -6 -batch -", vpc()),
        "no plain batch"
    );
    assert_eq!(
        rule_batch(&lines),
        [
            format!("rule add iif n1d1 from {ip6}/128 lookup main pref 100"),
            "rule add iif n1d1 from fe80::/10 lookup main pref 100".to_string(),
        ]
    );
    assert_eq!(f.wiring(), &Wiring::wanted(&m, &plan(&m).node_map()));
}

#[test]
fn deleting_a_rule_that_is_already_gone_counts_as_done() {
    let mut m = model6();
    let id = attached_eni(&mut m, 0, 0, 1);
    let (mut f, log, fail) = built_failable(&m);
    let att = m.eni(&id).unwrap().attachment.clone().unwrap();
    m.detach_eni(&att.id, false).unwrap();
    fail_with(
        &fail,
        "-6 rule del iif n1d1 blackhole",
        "RTNETLINK answers: No such file or directory",
    );
    f.sync(&m).unwrap();
    assert!(
        take(&log)
            .iter()
            .any(|l| l.contains("rule del iif n1d1 blackhole"))
    );
    assert_eq!(f.wiring(), &Wiring::wanted(&m, &plan(&m).node_map()));
}
