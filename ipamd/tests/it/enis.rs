//! Secondary ENIs with replaced seams: creation, attachment, node setup, reconciliation.

use crate::support;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use cloud::{CloudError, Ec2};
use ipam_proto::{CheckRequest, ErrorKind, Reply, Request};
use support::*;

#[tokio::test]
async fn an_eni_is_created_attached_and_set_up_when_the_primary_runs_low() {
    let node = Node::at(0);
    let d = node.start(&[]).await;
    assert_eq!(
        node.ec2.enis().len(),
        1,
        "5 available on the primary meets WARM_ENI_TARGET=1"
    );

    allocate(&d, 1).await;
    d.grow().await;
    let eni = secondary(&node.ec2);
    let instance = node.ec2.instance.as_str();
    assert_eq!(eni.description, format!("aws-K8S-{instance}"));
    assert_eq!(
        eni.tags
            .get("node.k8s.amazonaws.com/instance_id")
            .map(String::as_str),
        Some(instance)
    );
    assert!(eni.tags.contains_key("node.k8s.amazonaws.com/createdAt"));
    assert_eq!(
        eni.security_groups,
        node.ec2.eni(&node.ec2.primary).unwrap().security_groups,
        "the primary ENI's groups"
    );
    let attachment = eni.attachment.clone().expect("attached");
    assert_eq!(
        (attachment.device_index, attachment.delete_on_termination),
        (1, true)
    );
    assert_eq!(eni.secondary_ips.len(), 5);
    let eni_ip = eni.primary_ip.unwrap();
    assert!(
        node.host.calls().contains(&format!(
            "setup eni device 1 ip {eni_ip} table 2 subnet 10.0.0.0/24"
        )),
        "{:?}",
        node.host.calls()
    );
    assert_eq!(d.pool_snapshot().counts(pool::Timestamp(0)).total, 10);

    // Once the primary's addresses are taken, pods get the new ENI's, with its table.
    let mut on_secondary = None;
    for n in 2..=7 {
        let a = allocate(&d, n).await;
        if a.eni_id == eni.id {
            on_secondary = Some(a);
        }
    }
    let a = on_secondary.expect("a pod on the new ENI");
    assert_eq!((a.device_number, a.route_table), (1, 2));
}

