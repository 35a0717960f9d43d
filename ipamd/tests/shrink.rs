//! Prefix delegation, and the pool shrinking: addresses above target given back, empty ENIs
//! freed (fake EC2, hand-driven clock).

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::*;

#[tokio::test]
async fn prefix_delegation_serves_pods_from_a_28() {
    let dir = tempfile::tempdir().unwrap();
    let ec2 = ec2(6, "10.0.0.0/24");
    let host = Arc::new(RecordingHost::default());
    let d = start_t3_medium(
        dir.path(),
        &ec2,
        &host,
        &[
            ("ENABLE_PREFIX_DELEGATION", "true"),
            ("WARM_PREFIX_TARGET", "1"),
        ],
    )
    .await;
    let primary = ec2.eni(ENI).unwrap();
    assert_eq!(primary.prefixes.len(), 1, "{primary:?}");
    assert!(primary.secondary_ips.is_empty());
    let prefix = primary.prefixes[0];
    assert_eq!(d.pool_snapshot().counts(pool::Timestamp(0)).total, 16);
    let a = allocate(&d, 1).await;
    assert!(prefix.contains(a.ip), "{} not in {prefix}", a.ip);
    // A pod in the prefix leaves no whole free prefix: WARM_PREFIX_TARGET=1 asks for a second.
    d.grow().await;
    assert_eq!(ec2.eni(ENI).unwrap().prefixes.len(), 2);
}

#[tokio::test]
async fn addresses_above_warm_ip_target_go_back_after_cooldown() {
    let dir = tempfile::tempdir().unwrap();
    let ec2 = ec2(6, "10.0.0.0/24");
    let clock = ManualClock::at(1_000_000);
    let host = Arc::new(RecordingHost::default());
    let d = start_with(
        dir.path(),
        &ec2,
        &clock,
        "t3.medium",
        &host,
        &[("WARM_IP_TARGET", "2")],
    )
    .await
    .unwrap();
    assert_eq!(
        ec2.eni(ENI).unwrap().secondary_ips.len(),
        2,
        "WARM_IP_TARGET=2 at 0 pods"
    );
    for n in 1..=3 {
        allocate(&d, n).await;
        d.grow().await;
    }
    assert_eq!(
        ec2.eni(ENI).unwrap().secondary_ips.len(),
        5,
        "3 pods + 2 warm"
    );
    for n in 1..=3 {
        d.handle(del(n)).await.unwrap();
    }
    d.grow().await;
    assert_eq!(
        ec2.eni(ENI).unwrap().secondary_ips.len(),
        5,
        "cooling addresses are kept"
    );
    clock.advance(Duration::from_secs(31));
    d.grow().await;
    assert_eq!(
        ec2.eni(ENI).unwrap().secondary_ips.len(),
        2,
        "back to the warm target"
    );
    assert_eq!(d.pool_snapshot().counts(clock_now(&clock)).total, 2);
}

fn clock_now(clock: &ManualClock) -> pool::Timestamp {
    use pool::Clock;
    clock.now()
}

#[tokio::test]
async fn an_empty_eni_is_freed_once_old_enough_and_the_node_cleaned() {
    let dir = tempfile::tempdir().unwrap();
    let ec2 = ec2(6, "10.0.0.0/24");
    let clock = ManualClock::at(1_000_000);
    let host = Arc::new(RecordingHost::default());
    let d = start_with(dir.path(), &ec2, &clock, "t3.medium", &host, &[])
        .await
        .unwrap();
    for n in 1..=6 {
        allocate(&d, n).await;
        d.grow().await;
    }
    let enis = ec2.enis().len();
    assert!(enis >= 2, "grew to {enis} ENIs");
    for n in 1..=6 {
        d.handle(del(n)).await.unwrap();
    }
    d.grow().await;
    assert_eq!(
        ec2.enis().len(),
        enis,
        "nothing freed while addresses cool and ENIs are young"
    );
    clock.advance(Duration::from_secs(61));
    for _ in 0..enis {
        d.grow().await;
    }
    assert_eq!(
        ec2.enis().len(),
        1,
        "back to the primary ENI: {:?}",
        ec2.calls()
    );
    assert_eq!(d.pool_snapshot().enis().count(), 1);
    assert!(
        host.calls()
            .iter()
            .any(|c| c.starts_with("teardown eni device 1")),
        "{:?}",
        host.calls()
    );
    assert!(
        ec2.calls()
            .iter()
            .any(|c| c.starts_with("DetachNetworkInterface"))
    );
    assert!(
        ec2.calls()
            .iter()
            .any(|c| c.starts_with("DeleteNetworkInterface"))
    );
}
