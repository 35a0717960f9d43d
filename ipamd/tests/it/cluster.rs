//! ipamd reading the cluster, with replaced seams (vpc-sim's EC2 in process; the cluster as views the test
//! sends): custom networking with ENIConfigs, subnet discovery, and serving without the API
//! server. The same behaviour against a real API server is tested on kube-in-a-box.

use crate::support;

use std::collections::BTreeMap;
use std::time::SystemTime;

use cluster::{ApiState, ClusterView, EniConfigSpec, EniConfigs, NodeFacts};
use ipam_proto::{ErrorKind, Reply, Request};
use ipnetwork::Ipv4Network;
use support::*;

const NODE: &str = "ip-10-0-0-10.us-west-2.compute.internal";
const CUSTOM: (&str, &str) = ("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "true");

fn spec(subnet: &str, groups: &[&str]) -> Result<EniConfigSpec, String> {
    Ok(EniConfigSpec {
        subnet: subnet.into(),
        security_groups: groups.iter().map(|g| g.to_string()).collect(),
    })
}

/// The cluster as the API server shows it: this node labelled with ENIConfig `name`.
fn seen(name: &str, configs: EniConfigs) -> ClusterView {
    ClusterView {
        api: ApiState::Connected,
        node_name: Some(NODE.into()),
        node: Some(NodeFacts {
            name: NODE.into(),
            labels: BTreeMap::from([("k8s.amazonaws.com/eniConfig".into(), name.into())]),
            ..Default::default()
        }),
        eni_configs: Some(configs),
        eni_configs_error: None,
        pods: None,
    }
}

/// What the pod subnets' ENIConfigs name: subnets and a security group of the VPC.
struct PodNet {
    /// 100.64.1.0/24.
    a: String,
    /// 100.64.2.0/24.
    b: String,
    /// The group of `a`'s ENIConfig.
    group_a: String,
}

fn two_zones(p: &PodNet) -> EniConfigs {
    BTreeMap::from([
        ("az-a".into(), spec(&p.a, &[&p.group_a])),
        ("az-b".into(), spec(&p.b, &[])),
    ])
}

/// A node whose VPC has a second CIDR for pods, with two subnets in the node's AZ.
fn node_with_pod_subnets() -> (Node, PodNet) {
    let node = Node::at(0);
    node.ec2.add_vpc_cidr("100.64.0.0/16");
    let pods = PodNet {
        a: node.ec2.add_subnet("100.64.1.0/24", &[]),
        b: node.ec2.add_subnet("100.64.2.0/24", &[]),
        group_a: node.ec2.add_security_group("pods-a"),
    };
    (node, pods)
}

fn in_cidr(ip: std::net::Ipv4Addr, cidr: &str) -> bool {
    cidr.parse::<Ipv4Network>().unwrap().contains(ip)
}

#[tokio::test]
async fn custom_networking_puts_enis_in_the_eniconfigs_subnet_and_no_pod_on_the_primary() {
    let (node, pods) = node_with_pod_subnets();
    node.cluster.send_replace(seen("az-a", two_zones(&pods)));
    let d = node.start(&[CUSTOM]).await;
    // t3.medium: (3 ENIs - 1) x (6 - 1) + 2.
    assert_eq!(d.limits().max_pods, 12);
    assert_eq!(
        d.capacity(),
        Some(10),
        "the primary ENI's addresses are not the pods'"
    );
    let eni = secondary(&node.ec2);
    assert_eq!(eni.subnet_id, pods.a, "{:?}", node.ec2.calls());
    assert_eq!(eni.security_groups, std::slice::from_ref(&pods.group_a));
    for n in 1..=5 {
        let a = allocate(&d, n).await;
        assert_eq!(a.eni_id, eni.id, "pod {n} on the ENIConfig's ENI");
        assert!(in_cidr(a.ip.unwrap(), "100.64.1.0/24"), "{:?}", a.ip);
    }
    let view = d.view();
    assert!(
        view.pool.is_excluded(&node.ec2.primary),
        "the primary ENI carries no pods"
    );
    assert_eq!(view.cluster.eni_config.as_deref(), Some("az-a"));
    assert_eq!(
        view.placements.get(&eni.id).map(String::as_str),
        Some("custom networking: ENIConfig \"az-a\"")
    );

    // Relabelled to an ENIConfig without groups: the next ENI (WARM_ENI_TARGET=1 wants one
    // now that the first is full) goes to its subnet with the primary ENI's groups.
    node.cluster.send_replace(seen("az-b", two_zones(&pods)));
    d.cluster_changed();
    d.grow().await;
    let b = node
        .ec2
        .enis()
        .into_iter()
        .find(|e| e.subnet_id == pods.b)
        .expect("the relabelled node's next ENI is in the other ENIConfig's subnet");
    assert_eq!(
        b.security_groups,
        node.ec2.eni(&node.ec2.primary).unwrap().security_groups
    );
}

#[tokio::test]
async fn a_missing_eniconfig_is_named_in_the_add_error_and_status_until_it_is_created() {
    let (node, pods) = node_with_pod_subnets();
    node.cluster.send_replace(seen("az-c", two_zones(&pods)));
    let d = node.start(&[CUSTOM]).await;
    assert_eq!(node.ec2.enis().len(), 1, "no ENI without an ENIConfig");

    let err = d.handle(add(1)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NoAddresses);
    assert!(
        err.message.contains("ENIConfig \"az-c\"") && err.message.contains("does not exist"),
        "{}",
        err.message
    );
    let Reply::Status(status) = d.handle(Request::Status).await.unwrap() else {
        panic!("a status reply");
    };
    assert!(!status.ready);
    assert!(
        status
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("az-c"),
        "{status:?}"
    );

    // The object is created: the next round creates the ENI and pods get addresses.
    let mut configs = two_zones(&pods);
    configs.insert("az-c".into(), spec(&pods.b, &[]));
    node.cluster.send_replace(seen("az-c", configs));
    d.cluster_changed();
    d.grow().await;
    let a = allocate(&d, 1).await;
    assert!(in_cidr(a.ip.unwrap(), "100.64.2.0/24"), "{:?}", a.ip);
}

#[tokio::test]
async fn an_eniconfig_naming_an_unknown_subnet_is_named_and_growth_waits_for_a_change() {
    let (node, pods) = node_with_pod_subnets();
    let configs = BTreeMap::from([("az-a".into(), spec("subnet-nope", &[]))]);
    node.cluster.send_replace(seen("az-a", configs));
    let d = node.start(&[CUSTOM]).await;
    let err = d.handle(add(1)).await.unwrap_err();
    let unknown = format!(
        "names subnet subnet-nope, which is not a subnet of the node's VPC {}",
        node.ec2.vpc
    );
    assert!(err.message.contains(&unknown), "{}", err.message);
    assert!(d.view().growth_paused_until.is_some(), "no retry storm");

    node.cluster.send_replace(seen("az-a", two_zones(&pods)));
    d.cluster_changed();
    assert!(
        d.view().growth_paused_until.is_none(),
        "a change ends the pause"
    );
    d.grow().await;
    assert_eq!(secondary(&node.ec2).subnet_id, pods.a);
}

#[tokio::test]
async fn without_an_api_server_custom_networking_waits_and_says_for_what() {
    let (node, _) = node_with_pod_subnets();
    node.cluster.send_replace(ClusterView {
        api: ApiState::Failing {
            error: "watching node: connection refused".into(),
            since: SystemTime::now(),
        },
        node_name: Some(NODE.into()),
        node: None,
        eni_configs: None,
        eni_configs_error: None,
        pods: None,
    });
    let d = node.start(&[CUSTOM]).await;
    d.track_waits();
    let cluster = d.view().cluster;
    assert!(
        cluster
            .waiting
            .as_deref()
            .unwrap_or_default()
            .starts_with("an answer from the Kubernetes API server since")
            && cluster
                .waiting
                .as_deref()
                .unwrap_or_default()
                .contains("deadline 30s"),
        "{cluster:?}"
    );
    assert!(cluster.api.starts_with("failing since"), "{cluster:?}");
    let err = d.handle(add(1)).await.unwrap_err();
    assert!(
        err.message
            .contains("waiting for the Kubernetes API server"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn without_custom_networking_an_unreachable_api_server_changes_nothing() {
    let node = Node::at(0);
    node.cluster.send_replace(ClusterView {
        api: ApiState::Failing {
            error: "connection refused".into(),
            since: SystemTime::now(),
        },
        node_name: Some(NODE.into()),
        node: None,
        eni_configs: None,
        eni_configs_error: None,
        pods: None,
    });
    let d = node.start(&[]).await;
    allocate(&d, 1).await;
    d.track_waits();
    assert_eq!(d.view().cluster.waiting, None);
}

#[tokio::test]
async fn subnet_discovery_takes_the_tagged_subnet_with_the_most_free_addresses() {
    let node = Node::at(0);
    let role = "kubernetes.io/role/cni";
    node.ec2.add_vpc_cidr("100.64.0.0/16");
    node.ec2.add_subnet("100.64.1.0/26", &[(role, "1")]);
    let big = node.ec2.add_subnet("100.64.2.0/23", &[(role, "1")]);
    node.ec2.add_subnet("100.64.4.0/24", &[(role, "1")]);
    node.ec2.add_subnet("100.64.8.0/22", &[(role, "0")]);
    let d = node.start(&[]).await;
    allocate(&d, 1).await;
    d.grow().await;
    let eni = secondary(&node.ec2);
    assert_eq!(eni.subnet_id, big, "{:?}", node.ec2.calls());
    let why = d
        .view()
        .placements
        .get(&eni.id)
        .cloned()
        .unwrap_or_default();
    assert!(
        why.starts_with("subnet discovery: tagged kubernetes.io/role/cni=1"),
        "{why}"
    );

    // Off: the node's subnet, whatever is tagged.
    let plain = Node::at(0);
    plain.ec2.add_vpc_cidr("100.64.0.0/16");
    plain.ec2.add_subnet("100.64.2.0/23", &[(role, "1")]);
    let d = plain.start(&[("ENABLE_SUBNET_DISCOVERY", "false")]).await;
    allocate(&d, 1).await;
    d.grow().await;
    assert_eq!(secondary(&plain.ec2).subnet_id, plain.ec2.subnet);
}