#[tokio::test]
async fn a_link_that_appears_late_is_waited_for() {
    let node = Node::at(0);
    let d = node.start(&[]).await;
    node.host.missing_links.store(3, Ordering::SeqCst);
    allocate(&d, 1).await;
    d.grow().await;
    assert_eq!(d.pool_snapshot().enis().count(), 2);
    assert_eq!(node.host.missing_links.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_eni_detached_in_ec2_leaves_the_pool_and_the_node_and_comes_back() {
    let node = Node::at(0);
    // MAX_ENI=2 so the reconciliation cannot replace the detached ENI with a new one.
    let d = node.start(&[("MAX_ENI", "2")]).await;
    for n in 1..=7 {
        allocate(&d, n).await;
        d.grow().await;
    }
    let eni = secondary(&node.ec2);
    let eni_ip = eni.primary_ip.unwrap();
    let victim = (1..=7)
        .find(|n| {
            d.pool_snapshot()
                .get(&pool_key(*n))
                .is_some_and(|a| a.eni_id == eni.id)
        })
        .expect("a pod on the secondary ENI");

    let attachment = eni.attachment.unwrap();
    node.ec2
        .detach_network_interface(&attachment.id)
        .await
        .unwrap();
    d.reconcile().await;
    assert_eq!(d.pool_snapshot().enis().count(), 1);
    assert!(
        node.host
            .calls()
            .contains(&format!("teardown eni device 1 ip {eni_ip}")),
        "{:?}",
        node.host.calls()
    );
    let gone = d
        .handle(Request::Check(CheckRequest { key: key(victim) }))
        .await
        .unwrap_err();
    assert_eq!(
        gone.kind,
        ErrorKind::UnknownAttachment,
        "the pod lost its address with the ENI"
    );

    node.ec2
        .attach_network_interface(&eni.id, &node.ec2.instance, 1)
        .await
        .unwrap();
    d.reconcile().await;
    assert_eq!(d.pool_snapshot().enis().count(), 2, "adopted again");
    let setups = node
        .host
        .calls()
        .iter()
        .filter(|c| c.starts_with("setup eni device 1"))
        .count();
    assert_eq!(setups, 2, "{:?}", node.host.calls());
}

#[tokio::test]
async fn an_eni_someone_else_manages_is_left_alone_but_takes_a_slot() {
    let node = Node::at(0);
    let theirs = node.ec2.add_eni(AddEni {
        description: "a database's interface",
        primary_ip: Ipv4Addr::new(10, 0, 0, 99),
        secondary_ips: &[],
        tags: &[],
        attach: Some((1, false)),
    });
    let d = node.start(&[]).await;
    assert!(d.pool_snapshot().eni(&theirs).is_none());
    assert_eq!(d.limits().max_enis, 2);
    // A new ENI of ours goes to the next free device index.
    allocate(&d, 1).await;
    d.grow().await;
    let ours = node
        .ec2
        .enis()
        .into_iter()
        .find(|e| e.description.starts_with("aws-K8S-"))
        .unwrap();
    assert_eq!(ours.attachment.unwrap().device_index, 2);
    assert!(
        !node.host.calls().iter().any(|c| c.contains("10.0.0.99")),
        "{:?}",
        node.host.calls()
    );
}

#[tokio::test]
async fn an_eni_that_cannot_be_attached_is_deleted_and_the_reason_kept() {
    let dir = tempfile::tempdir().unwrap();
    let ec2 = ec2("t3.medium");
    let d = start(dir.path(), &ec2, &ManualClock::at(0)).await;
    ec2.fail_next(
        cloud::Action::AttachNetworkInterface,
        vec![CloudError::from_code(
            cloud::Action::AttachNetworkInterface.wire_name(),
            "AttachmentLimitExceeded",
            "Interface count 4 exceeds the limit for t3.medium",
        )],
    );
    allocate(&d, 1).await;
    d.grow().await;
    assert_eq!(
        ec2.enis().len(),
        1,
        "the unattached ENI was deleted: {:?}",
        ec2.calls()
    );
    assert!(
        ec2.calls()
            .iter()
            .any(|c| c.starts_with(cloud::Action::DeleteNetworkInterface.wire_name()))
    );
    // Exhaust the primary: the ADD's error carries the last failure.
    for n in 2..=5 {
        allocate(&d, n).await;
    }
    ec2.fail_next(
        cloud::Action::AttachNetworkInterface,
        vec![CloudError::from_code(
            cloud::Action::AttachNetworkInterface.wire_name(),
            "AttachmentLimitExceeded",
            "limit",
        )],
    );
    d.grow().await;
    let err = d.handle(add(6)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NoAddresses);
    assert!(
        err.message.contains("AttachmentLimitExceeded"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn a_full_node_names_the_max_eni_limit() {
    let dir = tempfile::tempdir().unwrap();
    // t3.nano: 2 ENIs x 2 IPv4, one secondary each.
    let ec2 = ec2("t3.nano");
    let d = try_start(dir.path(), &ec2, &ManualClock::at(0))
        .await
        .unwrap();
    allocate(&d, 1).await;
    d.grow().await;
    allocate(&d, 2).await;
    d.grow().await;
    let err = d.handle(add(3)).await.unwrap_err();
    assert!(
        err.message
            .contains("the max ENI limit is already reached (2 ENIs"),
        "{}",
        err.message
    );
    match d.handle(Request::Status).await.unwrap() {
        Reply::Status(s) => assert!(!s.ready && s.reason.unwrap().contains("max ENI limit")),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_cold_add_waits_for_the_new_eni_instead_of_failing() {
    let node = Node::at(0);
    let d = Arc::new(node.start(&[("IPAMD_ADD_WAIT", "5000")]).await);
    // Take every address while no controller runs, so the pool is empty and must grow.
    for n in 1..=5 {
        allocate(&d, n).await;
    }
    assert_eq!(d.pool_snapshot().counts(pool::Timestamp(0)).available, 0);
    let controller = {
        let d = Arc::clone(&d);
        tokio::spawn(async move {
            loop {
                d.kicked().await;
                d.grow().await;
            }
        })
    };
    let a = allocate(&d, 6).await;
    assert_eq!(a.device_number, 1, "served from the ENI created for it");
    controller.abort();
}

/// The present as milliseconds: leak ages are read on the daemon's node.clock.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// An ENI left unattached in the node's subnet, at 10.0.0.`ip`; returns its id.
fn leak(ec2: &Cloud, description: &str, tags: &[(&str, &str)], ip: u8) -> String {
    ec2.add_eni(AddEni {
        description,
        primary_ip: Ipv4Addr::new(10, 0, 0, ip),
        secondary_ips: &[],
        tags,
        attach: None,
    })
}

#[tokio::test]
async fn leaked_enis_are_deleted_when_old_enough_and_ours() {
    let dir = tempfile::tempdir().unwrap();
    let ec2 = ec2("t3.medium");
    let ago = |minutes: u64| {
        humantime::format_rfc3339_seconds(
            std::time::SystemTime::now() - std::time::Duration::from_secs(minutes * 60),
        )
        .to_string()
    };
    let (old, young) = (ago(10), ago(1));
    let ours = "aws-K8S-i-0someothernode";
    let inst = ("node.k8s.amazonaws.com/instance_id", "i-0someothernode");
    let cluster = |c: &'static str| ("cluster.k8s.amazonaws.com/name", c);
    let eni_old = leak(
        &ec2,
        ours,
        &[
            inst,
            ("node.k8s.amazonaws.com/createdAt", &old),
            cluster("prod"),
        ],
        200,
    );
    let eni_young = leak(
        &ec2,
        ours,
        &[
            inst,
            ("node.k8s.amazonaws.com/createdAt", &young),
            cluster("prod"),
        ],
        201,
    );
    let eni_unstamped = leak(&ec2, ours, &[inst, cluster("prod")], 202);
    let eni_not_ours = leak(
        &ec2,
        "a load balancer",
        &[
            inst,
            ("node.k8s.amazonaws.com/createdAt", &old),
            cluster("prod"),
        ],
        203,
    );
    let eni_other_cluster = leak(
        &ec2,
        ours,
        &[
            inst,
            ("node.k8s.amazonaws.com/createdAt", &old),
            cluster("dev"),
        ],
        204,
    );
    let host = Arc::new(RecordingHost::default());
    let d = start_with(
        dir.path(),
        &ec2,
        &ManualClock::at(now_ms()),
        &host,
        &[("CLUSTER_NAME", "prod")],
    )
    .await
    .unwrap();

    let report = d.clean_leaked_enis().await;
    assert_eq!((report.deleted, report.spared), (1, 2), "{report:?}");
    let left: Vec<String> = ec2.enis().into_iter().map(|e| e.id).collect();
    assert!(!left.contains(&eni_old));
    for kept in [
        &eni_young,
        &eni_unstamped,
        &eni_not_ours,
        &eni_other_cluster,
        &ec2.primary,
    ] {
        assert!(left.contains(kept), "{kept} was deleted");
    }
    let stamped = ec2.eni(&eni_unstamped).unwrap();
    assert!(
        stamped
            .tags
            .contains_key("node.k8s.amazonaws.com/createdAt"),
        "stamped for next time"
    );
}

#[tokio::test]
async fn new_enis_carry_the_cluster_and_additional_tags() {
    let node = Node::at(0);
    let d = node
        .start(&[
            ("CLUSTER_NAME", "prod"),
            (
                "ADDITIONAL_ENI_TAGS",
                r#"{"team":"net","node.k8s.amazonaws.com/instance_id":"forged"}"#,
            ),
        ])
        .await;
    allocate(&d, 1).await;
    d.grow().await;
    let tags = secondary(&node.ec2).tags;
    assert_eq!(
        tags.get("cluster.k8s.amazonaws.com/name")
            .map(String::as_str),
        Some("prod")
    );
    assert_eq!(
        tags.get("eks:eni:owner").map(String::as_str),
        Some("amazon-vpc-cni")
    );
    assert_eq!(tags.get("team").map(String::as_str), Some("net"));
    assert_eq!(
        tags.get("node.k8s.amazonaws.com/instance_id")
            .map(String::as_str),
        Some(node.ec2.instance.as_str()),
        "a reserved key in ADDITIONAL_ENI_TAGS is not applied"
    );
}
