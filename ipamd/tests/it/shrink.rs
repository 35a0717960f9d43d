//! Prefix delegation, and the pool shrinking: addresses above target given back, empty ENIs
//! freed (vpc-sim's EC2 in process, hand-driven clock).

use crate::support;

use std::time::Duration;

use support::*;

#[tokio::test]
async fn prefix_delegation_serves_pods_from_a_28() {
    let node = Node::at(0);
    let d = node
        .start(&[
            ("ENABLE_PREFIX_DELEGATION", "true"),
            ("WARM_PREFIX_TARGET", "1"),
        ])
        .await;
    let primary = node.ec2.eni(&node.ec2.primary).unwrap();
    assert_eq!(primary.prefixes.len(), 1, "{primary:?}");
    assert!(primary.secondary_ips.is_empty());
    let prefix = primary.prefixes[0];
    assert_eq!(d.pool_snapshot().counts(pool::Timestamp(0)).total, 16);
    let a = allocate(&d, 1).await;
    assert!(prefix.contains(a.ip.unwrap()), "{:?} not in {prefix}", a.ip);
    // A pod in the prefix leaves no whole free prefix: WARM_PREFIX_TARGET=1 asks for a second.
    d.grow().await;
    assert_eq!(node.ec2.eni(&node.ec2.primary).unwrap().prefixes.len(), 2);
}

#[tokio::test]
async fn addresses_above_warm_ip_target_go_back_after_cooldown() {
    let node = Node::at(1_000_000);
    let d = node.start(&[("WARM_IP_TARGET", "2")]).await;
    assert_eq!(
        node.ec2.eni(&node.ec2.primary).unwrap().secondary_ips.len(),
        2,
        "WARM_IP_TARGET=2 at 0 pods"
    );
    for n in 1..=3 {
        allocate(&d, n).await;
        d.grow().await;
    }
    assert_eq!(
        node.ec2.eni(&node.ec2.primary).unwrap().secondary_ips.len(),
        5,
        "3 pods + 2 warm"
    );
    for n in 1..=3 {
        d.handle(del(n)).await.unwrap();
    }
    d.grow().await;
    assert_eq!(
        node.ec2.eni(&node.ec2.primary).unwrap().secondary_ips.len(),
        5,
        "cooling addresses are kept"
    );
    node.clock.advance(Duration::from_secs(31));
    d.grow().await;
    assert_eq!(
        node.ec2.eni(&node.ec2.primary).unwrap().secondary_ips.len(),
        2,
        "back to the warm target"
    );
    assert_eq!(d.pool_snapshot().counts(clock_now(&node.clock)).total, 2);
}

fn clock_now(clock: &ManualClock) -> pool::Timestamp {
    use pool::Clock;
    clock.now()
}

#[tokio::test]
async fn an_empty_eni_is_freed_once_old_enough_and_the_node_cleaned() {
    let node = Node::at(1_000_000);
    let d = node.start(&[]).await;
    for n in 1..=6 {
        allocate(&d, n).await;
        d.grow().await;
    }
    let enis = node.ec2.enis().len();
    assert!(enis >= 2, "grew to {enis} ENIs");
    for n in 1..=6 {
        d.handle(del(n)).await.unwrap();
    }
    d.grow().await;
    assert_eq!(
        node.ec2.enis().len(),
        enis,
        "nothing freed while addresses cool and ENIs are young"
    );
    node.clock.advance(Duration::from_secs(61));
    for _ in 0..enis {
        d.grow().await;
    }
    assert_eq!(
        node.ec2.enis().len(),
        1,
        "back to the primary ENI: {:?}",
        node.ec2.calls()
    );
    assert_eq!(d.pool_snapshot().enis().count(), 1);
    assert!(
        node.host
            .calls()
            .iter()
            .any(|c| c.starts_with("teardown eni device 1")),
        "{:?}",
        node.host.calls()
    );
    assert!(
        node.ec2
            .calls()
            .iter()
            .any(|c| c.starts_with(cloud::Action::DetachNetworkInterface.wire_name()))
    );
    assert!(
        node.ec2
            .calls()
            .iter()
            .any(|c| c.starts_with(cloud::Action::DeleteNetworkInterface.wire_name()))
    );
}
