//! ipamd when things go wrong: missed DELs, an ENI replaced behind its back, a link that never
//! appears, and an ADD no growth can serve (vpc-sim's EC2 in process, hand-driven clock, paused
//! tokio time).

use crate::support;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use cloud::Ec2;
use ipam_proto::ErrorKind;
use ipamd::daemon::DEAD_POD_GRACE;
use pool::Clock;
use support::*;

#[tokio::test]
async fn a_restart_reclaims_addresses_whose_pods_went_while_it_was_down() {
    let node = Node::at(1_000);
    let (gone, running, just_added) = {
        let d = node.start(&[]).await;
        let (gone, running) = (ipv4_of(&d, 1).await, ipv4_of(&d, 2).await);
        node.clock.advance(DEAD_POD_GRACE + Duration::from_secs(1));
        (gone, running, ipv4_of(&d, 3).await)
    };
    // While ipamd was away the plugin's DEL removed pod 1's route, and pod 3's ADD got its
    // reply but has not added the route yet; pod 2 runs on.
    node.host
        .gone
        .lock()
        .unwrap()
        .extend([std::net::IpAddr::V4(gone), std::net::IpAddr::V4(just_added)]);

    let d = node.start(&[]).await;
    let snapshot = d.pool_snapshot();
    assert!(
        snapshot.get(&pool_key(1)).is_none(),
        "pod 1 still holds {gone}"
    );
    assert_eq!(snapshot.get(&pool_key(2)).map(|a| a.ip), Some(running));
    assert_eq!(
        snapshot.get(&pool_key(3)).map(|a| a.ip),
        Some(just_added),
        "an address assigned moments ago may be a live pod's"
    );
    let counts = snapshot.counts(node.clock.now());
    assert_eq!(
        (counts.assigned, counts.cooling),
        (2, 1),
        "released through the cooldown: {counts:?}"
    );
}

#[tokio::test]
async fn a_prefix_delegation_eni_brings_its_prefix_into_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    // t3.nano: 2 ENIs of 2 IPv4 each, so one /28 per ENI.
    let ec2 = ec2("t3.nano");
    let host = Arc::new(RecordingHost::default());
    let d = start_with(
        dir.path(),
        &ec2,
        &ManualClock::at(0),
        &host,
        &[("ENABLE_PREFIX_DELEGATION", "true")],
    )
    .await
    .unwrap();
    allocate(&d, 1).await;
    // The primary's only /28 is in use, so a wholly free one needs a new ENI.
    d.grow().await;
    let eni = secondary(&ec2);
    assert_eq!(eni.prefixes.len(), 1, "{eni:?}");
    let prefix = eni.prefixes[0];
    let snapshot = d.pool_snapshot();
    assert_eq!(snapshot.prefixes(&eni.id).collect::<Vec<_>>(), vec![prefix]);
    assert_eq!(snapshot.counts(pool::Timestamp(0)).total, 32);
    // The 17th pod does not fit the primary's /28: it gets the new ENI's.
    let mut last = None;
    for n in 2..=17 {
        last = Some(allocate(&d, n).await);
    }
    let last = last.unwrap();
    assert!(
        prefix.contains(last.ip.unwrap()),
        "{:?} not in {prefix}",
        last.ip
    );
    assert_eq!((last.eni_id, last.device_number), (eni.id, 1));
}

#[tokio::test]
async fn an_eni_replaced_at_the_same_index_keeps_its_table_for_the_successor() {
    let node = Node::at(0);
    let d = node.start(&[]).await;
    allocate(&d, 1).await;
    d.grow().await;
    let old = secondary(&node.ec2);
    let old_ip = old.primary_ip.unwrap();
    node.ec2
        .detach_network_interface(&old.attachment.unwrap().id)
        .await
        .unwrap();
    // Before ipamd looks, another ENI of ours is attached at the same index.
    let successor_ip = Ipv4Addr::new(10, 0, 0, 200);
    let successor = node.ec2.add_eni(AddEni {
        description: &format!("aws-K8S-{}", node.ec2.instance),
        primary_ip: successor_ip,
        secondary_ips: &[Ipv4Addr::new(10, 0, 0, 201)],
        tags: &[],
        attach: Some((1, true)),
    });
    let before = node.host.calls().len();
    d.reconcile().await;

    let calls = node.host.calls()[before..].to_vec();
    assert_eq!(
        calls,
        vec![
            format!("teardown eni device 1 ip {old_ip} keeping table"),
            format!("setup eni device 1 ip {successor_ip} table 2 subnet 10.0.0.0/24"),
        ],
        "the old ENI goes first and leaves table 2 to its successor"
    );
    let snapshot = d.pool_snapshot();
    assert!(snapshot.eni(&old.id).is_none());
    assert_eq!(snapshot.eni(&successor).map(|e| e.device_number), Some(1));
}

