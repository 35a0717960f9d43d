//! ipamd with replaced seams: vpc-sim's EC2 in process, sled in a temp dir, a hand-driven clock.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use cloud::{CloudError, InstanceLimits};
use ipam_proto::{CheckRequest, ErrorKind, GcRequest, Reply, Request, ValidAttachment};
use support::*;

async fn ip_of(d: &TestDaemon, n: u32) -> std::net::Ipv4Addr {
    ipv4_of(d, n).await
}

#[tokio::test]
async fn startup_fills_the_primary_eni_through_ec2() {
    let dir = tempfile::tempdir().unwrap();
    let ec2 = ec2("t3.medium");
    let d = start(dir.path(), &ec2, &ManualClock::at(1_000)).await;
    // t3.medium: 6 IPv4 per ENI, so 5 secondaries.
    assert_eq!(ec2.eni(&ec2.primary).unwrap().secondary_ips.len(), 5);
    let counts = d.pool_snapshot().counts(pool::Timestamp(1_000));
    assert_eq!((counts.total, counts.available), (5, 5));
    assert_eq!(d.limits().max_pods, 17);
}

#[tokio::test]
async fn add_is_idempotent_and_every_verb_answers() {
    let dir = tempfile::tempdir().unwrap();
    let ec2 = ec2("t3.medium");
    let clock = ManualClock::at(1_000);
    let d = start(dir.path(), &ec2, &clock).await;

    let a = ip_of(&d, 1).await;
    assert_eq!(
        ip_of(&d, 1).await,
        a,
        "the same ADD twice gives the same address"
    );
    let b = ip_of(&d, 2).await;
    assert_ne!(a, b);

    match d
        .handle(Request::Check(CheckRequest { key: key(1) }))
        .await
        .unwrap()
    {
        Reply::Check(r) => {
            assert_eq!(r.allocation.ip, Some(a));
            assert_eq!(r.allocation.route_table, 254);
            assert_eq!(r.allocation.pod.name, "pod1");
        }
        other => panic!("{other:?}"),
    }
    let unknown = d
        .handle(Request::Check(CheckRequest { key: key(9) }))
        .await
        .unwrap_err();
    assert_eq!(unknown.kind, ErrorKind::UnknownAttachment);

    match d.handle(del(1)).await.unwrap() {
        Reply::Del(r) => assert_eq!(r.released.unwrap().ip, Some(a)),
        other => panic!("{other:?}"),
    }
    match d.handle(del(1)).await.unwrap() {
        Reply::Del(r) => assert!(
            r.released.is_none(),
            "a second DEL releases nothing and succeeds"
        ),
        other => panic!("{other:?}"),
    }

    match d.handle(Request::Status).await.unwrap() {
        Reply::Status(s) => {
            assert!(s.ready, "{s:?}");
            assert_eq!(
                (s.pool.assigned, s.pool.cooling, s.pool.available),
                (1, 1, 3)
            );
        }
        other => panic!("{other:?}"),
    }

    ip_of(&d, 3).await;
    let gc = Request::Gc(GcRequest {
        network: "aws-cni".into(),
        valid: vec![ValidAttachment {
            container_id: "container3".into(),
            ifname: "eth0".into(),
        }],
    });
    match d.handle(gc).await.unwrap() {
        Reply::Gc(r) => {
            let released: Vec<_> = r.released.iter().map(|a| a.key.clone()).collect();
            assert_eq!(released, vec![key(2)]);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_released_address_cools_down_for_the_configured_period() {
    let dir = tempfile::tempdir().unwrap();
    let ec2 = ec2("t3.nano");
    let clock = ManualClock::at(1_000);
    // t3.nano: 2 IPv4 per ENI, so one secondary address. MAX_ENI=1: the pool cannot grow
    // past the primary ENI, so only the cooldown is in play.
    let host = Arc::new(RecordingHost::default());
    let d = start_with(dir.path(), &ec2, &clock, &host, &[("MAX_ENI", "1")])
        .await
        .unwrap();
    let a = ip_of(&d, 1).await;
    d.handle(del(1)).await.unwrap();

    let err = d.handle(add(2)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NoAddresses);
    assert!(err.message.contains("cooling"), "{}", err.message);
    assert!(
        err.message.contains("max ENI limit is already reached"),
        "{}",
        err.message
    );

    clock.advance(Duration::from_secs(30));
    assert_eq!(ip_of(&d, 2).await, a);
}

#[tokio::test]
async fn a_restart_keeps_assignments_and_cooldown_deadlines() {
    let dir = tempfile::tempdir().unwrap();
    let ec2 = ec2("t3.medium");
    let clock = ManualClock::at(1_000);
    let (kept, cooling) = {
        let d = start(dir.path(), &ec2, &clock).await;
        let kept = ip_of(&d, 1).await;
        let cooling = ip_of(&d, 2).await;
        d.handle(del(2)).await.unwrap();
        (kept, cooling)
    };
    clock.advance(Duration::from_secs(10));
    let d = start(dir.path(), &ec2, &clock).await;
    assert_eq!(ip_of(&d, 1).await, kept, "the assignment survived");
    let snapshot = d.pool_snapshot();
    let now = pool::Timestamp(11_000);
    let slot = snapshot
        .addresses(&ec2.primary)
        .find(|(ip, _)| *ip == cooling)
        .map(|(_, s)| s.clone())
        .unwrap();
    assert!(
        slot.is_cooling(now),
        "the cooldown deadline survived: {slot:?}"
    );
    assert!(!slot.is_cooling(pool::Timestamp(31_000)));
    // Nothing lost or invented; the restart's first round grew the pool by one ENI, as
    // WARM_ENI_TARGET=1 asks once fewer than an ENI's worth of addresses are available.
    let counts = snapshot.counts(now);
    assert_eq!((counts.total, counts.assigned, counts.cooling), (10, 1, 1));
}

#[tokio::test]
async fn reconcile_takes_ec2_as_the_truth() {
    let dir = tempfile::tempdir().unwrap();
    let ec2 = ec2("t3.medium");
    let clock = ManualClock::at(1_000);
    let (held, free) = {
        let d = start(dir.path(), &ec2, &clock).await;
        let held = ip_of(&d, 1).await;
        let free = ip_of(&d, 2).await;
        d.handle(del(2)).await.unwrap();
        (held, free)
    };
    // Behind ipamd's back: EC2 takes two addresses away, one of them a pod's, and another
    // interface of the subnet gets them (left free, they would be the lowest free addresses,
    // which EC2 in vpc-sim hands out first, so the refill below would get them back).
    use cloud::Ec2;
    ec2.unassign_private_ips(&ec2.primary, &[held, free])
        .await
        .unwrap();
    ec2.add_eni(AddEni {
        description: "another interface",
        primary_ip: held,
        secondary_ips: &[free],
        tags: &[],
        attach: None,
    });
    let d = start(dir.path(), &ec2, &clock).await;
    let check = d
        .handle(Request::Check(CheckRequest { key: key(1) }))
        .await
        .unwrap_err();
    assert_eq!(
        check.kind,
        ErrorKind::UnknownAttachment,
        "a pod's address gone from EC2 is dropped"
    );
    let snapshot = d.pool_snapshot();
    let ips: Vec<_> = snapshot.addresses(&ec2.primary).map(|(ip, _)| ip).collect();
    assert!(!ips.contains(&held) && !ips.contains(&free));
    // ...and the pool was refilled to what the ENI can hold.
    assert_eq!(ips.len(), 5);
    assert_eq!(ec2.eni(&ec2.primary).unwrap().secondary_ips.len(), 5);
}

#[tokio::test]
async fn subnet_exhaustion_is_named_and_pauses_growth() {
    let dir = tempfile::tempdir().unwrap();
    let ec2 = ec2("t3.medium");
    let full = CloudError::from_code(
        cloud::Action::AssignPrivateIpAddresses.wire_name(),
        "InsufficientFreeAddressesInSubnet",
        format!(
            "The specified subnet {} does not have enough free addresses",
            ec2.subnet
        ),
    );
    // Refused for the warm pool's 5, then for one.
    ec2.fail_next(
        cloud::Action::AssignPrivateIpAddresses,
        vec![full.clone(), full],
    );
    let d = start(dir.path(), &ec2, &ManualClock::at(1_000)).await;
    let err = d.handle(add(1)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NoAddresses);
    let exhausted = format!("subnet {} is exhausted", ec2.subnet);
    assert!(err.message.contains(&exhausted), "{}", err.message);
    match d.handle(Request::Status).await.unwrap() {
        Reply::Status(s) => {
            assert!(!s.ready);
            assert!(s.reason.unwrap().contains(&exhausted));
        }
        other => panic!("{other:?}"),
    }
    // Growth stays paused: no further call while the pause lasts.
    d.grow().await;
    let assigns: Vec<String> = ec2
        .calls()
        .into_iter()
        .filter(|c| c.starts_with(cloud::Action::AssignPrivateIpAddresses.wire_name()))
        .collect();
    assert_eq!(assigns.len(), 2, "the full ask, then one: {assigns:?}");
}

#[tokio::test]
async fn a_subnet_too_full_for_the_whole_ask_still_gives_one() {
    let dir = tempfile::tempdir().unwrap();
    let ec2 = ec2("t3.medium");
    let full = CloudError::from_code(
        cloud::Action::AssignPrivateIpAddresses.wire_name(),
        "InsufficientFreeAddressesInSubnet",
        "The specified subnet does not have enough free addresses",
    );
    ec2.fail_next(cloud::Action::AssignPrivateIpAddresses, vec![full]);
    let d = start(dir.path(), &ec2, &ManualClock::at(1_000)).await;
    allocate(&d, 1).await;
    assert!(
        d.view().growth_paused_until.is_none(),
        "one address came: no pause"
    );
    let assigns = ec2
        .calls()
        .iter()
        .filter(|c| c.starts_with(cloud::Action::AssignPrivateIpAddresses.wire_name()))
        .count();
    assert!(assigns >= 2, "the refused ask, then one");
}

#[tokio::test]
async fn giving_addresses_back_ends_a_full_subnets_pause() {
    let node = Node::at(1_000_000);
    // t3.medium: the primary holds 5; WARM_IP_TARGET=5 with 5 pods wants a second ENI, which
    // the full subnet refuses, with 5 addresses and with one.
    let full = CloudError::from_code(
        cloud::Action::CreateNetworkInterface.wire_name(),
        "InsufficientFreeAddressesInSubnet",
        "The specified subnet does not have enough free addresses",
    );
    node.ec2.fail_next(
        cloud::Action::CreateNetworkInterface,
        vec![full.clone(), full],
    );
    let d = node
        .start(&[("WARM_IP_TARGET", "5"), ("IP_COOLDOWN_PERIOD", "1")])
        .await;
    for n in 1..=5 {
        allocate(&d, n).await;
    }
    d.grow().await;
    assert!(
        d.view().growth_paused_until.is_some(),
        "a full subnet pauses growth"
    );
    assert!(
        d.view().scarce,
        "and puts the node in scarcity mode (on by default)"
    );
    // Three pods go; scarcity mode keeps one address warm and gives two back.
    for n in 1..=3 {
        d.handle(del(n)).await.unwrap();
    }
    node.clock.advance(Duration::from_secs(2));
    d.grow().await;
    assert_eq!(
        node.ec2.eni(&node.ec2.primary).unwrap().secondary_ips.len(),
        3
    );
    assert!(
        d.view().growth_paused_until.is_none(),
        "the subnet has the addresses just given back: growth resumes"
    );
}

#[tokio::test]
async fn an_instance_type_missing_from_the_table_is_asked_of_ec2() {
    let dir = tempfile::tempdir().unwrap();
    let ec2 = Cloud::launch(
        "x9.future",
        &[(
            "x9.future",
            InstanceLimits {
                max_enis: 2,
                ipv4_per_eni: 4,
                nitro: true,
                bare_metal: false,
                network_cards: 1,
            },
        )],
    );
    let d = try_start(dir.path(), &ec2, &ManualClock::at(0))
        .await
        .unwrap();
    assert_eq!(d.limits().secondary_ips_per_eni, 3);
    assert!(ec2.calls().contains(&format!(
        "{}(x9.future)",
        cloud::Action::DescribeInstanceTypes
    )));

    let dir = tempfile::tempdir().unwrap();
    let err = try_start_claiming(dir.path(), &ec2, &ManualClock::at(0), "zz.unknown")
        .await
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("unknown instance type zz.unknown"),
        "{err}"
    );
}
