//! The real aws-sdk-ec2 client, as ipamd uses it (`cloud::aws::AwsEc2`), against the `vpc-sim`
//! binary in loopback mode with a secondary CIDR, subnets in two AZs with tags, and extra
//! security groups: what sim.json says, and that the SDK reads every answer it gets.

use crate::common;

use cloud::aws::{AwsEc2, sdk};
use cloud::{CloudErrorKind, CreateEni, Ec2, EniFilter};
use common::{SimProcess, imds_get, sdk_client};
use sdk::config::retry::RetryConfig;
use sdk::types::{Filter, Tag};

#[tokio::test]
async fn the_sdk_discovers_subnets_by_az_and_tag_and_puts_groups_on_new_enis() {
    let name = testkit::unique("sdk");
    let mut sim = SimProcess::start(
        &name,
        &[
            "--mode",
            "loopback",
            "--nodes",
            "2",
            "--vpc-secondary-cidr",
            "100.64.0.0/16",
            "--subnet",
            "10.0.0.0/24",
            "--subnet",
            "100.64.1.0/24,tag=kubernetes.io/role/cni=1",
            "--subnet",
            "100.64.2.0/24,az=us-west-2b,tag=kubernetes.io/role/cni=1,nodes=1",
            "--security-group",
            "pods",
            "--security-group",
            "pods-b",
        ],
    );
    let f = sim.wait_ready();

    // sim.json: the VPC's CIDRs, each subnet's AZ and tags, the groups, each node's AZ.
    let cidrs: Vec<String> = f.vpc.cidrs.iter().map(|c| c.to_string()).collect();
    assert_eq!(cidrs, ["10.0.0.0/16", "100.64.0.0/16"]);
    let azs: Vec<&str> = f.subnets.iter().map(|s| s.az.as_str()).collect();
    assert_eq!(azs, ["us-west-2a", "us-west-2a", "us-west-2b"]);
    assert!(f.subnets[0].tags.is_empty());
    assert_eq!(
        f.subnets[2]
            .tags
            .get("kubernetes.io/role/cni")
            .map(String::as_str),
        Some("1")
    );
    let (s0, s1, s2) = (
        f.subnets[0].id.clone(),
        f.subnets[1].id.clone(),
        f.subnets[2].id.clone(),
    );
    let group = |name: &str| {
        f.security_groups
            .iter()
            .find(|g| g.name == name)
            .unwrap_or_else(|| panic!("no group {name} in {:?}", f.security_groups))
            .id
            .clone()
    };
    let (pods, pods_b) = (group("pods"), group("pods-b"));
    assert_eq!(f.security_groups.len(), 3, "with the default group");
    let placed: Vec<(&str, &str)> = f
        .nodes
        .iter()
        .map(|n| (n.subnet_id.as_str(), n.az.as_str()))
        .collect();
    assert_eq!(
        placed,
        [(s0.as_str(), "us-west-2a"), (s2.as_str(), "us-west-2b")]
    );

    // IMDS: the node's AZ, the VPC's primary CIDR and all of them.
    let node2 = &f.nodes[1];
    assert_eq!(
        imds_get(
            &node2.imds_endpoint,
            "meta-data/placement/availability-zone"
        ),
        "us-west-2b"
    );
    let mac = format!("meta-data/network/interfaces/macs/{}", node2.mac);
    assert_eq!(
        imds_get(&node2.imds_endpoint, &format!("{mac}/vpc-ipv4-cidr-block")),
        "10.0.0.0/16"
    );
    assert_eq!(
        imds_get(&node2.imds_endpoint, &format!("{mac}/vpc-ipv4-cidr-blocks")),
        "10.0.0.0/16\n100.64.0.0/16"
    );
    assert_eq!(
        imds_get(
            &node2.imds_endpoint,
            &format!("{mac}/subnet-ipv4-cidr-block")
        ),
        "100.64.2.0/24"
    );

    // DescribeSubnets through ipamd's client: the filters subnet discovery uses.
    let raw = sdk_client(&f.ec2_endpoint, RetryConfig::disabled());
    let ec2 = AwsEc2::from_client(raw.clone());
    let ids = |v: &[cloud::Subnet]| v.iter().map(|s| s.id.clone()).collect::<Vec<_>>();
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let in_a = ec2
        .describe_subnets(&[
            EniFilter::new("vpc-id", &f.vpc.id),
            EniFilter::new("availability-zone", "us-west-2a"),
        ])
        .await
        .unwrap();
    assert_eq!(sorted(ids(&in_a)), sorted(vec![s0.clone(), s1.clone()]));
    let first = in_a.iter().find(|s| s.id == s0).unwrap();
    assert_eq!(first.cidr.to_string(), "10.0.0.0/24");
    assert_eq!(
        (first.availability_zone.as_str(), first.vpc_id.as_str()),
        ("us-west-2a", f.vpc.id.as_str())
    );
    assert_eq!(first.available_ips, 251 - 1, "the node's primary address");
    let cni = ec2
        .describe_subnets(&[EniFilter::new("tag-key", "kubernetes.io/role/cni")])
        .await
        .unwrap();
    assert_eq!(sorted(ids(&cni)), sorted(vec![s1.clone(), s2.clone()]));
    let pod_subnet = cni.iter().find(|s| s.id == s1).unwrap();
    assert_eq!(pod_subnet.available_ips, 251);
    assert_eq!(
        pod_subnet
            .tags
            .get("kubernetes.io/role/cni")
            .map(String::as_str),
        Some("1")
    );

    // Security groups through the SDK itself.
    let web = raw
        .create_security_group()
        .group_name("web")
        .description("web servers")
        .vpc_id(&f.vpc.id)
        .send()
        .await
        .unwrap();
    let web = web.group_id().unwrap().to_string();
    let described = raw
        .describe_security_groups()
        .filters(Filter::builder().name("group-name").values("pods*").build())
        .send()
        .await
        .unwrap();
    let mut names: Vec<(&str, &str)> = described
        .security_groups()
        .iter()
        .map(|g| (g.group_name().unwrap(), g.group_id().unwrap()))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [("pods", pods.as_str()), ("pods-b", pods_b.as_str())]
    );

    // An ENI in the pod subnet with both groups, as ipamd creates it for an ENIConfig.
    let request = CreateEni {
        subnet_id: s1.clone(),
        description: "aws-K8S-i-test".into(),
        security_groups: vec![pods.clone(), pods_b.clone()],
        secondary_ips: 2,
        client_token: testkit::unique("token"),
        ..CreateEni::default()
    };
    let eni = ec2.create_network_interface(&request).await.unwrap();
    assert_eq!(eni.security_groups, [pods.clone(), pods_b.clone()]);
    assert!(
        eni.primary_ip.unwrap().octets()[..3] == [100, 64, 1],
        "{eni:?}"
    );
    let again = ec2
        .describe_network_interfaces(std::slice::from_ref(&eni.id))
        .await
        .unwrap();
    assert_eq!(again[0].security_groups, [pods.clone(), pods_b.clone()]);
    let after = ec2
        .describe_subnets(&[EniFilter::new("subnet-id", &s1)])
        .await
        .unwrap();
    assert_eq!(after[0].available_ips, 251 - 3);

    // An unknown group fails as EC2 fails it.
    let err = ec2
        .create_network_interface(&CreateEni {
            security_groups: vec![web, "sg-0123456789abcdef0".into()],
            client_token: testkit::unique("token"),
            ..request.clone()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code.as_deref(), Some("InvalidGroup.NotFound"), "{err}");
    assert_eq!(err.kind, CloudErrorKind::NotFound);

    // An ENI of AZ b attaches to the node in AZ b only.
    let in_b = ec2
        .create_network_interface(&CreateEni {
            subnet_id: s2.clone(),
            client_token: testkit::unique("token"),
            ..CreateEni::default()
        })
        .await
        .unwrap();
    let err = ec2
        .attach_network_interface(&in_b.id, &f.nodes[0].instance_id, 1)
        .await
        .unwrap_err();
    assert_eq!(
        err.code.as_deref(),
        Some("InvalidParameterCombination"),
        "{err}"
    );
    ec2.attach_network_interface(&in_b.id, &node2.instance_id, 1)
        .await
        .unwrap();

    // DeleteTags takes a subnet out of discovery.
    raw.delete_tags()
        .resources(&s1)
        .tags(Tag::builder().key("kubernetes.io/role/cni").build())
        .send()
        .await
        .unwrap();
    let cni = ec2
        .describe_subnets(&[EniFilter::new("tag-key", "kubernetes.io/role/cni")])
        .await
        .unwrap();
    assert_eq!(ids(&cni), [s2]);

    let status = sim.terminate();
    assert!(status.success(), "exit {status}:\n{}", sim.log());
}