#[tokio::test(start_paused = true)]
async fn an_eni_whose_link_never_appears_pauses_growth_until_it_does() {
    let node = Node::at(0);
    let d = node.start(&[]).await;
    node.host.missing_links.store(u32::MAX, Ordering::SeqCst);
    allocate(&d, 1).await;
    d.grow().await;
    assert_eq!(node.ec2.enis().len(), 2, "one ENI created");
    assert_eq!(
        d.pool_snapshot().enis().count(),
        1,
        "not usable without a link"
    );

    // Growth is paused, not retried with ENI after ENI.
    d.grow().await;
    d.grow().await;
    assert_eq!(node.ec2.enis().len(), 2, "{:?}", node.ec2.calls());
    for n in 2..=5 {
        allocate(&d, n).await;
    }
    let err = d.handle(add(6)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NoAddresses);
    assert!(
        err.message.contains("setting up ENI") && err.message.contains("pausing growth"),
        "{}",
        err.message
    );

    // The link shows up: the reconciliation adopts the ENI and pods get its addresses.
    node.host.missing_links.store(0, Ordering::SeqCst);
    node.clock.advance(Duration::from_secs(31));
    d.reconcile().await;
    assert_eq!(d.pool_snapshot().enis().count(), 2);
    assert_eq!(allocate(&d, 6).await.device_number, 1);
    assert_eq!(node.ec2.enis().len(), 2, "no ENI beyond the one waited for");
}

#[tokio::test(start_paused = true)]
async fn an_add_the_pool_will_not_grow_for_fails_at_once_naming_the_targets() {
    let node = Node::at(0);
    let d = node
        .start(&[("MINIMUM_IP_TARGET", "2"), ("IPAMD_ADD_WAIT", "25000")])
        .await;
    allocate(&d, 1).await;
    allocate(&d, 2).await;
    // MINIMUM_IP_TARGET=2 is met by the two addresses held, as in the Go CNI: nothing to wait for.
    let started = tokio::time::Instant::now();
    let err = d.handle(add(3)).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the ADD waited for growth that was never coming"
    );
    assert_eq!(err.kind, ErrorKind::NoAddresses);
    assert!(
        err.message.contains("at its targets") && err.message.contains("MINIMUM_IP_TARGET=2"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn an_unreadable_aws_node_checkpoint_stops_ipamd_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    // Where support::config points AWS_VPC_K8S_CNI_BACKING_STORE.
    let checkpoint = state.join("aws-node-ipam.json");
    std::fs::write(
        &checkpoint,
        "{\"version\":\"vpc-cni-ipam/1\",\"allocations\":[",
    )
    .unwrap();
    let ec2 = ec2("t3.medium");
    let err = match try_start(dir.path(), &ec2, &ManualClock::at(0)).await {
        Ok(_) => panic!("started with a truncated checkpoint"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains(&checkpoint.display().to_string()), "{err}");
    assert!(err.contains("cannot be migrated"), "{err}");
}

#[tokio::test]
async fn a_veth_left_without_a_route_is_deleted_after_its_grace_only() {
    let node = Node::at(1_000);
    let d = node.start(&[]).await;
    // A DEL unrouted a pod whose namespace stays; another link has no prefix of ours.
    node.host.leave_veth(40, "eni0123456789a");
    node.host.leave_veth(41, "cali0123");

    assert!(d.sweep_veths().await, "the veth waits out its grace");
    node.clock
        .advance(ipamd::VETH_GRACE - Duration::from_millis(1));
    assert!(d.sweep_veths().await);
    assert!(node.host.deleted_links().is_empty());

    node.clock.advance(Duration::from_millis(1));
    assert!(!d.sweep_veths().await, "nothing waits any more");
    assert_eq!(node.host.deleted_links(), ["delete link #40"]);
}

#[tokio::test]
async fn a_veth_routed_again_before_its_grace_is_kept() {
    let node = Node::at(1_000);
    let d = node.start(&[]).await;
    node.host.leave_veth(40, "eni0123456789a");
    assert!(d.sweep_veths().await);
    // An ADD in progress added its route.
    node.host.idle.lock().unwrap().clear();
    node.clock.advance(ipamd::VETH_GRACE);
    assert!(!d.sweep_veths().await);
    assert!(node.host.deleted_links().is_empty());
}

#[tokio::test]
async fn the_veth_of_a_pod_ipamd_holds_is_kept_until_its_del() {
    let node = Node::at(1_000);
    let d = node.start(&[]).await;
    ipv4_of(&d, 1).await;
    // Pod 1's ADD is wiring its veth (or its route went by another hand than DEL's).
    let name = netops::host_veth_name("eni", "default", "pod1", "container1", "eth0");
    node.host.leave_veth(40, &name);
    assert!(
        !d.sweep_veths().await,
        "a held pod's veth is not a candidate"
    );
    node.clock.advance(ipamd::VETH_GRACE * 2);
    assert!(!d.sweep_veths().await);
    assert!(node.host.deleted_links().is_empty());

    d.handle(del(1)).await.unwrap();
    assert!(d.sweep_veths().await);
    node.clock.advance(ipamd::VETH_GRACE);
    assert!(!d.sweep_veths().await);
    assert_eq!(node.host.deleted_links(), ["delete link #40"]);
}
