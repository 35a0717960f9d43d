//! ipamd and the scheduler, with replaced seams (vpc-sim's EC2 in process; the cluster as views the test
//! sends; the Events the daemon records read from its queue): per-node settings, the Events
//! a failure raises, pending pods, a cordon, and the capacity it publishes. The same against a
//! real API server, kubelet and scheduler is tests/tests/it/kube_aware.rs on kube-in-a-box.

use crate::support;

use std::collections::BTreeMap;

use cloud::CloudError;
use cluster::{ApiState, ClusterView, EventKind, NodeFacts, PodFacts, Regarding};
use ipam_proto::{ErrorKind, NoAddressCause};
use support::*;

const NODE: &str = "ip-10-0-0-10.us-west-2.compute.internal";

fn view(annotations: &[(&str, &str)], pods: &[u32], unschedulable: bool) -> ClusterView {
    ClusterView {
        api: ApiState::Connected,
        node_name: Some(NODE.into()),
        node: Some(NodeFacts {
            name: NODE.into(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (format!("vpc-cni.io/{k}"), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
            unschedulable,
            ..Default::default()
        }),
        eni_configs: None,
        eni_configs_error: None,
        pods: Some(
            pods.iter()
                .map(|n| PodFacts {
                    namespace: "default".into(),
                    name: format!("pod{n}"),
                    uid: format!("uid-{n}"),
                    ..Default::default()
                })
                .collect(),
        ),
    }
}

#[tokio::test]
async fn a_pod_without_an_address_gets_one_event_naming_the_eni_limit() {
    let node = Node::at(0);
    node.cluster
        .send_replace(view(&[("MAX_ENI", "1")], &[1, 2, 3, 4, 5, 6], false));
    // t3.medium: 3 ENIs of 6 addresses, 5 for pods; the node allows one ENI.
    let d = node.start(&[]).await;
    assert_eq!(d.capacity(), Some(5));
    for n in 1..=5 {
        allocate(&d, n).await;
    }
    for _ in 0..3 {
        let err = d.handle(add(6)).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::NoAddresses);
        assert_eq!(
            err.cause,
            Some(NoAddressCause::EniLimit),
            "the reply carries the cause the Event names"
        );
    }
    let events = node.events();
    assert_eq!(
        events.len(),
        3,
        "one per failed ADD; kube-rs counts them as one series"
    );
    let e = &events[0];
    assert_eq!(
        e.regarding,
        Regarding::Pod {
            namespace: "default".into(),
            name: "pod6".into(),
            uid: "uid-6".into(),
        },
        "the uid comes from the pods ipamd follows when the runtime sends none"
    );
    assert_eq!(
        (e.kind, e.reason.as_str(), e.action.as_str()),
        (EventKind::Warning, "FailedAssignIP", "EniLimit")
    );
    assert!(e.note.contains("ENI limit 1 of t3.medium"), "{}", e.note);
    assert!(
        events.iter().all(|x| x == e),
        "the same Event each time: {events:?}"
    );

    // The node's limit lifted: the capacity follows, and pod 6 is served.
    node.cluster.send_replace(view(&[], &[6], false));
    d.cluster_changed();
    assert_eq!(d.capacity(), Some(15));
    d.grow().await;
    allocate(&d, 6).await;
}

#[tokio::test]
async fn node_settings_apply_live_and_an_invalid_one_is_refused_once() {
    let node = Node::at(0);
    node.cluster.send_replace(view(&[], &[], false));
    let d = node.start(&[]).await;
    assert_eq!(d.targets().warm_ip, 0);

    node.cluster.send_replace(view(
        &[("WARM_IP_TARGET", "2"), ("MINIMUM_IP_TARGET", "many")],
        &[],
        false,
    ));
    d.cluster_changed();
    d.cluster_changed();
    let t = d.targets();
    assert_eq!(
        (t.warm_ip, t.minimum_ip),
        (2, 0),
        "the environment's MINIMUM_IP_TARGET stays"
    );
    let events = node.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].reason, "InvalidSetting");
    assert_eq!(events[0].regarding, Regarding::Node { name: NODE.into() });
    assert!(
        events[0]
            .note
            .contains("vpc-cni.io/MINIMUM_IP_TARGET=\"many\""),
        "{}",
        events[0].note
    );
    d.grow().await;
    let v = d.view();
    assert_eq!(
        v.pool.counts(v.now).available,
        2,
        "converged to the node's WARM_IP_TARGET"
    );

    node.cluster.send_replace(view(&[], &[], false));
    d.cluster_changed();
    assert_eq!(
        d.targets().warm_ip,
        0,
        "removing the annotation restores the environment's"
    );
}

#[tokio::test]
async fn pending_pods_are_grown_for_and_a_cordon_drains_the_pool() {
    let node = Node::at(0);
    // t3.medium, WARM_IP_TARGET=1; four pods bound to the node and not started yet.
    node.cluster.send_replace(view(&[], &[1, 2, 3, 4], false));
    let d = node
        .start(&[("WARM_IP_TARGET", "1"), ("IP_COOLDOWN_PERIOD", "0")])
        .await;
    assert_eq!(d.pending_pods(), 4);
    let c = d.view().pool.counts(d.view().now);
    assert_eq!(c.available, 5, "a burst fills the ENI: {c:?}");
    for n in 1..=4 {
        allocate(&d, n).await;
    }
    assert_eq!(d.pending_pods(), 0);

    node.cluster.send_replace(view(&[], &[1, 2, 3, 4], true));
    d.cluster_changed();
    assert!(d.draining());
    node.clock.advance(std::time::Duration::from_secs(60));
    d.grow().await;
    let c = d.view().pool.counts(d.view().now);
    assert_eq!((c.assigned, c.available), (4, 0), "{c:?}");
}

#[tokio::test]
async fn a_refused_permission_is_an_event_on_ipamds_own_pod() {
    let node = Node::at(0);
    node.cluster.send_replace(view(&[], &[], false));
    node.ec2.fail_next(
        cloud::Action::AssignPrivateIpAddresses,
        vec![CloudError::from_code(
            cloud::Action::AssignPrivateIpAddresses.wire_name(),
            "UnauthorizedOperation",
            "You are not authorized to perform this operation.",
        )],
    );
    let _d = node
        .start(&[
            ("MY_POD_NAMESPACE", "kube-system"),
            ("MY_POD_NAME", "vpc-cni-abcde"),
        ])
        .await;
    let events = node.events();
    let e = events
        .iter()
        .find(|e| e.reason == "MissingIAMPermissions")
        .unwrap_or_else(|| panic!("{events:?}"));
    assert_eq!(
        e.regarding,
        Regarding::Pod {
            namespace: "kube-system".into(),
            name: "vpc-cni-abcde".into(),
            uid: String::new(),
        }
    );
    assert_eq!(
        e.action,
        cloud::Action::AssignPrivateIpAddresses.wire_name()
    );
}
