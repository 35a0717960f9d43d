//! Our EC2 client against moto, an EC2 implementation we did not write. moto is loose (no limits,
//! no real IMDS), so this only proves the wire: requests we send are understood and answers we
//! get are read. scripts/test.sh starts moto and sets MOTO_ENDPOINT.

#![cfg(feature = "aws")]

use cloud::aws::{AwsEc2, sdk};
use cloud::{CloudErrorKind, Ec2, EniFilter, InstanceTable};

fn moto_client() -> sdk::Client {
    let endpoint = std::env::var("MOTO_ENDPOINT")
        .expect("MOTO_ENDPOINT must name a running moto server (scripts/test.sh starts one)");
    let conf = sdk::Config::builder()
        .behavior_version(sdk::config::BehaviorVersion::latest())
        .region(sdk::config::Region::new("us-west-2"))
        .credentials_provider(sdk::config::Credentials::new(
            "testing", "testing", None, None, "static",
        ))
        .endpoint_url(endpoint)
        .build();
    sdk::Client::from_conf(conf)
}

#[tokio::test]
#[ignore = "needs a moto server: run by scripts/test.sh"]
async fn the_aws_client_speaks_ec2_as_moto_understands_it() {
    let raw = moto_client();
    let vpc = raw
        .create_vpc()
        .cidr_block("10.20.0.0/16")
        .send()
        .await
        .unwrap();
    let vpc_id = vpc.vpc().and_then(|v| v.vpc_id()).unwrap().to_string();
    let subnet = raw
        .create_subnet()
        .vpc_id(&vpc_id)
        .cidr_block("10.20.1.0/24")
        .send()
        .await
        .unwrap();
    let subnet_id = subnet
        .subnet()
        .and_then(|s| s.subnet_id())
        .unwrap()
        .to_string();
    let created = raw
        .create_network_interface()
        .subnet_id(&subnet_id)
        .send()
        .await
        .unwrap();
    let eni_id = created
        .network_interface()
        .and_then(|e| e.network_interface_id())
        .unwrap()
        .to_string();

    let ec2 = AwsEc2::from_client(raw);

    // DescribeInstanceTypes: moto's answer agrees with our embedded table (both come from the
    // same public data, read through two different paths).
    let t3 = ec2.describe_instance_type("t3.medium").await.unwrap();
    assert_eq!(Some(t3), InstanceTable::embedded().get("t3.medium"));
    assert_eq!((t3.max_enis, t3.ipv4_per_eni, t3.nitro), (3, 6, true));

    // DescribeSubnets, with a tag filter on a tag we set.
    let in_vpc = ec2
        .describe_subnets(&[EniFilter::new("vpc-id", &vpc_id)])
        .await
        .unwrap();
    assert_eq!(in_vpc.len(), 1, "{in_vpc:?}");
    let s = &in_vpc[0];
    assert_eq!(
        (s.id.as_str(), s.vpc_id.as_str()),
        (subnet_id.as_str(), vpc_id.as_str())
    );
    assert_eq!(s.cidr.to_string(), "10.20.1.0/24");
    assert!(s.availability_zone.starts_with("us-west-2"), "{s:?}");
    assert!(s.available_ips > 0 && s.available_ips <= 251, "{s:?}");
    let role = [("kubernetes.io/role/cni".to_string(), "1".to_string())].into();
    ec2.create_tags(&subnet_id, &role).await.unwrap();
    let tagged = ec2
        .describe_subnets(&[EniFilter::new("tag:kubernetes.io/role/cni", "1")])
        .await
        .unwrap();
    assert_eq!(tagged.len(), 1, "{tagged:?}");
    assert_eq!(tagged[0].tags, role);

    // DescribeNetworkInterfaces.
    let enis = ec2
        .describe_network_interfaces(std::slice::from_ref(&eni_id))
        .await
        .unwrap();
    assert_eq!(enis.len(), 1);
    let eni = &enis[0];
    assert_eq!(
        (eni.id.as_str(), eni.subnet_id.as_str()),
        (eni_id.as_str(), subnet_id.as_str())
    );
    let primary = eni.primary_ip.expect("primary address");
    assert!(eni.secondary_ips.is_empty());

    // AssignPrivateIpAddresses. moto answers with every address on the ENI rather than only the
    // new ones, so compare as sets.
    let assigned = ec2.assign_private_ips(&eni_id, 3).await.unwrap();
    let after = ec2
        .describe_network_interfaces(std::slice::from_ref(&eni_id))
        .await
        .unwrap();
    assert_eq!(after[0].secondary_ips.len(), 3, "{after:?}");
    for ip in &after[0].secondary_ips {
        assert!(
            assigned.contains(ip),
            "{ip} assigned but not reported: {assigned:?}"
        );
        assert!(ip.octets()[..3] == [10, 20, 1] && *ip != primary);
    }

    // UnassignPrivateIpAddresses.
    let give_back = after[0].secondary_ips[0];
    ec2.unassign_private_ips(&eni_id, &[give_back])
        .await
        .unwrap();
    let after = ec2
        .describe_network_interfaces(std::slice::from_ref(&eni_id))
        .await
        .unwrap();
    assert_eq!(after[0].secondary_ips.len(), 2);
    assert!(!after[0].secondary_ips.contains(&give_back));

    // AWS errors come back classified, with their code.
    let err = ec2
        .describe_network_interfaces(&["eni-0000000000000000f".to_string()])
        .await
        .unwrap_err();
    assert_eq!(err.kind, CloudErrorKind::NotFound, "{err}");
    assert_eq!(
        err.code.as_deref(),
        Some("InvalidNetworkInterfaceID.NotFound")
    );
}
