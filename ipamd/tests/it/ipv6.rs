//! IPv6 mode and dual-stack with replaced seams: the primary ENI's /80 from EC2, one address
//! per pod from it, cooldown, persistence across restarts, GC and readiness.

use crate::support;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use cloud::{CloudError, Ec2};
use ipam_proto::{CheckRequest, ErrorKind, GcRequest, Reply, Request, ValidAttachment};
use ipnetwork::Ipv6Network;
use pool::Clock;
use support::*;

const V6: &[(&str, &str)] = &[("ENABLE_IPv6", "true")];
const DUAL: &[(&str, &str)] = &[("ENABLE_IPv6", "true"), ("ENABLE_IPv4", "true")];
const SUBNET6: &str = "2001:db8:0:1::/64";

/// A node whose subnet has an IPv6 /64, so AssignIpv6Addresses can delegate /80s of it.
fn v6_node() -> Node {
    let node = Node::at(1_000);
    node.ec2.enable_ipv6(SUBNET6);
    node
}

fn prefixes(node: &Node) -> Vec<Ipv6Network> {
    node.ec2.eni(&node.ec2.primary).unwrap().ipv6_prefixes
}

fn ipv6_of(reply: Reply) -> Ipv6Addr {
    match reply {
        Reply::Add(r) => r.allocation.ipv6.expect("an IPv6 address"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn ipv6_mode_gets_one_slash_80_and_no_ipv4_pool() {
    let node = v6_node();
    let d = node.start(V6).await;
    let delegated = prefixes(&node);
    assert_eq!(delegated.len(), 1, "one /80 on the primary ENI");
    assert_eq!(delegated[0].prefix(), 80);
    assert!(
        node.ec2
            .eni(&node.ec2.primary)
            .unwrap()
            .secondary_ips
            .is_empty(),
        "no IPv4 addresses are asked for in IPv6 mode"
    );
    assert_eq!(
        node.ec2
            .calls()
            .iter()
            .filter(|c| c.starts_with(cloud::Action::AssignIpv6Addresses.wire_name()))
            .count(),
        1
    );
    let a = allocate(&d, 1).await;
    let ip = a.ipv6.expect("an IPv6 address");
    assert!(delegated[0].contains(ip));
    assert_eq!(a.ip, None, "IPv6 mode gives no IPv4 address");
    assert_eq!(
        (a.eni_id.as_str(), a.route_table),
        (node.ec2.primary.as_str(), 254)
    );
    // More pods never need EC2 again.
    for n in 2..30 {
        allocate(&d, n).await;
    }
    assert_eq!(
        node.ec2
            .calls()
            .iter()
            .filter(|c| c.starts_with("Assign"))
            .count(),
        1
    );
    d.grow().await;
    assert_eq!(
        prefixes(&node).len(),
        1,
        "the controller asks for nothing more"
    );
}

#[tokio::test]
async fn add_is_idempotent_del_cools_and_check_and_gc_answer() {
    let node = v6_node();
    let d = node.start(V6).await;
    let a = ipv6_of(d.handle(add(1)).await.unwrap());
    assert_eq!(ipv6_of(d.handle(add(1)).await.unwrap()), a);
    match d.handle(Request::Check(CheckRequest { key: key(1) })).await {
        Ok(Reply::Check(c)) => assert_eq!(c.allocation.ipv6, Some(a)),
        other => panic!("{other:?}"),
    }
    match d.handle(del(1)).await.unwrap() {
        Reply::Del(r) => assert_eq!(r.released.and_then(|a| a.ipv6), Some(a)),
        other => panic!("{other:?}"),
    }
    // Within the cooldown, the released address goes to nobody.
    let b = ipv6_of(d.handle(add(2)).await.unwrap());
    assert_ne!(a, b);
    let err = d
        .handle(Request::Check(CheckRequest { key: key(1) }))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::UnknownAttachment);
    allocate(&d, 3).await;
    let gc = d
        .handle(Request::Gc(GcRequest {
            network: "aws-cni".into(),
            valid: vec![ValidAttachment {
                container_id: key(3).container_id,
                ifname: "eth0".into(),
            }],
        }))
        .await
        .unwrap();
    match gc {
        Reply::Gc(r) => {
            let gone: Vec<_> = r.released.iter().filter_map(|a| a.ipv6).collect();
            assert_eq!(gone, [b]);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn ipv6_assignments_survive_a_restart_and_no_second_prefix_is_taken() {
    let node = v6_node();
    let held: Vec<Ipv6Addr> = {
        let d = node.start(V6).await;
        let mut held = Vec::new();
        for n in 0..5 {
            held.push(allocate(&d, n).await.ipv6.unwrap());
        }
        d.handle(del(4)).await.unwrap();
        d.flush().await.unwrap();
        held
    };
    let d = node.start(V6).await;
    for (n, ip) in held.iter().enumerate().take(4) {
        assert_eq!(allocate(&d, n as u32).await.ipv6, Some(*ip), "pod {n}");
    }
    let fresh = allocate(&d, 9).await.ipv6.unwrap();
    assert!(
        !held.contains(&fresh),
        "a cooling address is not reused after a restart"
    );
    assert_eq!(prefixes(&node).len(), 1);
}

#[tokio::test]
async fn a_prefix_ec2_took_away_is_dropped_at_restart_and_replaced() {
    let node = v6_node();
    {
        let d = node.start(V6).await;
        allocate(&d, 1).await;
    }
    let delegated = prefixes(&node);
    node.ec2
        .unassign_ipv6_prefixes(&node.ec2.primary, &delegated)
        .await
        .unwrap();
    let d = node.start(V6).await;
    assert!(
        d.pool_snapshot().v6().get(&pool_key(1)).is_none(),
        "the address went with its prefix"
    );
    let now = prefixes(&node);
    assert_eq!(now.len(), 1, "a new /80 was asked for");
    let pool_prefixes: Vec<Ipv6Network> =
        d.pool_snapshot().v6().prefixes().map(|(p, _)| p).collect();
    assert_eq!(pool_prefixes, now, "the pool holds what EC2 delegates");
    assert!(now[0].contains(allocate(&d, 1).await.ipv6.unwrap()));
}

#[tokio::test]
async fn without_a_prefix_ipamd_is_not_ready_and_says_why_then_recovers() {
    let node = v6_node();
    node.ec2.fail_next(
        cloud::Action::AssignIpv6Addresses,
        vec![CloudError::from_code(
            cloud::Action::AssignIpv6Addresses.wire_name(),
            "UnauthorizedOperation",
            "You are not authorized to perform this operation.",
        )],
    );
    let d = node.start(V6).await;
    let status = match d.handle(Request::Status).await.unwrap() {
        Reply::Status(s) => s,
        other => panic!("{other:?}"),
    };
    assert!(!status.ready);
    let reason = status.reason.unwrap();
    assert!(reason.contains("no IPv6 prefix"), "{reason}");
    assert!(reason.contains("UnauthorizedOperation"), "{reason}");
    let err = d.handle(add(1)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NoAddresses);
    assert!(err.message.contains("no IPv6 prefix"), "{}", err.message);
    // The next controller round asks again.
    node.clock.advance(Duration::from_secs(1));
    d.grow().await;
    assert_eq!(prefixes(&node).len(), 1);
    assert!(allocate(&d, 1).await.ipv6.is_some());
}

#[tokio::test]
async fn dual_stack_pods_get_both_families_and_release_both() {
    let node = v6_node();
    let d = node.start(DUAL).await;
    let a = allocate(&d, 1).await;
    let (v4, v6) = (a.ip.expect("IPv4"), a.ipv6.expect("IPv6"));
    assert!(prefixes(&node)[0].contains(v6));
    assert!(
        node.ec2
            .eni(&node.ec2.primary)
            .unwrap()
            .secondary_ips
            .contains(&v4)
    );
    match d.handle(del(1)).await.unwrap() {
        Reply::Del(r) => {
            let r = r.released.unwrap();
            assert_eq!((r.ip, r.ipv6), (Some(v4), Some(v6)));
        }
        other => panic!("{other:?}"),
    }
    let snapshot = d.pool_snapshot();
    assert!(snapshot.get(&pool_key(1)).is_none());
    assert!(snapshot.v6().get(&pool_key(1)).is_none());
}

#[tokio::test]
async fn dual_stack_gives_neither_address_when_ipv4_runs_out() {
    let node = v6_node();
    let d = node
        .start(&[
            ("ENABLE_IPv6", "true"),
            ("ENABLE_IPv4", "true"),
            ("MAX_ENI", "1"),
        ])
        .await;
    // t3.medium's primary ENI: 5 secondaries, and MAX_ENI=1 lets the pool grow no further.
    for n in 0..5 {
        allocate(&d, n).await;
    }
    let err = d.handle(add(9)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NoAddresses);
    assert!(
        d.pool_snapshot().v6().get(&pool_key(9)).is_none(),
        "the IPv6 address taken for the failed ADD went back"
    );
    assert_eq!(d.pool_snapshot().v6().allocations().len(), 5);
}

#[tokio::test]
async fn a_restart_releases_ipv6_addresses_whose_pods_went_while_it_was_down() {
    let node = v6_node();
    let (gone, running) = {
        let d = node.start(DUAL).await;
        let gone = allocate(&d, 1).await;
        let running = allocate(&d, 2).await;
        node.clock
            .advance(ipamd::daemon::DEAD_POD_GRACE + Duration::from_secs(1));
        (gone, running)
    };
    // Pod 1's DEL came while ipamd was away: the plugin removed both of its routes.
    node.host.gone.lock().unwrap().extend([
        std::net::IpAddr::V4(gone.ip.unwrap()),
        std::net::IpAddr::V6(gone.ipv6.unwrap()),
    ]);
    // Pod 2 lost only its IPv4 route: it still routes over IPv6, so it is not gone.
    node.host
        .gone
        .lock()
        .unwrap()
        .insert(std::net::IpAddr::V4(running.ip.unwrap()));
    let d = node.start(DUAL).await;
    let snapshot = d.pool_snapshot();
    assert!(snapshot.get(&pool_key(1)).is_none());
    assert!(snapshot.v6().get(&pool_key(1)).is_none());
    assert_eq!(
        snapshot.v6().counts(node.clock.now()).cooling,
        1,
        "released into cooldown"
    );
    assert_eq!(
        snapshot.v6().get(&pool_key(2)).map(|a| a.ip),
        running.ipv6,
        "a pod with a route left is kept"
    );
    assert!(snapshot.get(&pool_key(2)).is_some());
}

#[tokio::test]
async fn after_the_store_is_lost_a_routed_ipv6_pod_keeps_its_address() {
    let node = v6_node();
    let held = {
        let d = node.start(V6).await;
        allocate(&d, 1).await.ipv6.unwrap()
    };
    // Everything stored is gone; the node still routes to the pod through its veth.
    std::fs::remove_dir_all(node.dir.path().join("state")).unwrap();
    node.host
        .routes
        .lock()
        .unwrap()
        .push((std::net::IpAddr::V6(held), "enia1b2c3".to_string()));
    let d = node.start(V6).await;
    let adopted = d.pool_snapshot().v6().allocations();
    assert_eq!(adopted.len(), 1, "{adopted:?}");
    assert_eq!(adopted[0].ip, held);
    assert_eq!(adopted[0].key.network, ipamd::daemon::RECOVERED_NETWORK);
    // The next pod does not get the adopted address.
    assert_ne!(allocate(&d, 2).await.ipv6, Some(held));
    // Once the route goes, reconciliation releases it.
    node.host.routes.lock().unwrap().clear();
    node.host
        .gone
        .lock()
        .unwrap()
        .insert(std::net::IpAddr::V6(held));
    d.reconcile().await;
    assert!(
        d.pool_snapshot()
            .v6()
            .allocations()
            .iter()
            .all(|a| a.ip != held)
    );
}

#[tokio::test]
async fn ipv6_pods_get_distinct_ipv4_egress_addresses_kept_across_a_restart() {
    let node = v6_node();
    let egress: Vec<Ipv4Addr> = {
        let d = node.start(V6).await;
        let mut egress = Vec::new();
        for n in 0..4 {
            let a = allocate(&d, n).await;
            egress.push(
                a.egress_ipv4
                    .expect("IPv4 egress is on by default in IPv6 mode"),
            );
        }
        d.flush().await.unwrap();
        egress
    };
    let unique: BTreeSet<Ipv4Addr> = egress.iter().copied().collect();
    assert_eq!(unique.len(), egress.len(), "{egress:?}");
    assert!(egress.iter().all(|e| pool::EGRESS_V4_RANGE.contains(*e)));

    let d = node.start(V6).await;
    for (n, e) in egress.iter().enumerate() {
        assert_eq!(
            allocate(&d, n as u32).await.egress_ipv4,
            Some(*e),
            "pod {n}"
        );
    }
    // Released, an egress address cools with its IPv6 address.
    match d.handle(del(0)).await.unwrap() {
        Reply::Del(r) => assert_eq!(r.released.unwrap().egress_ipv4, Some(egress[0])),
        other => panic!("{other:?}"),
    }
    assert_ne!(allocate(&d, 9).await.egress_ipv4, Some(egress[0]));
}

#[tokio::test]
async fn no_egress_address_when_turned_off_or_for_dual_stack_pods() {
    let node = v6_node();
    let off = [("ENABLE_IPv6", "true"), ("ENABLE_V4_EGRESS", "false")];
    let d = node.start(&off).await;
    let a = allocate(&d, 1).await;
    assert!(a.ipv6.is_some() && a.egress_ipv4.is_none(), "{a:?}");
    drop(d);

    let node = v6_node();
    let d = node.start(DUAL).await;
    let a = allocate(&d, 1).await;
    assert!(a.ip.is_some() && a.egress_ipv4.is_none(), "{a:?}");
}

#[tokio::test]
async fn after_the_store_is_lost_a_routed_ipv6_pod_keeps_its_egress_address_too() {
    let node = v6_node();
    let held = {
        let d = node.start(V6).await;
        allocate(&d, 1).await
    };
    let (ip6, egress) = (held.ipv6.unwrap(), held.egress_ipv4.unwrap());
    std::fs::remove_dir_all(node.dir.path().join("state")).unwrap();
    for ip in [IpAddr::V6(ip6), IpAddr::V4(egress)] {
        node.host
            .routes
            .lock()
            .unwrap()
            .push((ip, "enia1b2c3".to_string()));
    }
    let d = node.start(V6).await;
    let adopted = d.pool_snapshot().v6().allocations();
    assert_eq!(
        adopted.len(),
        1,
        "one pod, not an IPv4 one besides: {adopted:?}"
    );
    assert_eq!((adopted[0].ip, adopted[0].egress_v4), (ip6, Some(egress)));
    assert_ne!(allocate(&d, 2).await.egress_ipv4, Some(egress));
}
