//! IPv6 over the EC2 Query API and IMDS, in-process: the wire shapes (checked element by
//! element and read back by the real aws-sdk-ec2 client), the errors, the limits, and what
//! IMDS shows; and an IPv4-only simulator that stays free of IPv6. Last, ipamd's own cloud seam
//! (`cloud::aws` behind `cloud::throttle`, and `cloud`'s IMDS reading) against all of it.

use crate::common;

use std::net::Ipv6Addr;

use axum::body::Body;
use axum::http::Request;
use cloud::aws::{AwsEc2, AwsImds, sdk};
use cloud::throttle::{ThrottlePolicy, Throttled};
use cloud::{CloudErrorKind, Ec2};
use common::{Harness, Reply, sdk_client, topology};
use ipnetwork::Ipv6Network;
use sdk::config::retry::RetryConfig;
use sdk::error::ProvideErrorMetadata;
use tower::ServiceExt;

/// One t3.medium node (6 IPv6 per ENI, Nitro) and a sim.big node in a dual-stack VPC.
fn dual() -> Harness {
    let mut t = topology("t3.medium", &["10.0.0.0/24", "10.0.1.0/24"], 1);
    t.ipv6 = true;
    t.vpc_ipv6_cidr = Some("2001:db8:5:1200::/56".parse().unwrap());
    Harness::new(t, 0)
}

/// GET `path` from the instance's IMDS router with a fresh token: (status, body).
async fn imds(h: &Harness, instance: &str, path: &str) -> (u16, String) {
    let r = h.imds(instance);
    let tok = Reply::from(
        r.clone()
            .oneshot(
                Request::put("/latest/api/token")
                    .header("x-aws-ec2-metadata-token-ttl-seconds", "60")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap(),
    )
    .await
    .body;
    let reply = Reply::from(
        r.oneshot(
            Request::get(format!("/latest/{path}"))
                .header("x-aws-ec2-metadata-token", tok)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap(),
    )
    .await;
    (reply.status, reply.body)
}

fn texts(items: Vec<&common::Node>) -> Vec<String> {
    items.iter().map(|n| n.text.clone()).collect()
}

#[tokio::test]
async fn subnets_show_their_64_and_enis_their_ipv6_in_ec2_shape() {
    let h = dual();
    let (_, eni) = h.instance(0);
    let x = h
        .ok(&[("Action", cloud::Action::DescribeSubnets.wire_name())])
        .await;
    let subnets = x.items("subnetSet");
    assert_eq!(subnets.len(), 2);
    for s in subnets {
        // The Nth subnet created has the Nth /64 (EC2 lists them by id, not in that order).
        let i = (0..2)
            .find(|i| h.subnet(*i) == s.text_at("subnetId"))
            .unwrap();
        let assoc = s.items("ipv6CidrBlockAssociationSet");
        assert_eq!(assoc.len(), 1);
        assert_eq!(
            assoc[0].text_at("ipv6CidrBlock"),
            format!("2001:db8:5:120{i}::/64")
        );
        assert!(
            assoc[0]
                .text_at("associationId")
                .starts_with("subnet-cidr-assoc-")
        );
        assert_eq!(assoc[0].text_at("ipv6CidrBlockState/state"), "associated");
        assert_eq!(s.text_at("assignIpv6AddressOnCreation"), "true");
    }
    let by_cidr = h
        .ok(&[
            ("Action", cloud::Action::DescribeSubnets.wire_name()),
            (
                "Filter.1.Name",
                "ipv6-cidr-block-association.ipv6-cidr-block",
            ),
            ("Filter.1.Value.1", "2001:db8:5:1201::/64"),
        ])
        .await;
    let found = by_cidr.items("subnetSet");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].text_at("subnetId"), h.subnet(1));

    let got = h
        .ok(&[
            ("Action", cloud::Action::AssignIpv6Addresses.wire_name()),
            ("NetworkInterfaceId", &eni),
            ("Ipv6PrefixCount", "1"),
        ])
        .await;
    assert_eq!(got.name, "AssignIpv6AddressesResponse");
    assert_eq!(got.text_at("networkInterfaceId"), eni);
    assert_eq!(
        texts(got.items("assignedIpv6PrefixSet")),
        ["2001:db8:5:1200:1::/80"]
    );
    assert!(got.items("assignedIpv6Addresses").is_empty());

    let x = h
        .ok(&[
            (
                "Action",
                cloud::Action::DescribeNetworkInterfaces.wire_name(),
            ),
            ("NetworkInterfaceId.1", &eni),
        ])
        .await;
    let e = x.items("networkInterfaceSet")[0];
    let addrs = e.items("ipv6AddressesSet");
    assert_eq!(addrs.len(), 1);
    assert_eq!(addrs[0].text_at("ipv6Address"), "2001:db8:5:1200::4");
    assert_eq!(addrs[0].text_at("isPrimaryIpv6"), "false");
    let prefixes = e.items("ipv6PrefixSet");
    assert_eq!(prefixes.len(), 1);
    assert_eq!(prefixes[0].text_at("ipv6Prefix"), "2001:db8:5:1200:1::/80");
    let found = h
        .ok(&[
            (
                "Action",
                cloud::Action::DescribeNetworkInterfaces.wire_name(),
            ),
            ("Filter.1.Name", "ipv6-addresses.ipv6-address"),
            ("Filter.1.Value.1", "2001:db8:5:1200::4"),
        ])
        .await;
    assert_eq!(found.items("networkInterfaceSet").len(), 1);

    // DescribeInstances writes the same sets into the instance's interfaces.
    let x = h
        .ok(&[("Action", cloud::Action::DescribeInstances.wire_name())])
        .await;
    let inst = x.items("reservationSet")[0].items("instancesSet")[0];
    let nic = inst.items("networkInterfaceSet")[0];
    assert_eq!(nic.items("ipv6AddressesSet").len(), 1);
    assert_eq!(nic.items("ipv6PrefixSet").len(), 1);

    let gone = h
        .ok(&[
            ("Action", cloud::Action::UnassignIpv6Addresses.wire_name()),
            ("NetworkInterfaceId", &eni),
            ("Ipv6Prefix.1", "2001:db8:5:1200:1::/80"),
            ("Ipv6Addresses.1", "2001:db8:5:1200::4"),
        ])
        .await;
    assert_eq!(gone.name, "UnassignIpv6AddressesResponse");
    assert_eq!(
        texts(gone.items("unassignedIpv6Addresses")),
        ["2001:db8:5:1200::4"]
    );
    assert_eq!(
        texts(gone.items("unassignedIpv6PrefixSet")),
        ["2001:db8:5:1200:1::/80"]
    );
}

/// AssignIpv6Addresses on `eni` with `extra`, expected to fail: (code, message).
async fn assign_err(h: &Harness, eni: &str, extra: &[(&str, &str)]) -> (String, String) {
    let mut pairs = vec![
        ("Action", cloud::Action::AssignIpv6Addresses.wire_name()),
        ("NetworkInterfaceId", eni),
    ];
    pairs.extend_from_slice(extra);
    h.err(&pairs).await
}

#[tokio::test]
async fn ipv6_errors_over_http() {
    let h = dual();
    let (_, eni) = h.instance(0);
    let (code, _) = assign_err(&h, &eni, &[]).await;
    assert_eq!(code, "MissingParameter");
    let (code, _) = assign_err(
        &h,
        &eni,
        &[("Ipv6AddressCount", "1"), ("Ipv6PrefixCount", "1")],
    )
    .await;
    assert_eq!(code, "InvalidParameterCombination");
    let (code, _) = assign_err(&h, &eni, &[("Ipv6Addresses.1", "10.0.0.9")]).await;
    assert_eq!(code, "InvalidParameterValue");
    let (code, msg) = assign_err(&h, &eni, &[("Ipv6AddressCount", "6")]).await;
    assert_eq!(code, "InvalidParameterValue");
    assert!(msg.contains("limit of 6"), "{msg}");
    let (code, _) = assign_err(&h, &eni, &[("Ipv6Addresses.1", "2001:db8:5:1200::4")]).await;
    assert_eq!(code, "InvalidIPAddress.InUse");
    let (code, _) = assign_err(&h, &eni, &[("Ipv6Prefix.1", "2001:db8:5:1200:1::/96")]).await;
    assert_eq!(code, "InvalidParameterValue");
    let (code, _) = h
        .err(&[
            ("Action", cloud::Action::UnassignIpv6Addresses.wire_name()),
            ("NetworkInterfaceId", &eni),
            ("Ipv6Addresses.1", "2001:db8:5:1200::77"),
        ])
        .await;
    assert_eq!(code, "InvalidParameterValue");

    // An IPv4-only VPC: the ENI's subnet has no IPv6, and nothing IPv6 shows anywhere.
    let v4 = Harness::basic();
    let (_, eni4) = v4.instance(0);
    let (code, msg) = v4
        .err(&[
            ("Action", cloud::Action::AssignIpv6Addresses.wire_name()),
            ("NetworkInterfaceId", &eni4),
            ("Ipv6PrefixCount", "1"),
        ])
        .await;
    assert_eq!(code, "InvalidParameterValue");
    assert!(msg.contains("no IPv6 CIDR"), "{msg}");
    let x = v4
        .ok(&[("Action", cloud::Action::DescribeSubnets.wire_name())])
        .await;
    let s = x.items("subnetSet")[0];
    assert!(s.items("ipv6CidrBlockAssociationSet").is_empty());
    assert_eq!(s.text_at("assignIpv6AddressOnCreation"), "false");
    let x = v4
        .ok(&[(
            "Action",
            cloud::Action::DescribeNetworkInterfaces.wire_name(),
        )])
        .await;
    let e = x.items("networkInterfaceSet")[0];
    assert!(e.items("ipv6AddressesSet").is_empty());
    assert!(e.child("ipv6PrefixSet").is_none());
}

#[tokio::test]
async fn imds_serves_the_ipv6_paths_the_cni_reads() {
    let h = dual();
    let (inst, eni) = h.instance(0);
    let mac = h.sim.model().eni(&eni).unwrap().mac.clone();
    let base = format!("meta-data/network/interfaces/macs/{mac}");
    assert_eq!(
        imds(&h, &inst, "meta-data/ipv6").await,
        (200, "2001:db8:5:1200::4".to_string())
    );
    assert_eq!(imds(&h, &inst, &format!("{base}/ipv6-prefix")).await.0, 404);
    h.ok(&[
        ("Action", cloud::Action::AssignIpv6Addresses.wire_name()),
        ("NetworkInterfaceId", &eni),
        ("Ipv6PrefixCount", "1"),
    ])
    .await;
    for (field, want) in [
        ("ipv6s", "2001:db8:5:1200::4"),
        ("ipv6-prefix", "2001:db8:5:1200:1::/80"),
        ("subnet-ipv6-cidr-blocks", "2001:db8:5:1200::/64"),
        ("vpc-ipv6-cidr-blocks", "2001:db8:5:1200::/56"),
        ("subnet-ipv4-cidr-block", "10.0.0.0/24"),
    ] {
        assert_eq!(
            imds(&h, &inst, &format!("{base}/{field}")).await,
            (200, want.to_string()),
            "{field}"
        );
    }
    let (_, listing) = imds(&h, &inst, &format!("{base}/")).await;
    for field in [
        "ipv6s",
        "ipv6-prefix",
        "subnet-ipv6-cidr-blocks",
        "vpc-ipv6-cidr-blocks",
    ] {
        assert!(listing.lines().any(|l| l == field), "{field} in {listing}");
    }

    let v4 = Harness::basic();
    let (inst4, eni4) = v4.instance(0);
    let mac4 = v4.sim.model().eni(&eni4).unwrap().mac.clone();
    let base4 = format!("meta-data/network/interfaces/macs/{mac4}");
    for path in [
        "meta-data/ipv6".to_string(),
        format!("{base4}/ipv6s"),
        format!("{base4}/ipv6-prefix"),
        format!("{base4}/subnet-ipv6-cidr-blocks"),
        format!("{base4}/vpc-ipv6-cidr-blocks"),
    ] {
        assert_eq!(imds(&v4, &inst4, &path).await.0, 404, "{path}");
    }
}

#[tokio::test]
async fn the_sdk_reads_every_ipv6_answer() {
    let h = dual();
    let (inst, eni) = h.instance(0);
    let endpoint = h.serve().await;
    let ec2 = sdk_client(&endpoint, RetryConfig::disabled());

    let subnets = ec2.describe_subnets().send().await.unwrap();
    let first = h.subnet(0);
    let s0 = subnets
        .subnets()
        .iter()
        .find(|s| s.subnet_id() == Some(first.as_str()))
        .unwrap();
    let assoc = &s0.ipv6_cidr_block_association_set()[0];
    assert_eq!(assoc.ipv6_cidr_block(), Some("2001:db8:5:1200::/64"));
    assert_eq!(
        assoc
            .ipv6_cidr_block_state()
            .and_then(|s| s.state())
            .map(|s| s.as_str()),
        Some("associated")
    );
    assert!(
        assoc
            .association_id()
            .unwrap()
            .starts_with("subnet-cidr-assoc-")
    );
    assert_eq!(s0.assign_ipv6_address_on_creation(), Some(true));
    // ipamd's own client still reads a dual-stack subnet as the IPv4 subnet it manages.
    let ipamd = cloud::aws::AwsEc2::from_client(ec2.clone());
    let seen = cloud::Ec2::describe_subnets(&ipamd, &[]).await.unwrap();
    let mut cidrs: Vec<String> = seen.iter().map(|s| s.cidr.to_string()).collect();
    cidrs.sort();
    assert_eq!(cidrs, ["10.0.0.0/24", "10.0.1.0/24"]);

    let got = ec2
        .assign_ipv6_addresses()
        .network_interface_id(&eni)
        .ipv6_prefix_count(1)
        .send()
        .await
        .unwrap();
    assert_eq!(got.network_interface_id(), Some(eni.as_str()));
    assert_eq!(got.assigned_ipv6_prefixes(), ["2001:db8:5:1200:1::/80"]);
    let got = ec2
        .assign_ipv6_addresses()
        .network_interface_id(&eni)
        .ipv6_address_count(2)
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.assigned_ipv6_addresses(),
        ["2001:db8:5:1200::5", "2001:db8:5:1200::6"]
    );
    let chosen: Ipv6Network = "2001:db8:5:1200:9::/80".parse().unwrap();
    let got = ec2
        .assign_ipv6_addresses()
        .network_interface_id(&eni)
        .ipv6_prefixes(chosen.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(got.assigned_ipv6_prefixes(), [chosen.to_string()]);
    let one: Ipv6Addr = "2001:db8:5:1200::abcd".parse().unwrap();
    ec2.assign_ipv6_addresses()
        .network_interface_id(&eni)
        .ipv6_addresses(one.to_string())
        .send()
        .await
        .unwrap();

    let described = ec2
        .describe_network_interfaces()
        .network_interface_ids(&eni)
        .send()
        .await
        .unwrap();
    let nic = &described.network_interfaces()[0];
    let addrs: Vec<&str> = nic
        .ipv6_addresses()
        .iter()
        .filter_map(|a| a.ipv6_address())
        .collect();
    assert_eq!(
        addrs,
        [
            "2001:db8:5:1200::4",
            "2001:db8:5:1200::5",
            "2001:db8:5:1200::6",
            "2001:db8:5:1200::abcd"
        ]
    );
    let prefixes: Vec<&str> = nic
        .ipv6_prefixes()
        .iter()
        .filter_map(|p| p.ipv6_prefix())
        .collect();
    assert_eq!(
        prefixes,
        ["2001:db8:5:1200:1::/80", "2001:db8:5:1200:9::/80"]
    );

    let instances = ec2
        .describe_instances()
        .instance_ids(&inst)
        .send()
        .await
        .unwrap();
    let nic = &instances.reservations()[0].instances()[0].network_interfaces()[0];
    assert_eq!(nic.ipv6_addresses().len(), 4);
    assert_eq!(nic.ipv6_prefixes().len(), 2);

    // The limit (6 on a t3.medium, used up now) and its error through the SDK.
    let e = ec2
        .assign_ipv6_addresses()
        .network_interface_id(&eni)
        .ipv6_address_count(1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("InvalidParameterValue"), "{e:?}");

    let gone = ec2
        .unassign_ipv6_addresses()
        .network_interface_id(&eni)
        .ipv6_prefixes("2001:db8:5:1200:1::/80")
        .ipv6_addresses("2001:db8:5:1200::5")
        .send()
        .await
        .unwrap();
    assert_eq!(gone.unassigned_ipv6_prefixes(), ["2001:db8:5:1200:1::/80"]);
    assert_eq!(gone.unassigned_ipv6_addresses(), ["2001:db8:5:1200::5"]);

    // A new ENI gets one IPv6 address by the subnet's default, or as many as asked.
    let created = ec2
        .create_network_interface()
        .subnet_id(h.subnet(1))
        .ipv6_address_count(2)
        .send()
        .await
        .unwrap();
    let nic = created.network_interface().unwrap();
    assert_eq!(nic.ipv6_addresses().len(), 2);
    assert!(
        nic.ipv6_addresses()[0]
            .ipv6_address()
            .unwrap()
            .starts_with("2001:db8:5:1201:")
    );

    let types = ec2
        .describe_instance_types()
        .instance_types(sdk::types::InstanceType::M3Large)
        .instance_types(sdk::types::InstanceType::T3Medium)
        .send()
        .await
        .unwrap();
    let v6: Vec<(String, Option<i32>, Option<bool>)> = types
        .instance_types()
        .iter()
        .map(|t| {
            let n = t.network_info().unwrap();
            (
                t.instance_type().unwrap().as_str().to_string(),
                n.ipv6_addresses_per_interface(),
                n.ipv6_supported(),
            )
        })
        .collect();
    assert_eq!(
        v6,
        [
            ("m3.large".to_string(), Some(0), Some(false)),
            ("t3.medium".to_string(), Some(6), Some(true))
        ]
    );
}

#[test]
fn the_binary_takes_ip_family_and_writes_ipv6_cidrs_to_sim_json() {
    let mut sim = common::SimProcess::start(
        &testkit::unique("v6"),
        &[
            "--mode",
            "loopback",
            "--nodes",
            "2",
            "--ip-family",
            "dual",
            "--subnet",
            "10.0.0.0/24",
            "--subnet",
            "10.0.1.0/24,nodes=1",
        ],
    );
    let f = sim.wait_ready();
    assert_eq!(f.ip_family, vpc_sim::config::IpFamily::Dual);
    let vpc6 = f.vpc.ipv6_cidr.expect("the VPC's /56");
    assert_eq!(vpc6.prefix(), 56);
    for (i, s) in f.subnets.iter().enumerate() {
        let c = s.ipv6_cidr.expect("each subnet's /64");
        assert_eq!(
            u128::from(c.network()),
            u128::from(vpc6.network()) | ((i as u128) << 64),
            "{c}"
        );
    }
    for n in &f.nodes {
        let ip = n.primary_ipv6.expect("each node's IPv6");
        let subnet = f.subnets.iter().find(|s| s.id == n.subnet_id).unwrap();
        assert!(subnet.ipv6_cidr.unwrap().contains(ip), "{ip}");
        assert_eq!(
            common::imds_get(&n.imds_endpoint, "meta-data/ipv6"),
            ip.to_string()
        );
        let mac = format!("meta-data/network/interfaces/macs/{}", n.mac);
        assert_eq!(
            common::imds_get(&n.imds_endpoint, &format!("{mac}/vpc-ipv6-cidr-blocks")),
            vpc6.to_string()
        );
    }
    let status = sim.terminate();
    assert!(status.success(), "exit {status}:\n{}", sim.log());

    // The default: IPv4 only, every IPv6 field null in sim.json.
    let mut sim = common::SimProcess::start(&testkit::unique("v4"), &["--mode", "loopback"]);
    let f = sim.wait_ready();
    let raw: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(vpc_sim::simfile::SimFile::path(&sim.dir)).unwrap(),
    )
    .unwrap();
    assert_eq!(raw["ip_family"], "ipv4");
    assert!(raw["vpc"]["ipv6_cidr"].is_null());
    assert!(raw["subnets"][0]["ipv6_cidr"].is_null(), "{raw}");
    assert!(raw["nodes"][0]["primary_ipv6"].is_null());
    assert_eq!(f.vpc.ipv6_cidr, None);
    let status = sim.terminate();
    assert!(status.success(), "exit {status}:\n{}", sim.log());
}

// --- ipamd's own cloud seam (cloud::aws behind cloud::throttle, as ipamd builds it) ---------

/// ipamd's EC2 client against the harness: the real SDK client, behind the throttle layer.
async fn ipamd_ec2(h: &Harness) -> Throttled<AwsEc2> {
    let client = sdk_client(&h.serve().await, RetryConfig::disabled());
    Throttled::new(AwsEc2::from_client(client), ThrottlePolicy::default()).unwrap()
}

/// ipamd's IMDS client against the instance's IMDS, served on a real socket.
async fn ipamd_imds(h: &Harness, instance: &str) -> AwsImds {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = h.imds(instance);
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    AwsImds::with_endpoint(&format!("http://{addr}")).unwrap()
}

fn nets(prefixes: &[&str]) -> Vec<Ipv6Network> {
    prefixes.iter().map(|p| p.parse().unwrap()).collect()
}

#[tokio::test]
async fn ipamds_client_delegates_80s_reads_them_back_and_gives_them_back() {
    let h = dual();
    let (inst, eni) = h.instance(0);
    let ec2 = ipamd_ec2(&h).await;

    let subnets = ec2.describe_subnets(&[]).await.unwrap();
    assert_eq!(subnets.len(), 2);
    for i in 0..2 {
        let s = subnets.iter().find(|s| s.id == h.subnet(i)).unwrap();
        let want: Ipv6Network = format!("2001:db8:5:120{i}::/64").parse().unwrap();
        assert_eq!(s.ipv6_cidr, Some(want), "{}", s.id);
    }

    let got = ec2.assign_ipv6_prefixes(&eni, 2).await.unwrap();
    assert_eq!(
        got,
        nets(&["2001:db8:5:1200:1::/80", "2001:db8:5:1200:2::/80"])
    );
    let described = &ec2
        .describe_network_interfaces(std::slice::from_ref(&eni))
        .await
        .unwrap()[0];
    let own: Ipv6Addr = "2001:db8:5:1200::4".parse().unwrap();
    assert_eq!(described.ipv6_addresses, [own]);
    assert_eq!(described.ipv6_prefixes, got);
    let attached = ec2.describe_instance_enis(&inst).await.unwrap();
    assert_eq!(attached.len(), 1);
    assert_eq!(
        (&attached[0].ipv6_addresses, &attached[0].ipv6_prefixes),
        (&described.ipv6_addresses, &got)
    );
    assert!(
        described.primary_ip.is_some() && described.secondary_ips.is_empty(),
        "IPv4 reads as before: {described:?}"
    );

    // A t3.medium ENI holds 6 IPv6 addresses and prefixes: 3 held, 4 more is refused whole.
    let e = ec2.assign_ipv6_prefixes(&eni, 4).await.unwrap_err();
    assert_eq!(e.code.as_deref(), Some("InvalidParameterValue"), "{e}");
    assert_eq!(e.kind, CloudErrorKind::Invalid, "{e}");
    assert_eq!(e.api, cloud::Action::AssignIpv6Addresses.wire_name());
    let now = &ec2
        .describe_network_interfaces(std::slice::from_ref(&eni))
        .await
        .unwrap()[0];
    assert_eq!(now.ipv6_prefixes, got, "nothing of the refused call taken");

    ec2.unassign_ipv6_prefixes(&eni, &got[..1]).await.unwrap();
    let now = &ec2
        .describe_network_interfaces(std::slice::from_ref(&eni))
        .await
        .unwrap()[0];
    assert_eq!(now.ipv6_prefixes, got[1..]);
    assert_eq!(now.ipv6_addresses, [own], "the ENI's own address stays");
    let again = ec2.assign_ipv6_prefixes(&eni, 1).await.unwrap();
    assert_eq!(again, got[..1], "the /80 given back is delegated again");

    let e = ec2
        .unassign_ipv6_prefixes(&eni, &nets(&["2001:db8:5:1200:77::/80"]))
        .await
        .unwrap_err();
    assert_eq!(e.api, cloud::Action::UnassignIpv6Addresses.wire_name());
    assert_eq!(e.kind, CloudErrorKind::Invalid, "{e}");
    let e = ec2
        .assign_ipv6_prefixes("eni-0000000000000000f", 1)
        .await
        .unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::NotFound, "{e}");
}

#[tokio::test]
async fn ipamds_client_on_an_ipv4_only_vpc_sees_no_ipv6_and_is_refused_prefixes() {
    let h = Harness::basic();
    let (inst, eni) = h.instance(0);
    let ec2 = ipamd_ec2(&h).await;
    let subnets = ec2.describe_subnets(&[]).await.unwrap();
    assert_eq!(subnets.len(), 1);
    assert_eq!(subnets[0].ipv6_cidr, None);
    let enis = ec2.describe_instance_enis(&inst).await.unwrap();
    assert!(enis[0].ipv6_addresses.is_empty() && enis[0].ipv6_prefixes.is_empty());
    let e = ec2.assign_ipv6_prefixes(&eni, 1).await.unwrap_err();
    assert_eq!(e.code.as_deref(), Some("InvalidParameterValue"), "{e}");
    assert!(e.message.contains("no IPv6 CIDR"), "{e}");
}

#[tokio::test]
async fn ipamds_identity_reads_the_nodes_and_enis_ipv6_from_imds() {
    let h = dual();
    let (inst, eni) = h.instance(0);
    let imds = ipamd_imds(&h, &inst).await;
    let own: Ipv6Addr = "2001:db8:5:1200::4".parse().unwrap();

    let id = cloud::node_identity(&imds).await.unwrap();
    assert_eq!(id.instance_id, inst);
    assert_eq!(id.primary_ipv6, Some(own));
    assert_eq!(id.primary_eni.eni_id, eni);
    assert_eq!(id.primary_eni.ipv6s, [own]);
    assert!(
        id.primary_eni.ipv6_prefixes.is_empty(),
        "no prefix yet: IMDS answers 404"
    );
    assert_eq!(id.primary_eni.subnet_cidr.to_string(), "10.0.0.0/24");

    let ec2 = ipamd_ec2(&h).await;
    let got = ec2.assign_ipv6_prefixes(&eni, 2).await.unwrap();
    let mac = id.primary_eni.mac.clone();
    let a = cloud::eni_addresses(&imds, &mac).await.unwrap();
    assert_eq!(a.ipv6s, [own]);
    assert_eq!(a.ipv6_prefixes, got);
    let m = cloud::eni_metadata(&imds, &mac).await.unwrap();
    assert_eq!((m.ipv6s, m.ipv6_prefixes), (vec![own], got));

    // IPv4 only: every IPv6 path is a 404, read as none; IPv4 reads as before.
    let v4 = Harness::basic();
    let (inst4, _) = v4.instance(0);
    let imds4 = ipamd_imds(&v4, &inst4).await;
    let id4 = cloud::node_identity(&imds4).await.unwrap();
    assert_eq!(id4.primary_ipv6, None);
    assert!(id4.primary_eni.ipv6s.is_empty() && id4.primary_eni.ipv6_prefixes.is_empty());
    assert_eq!(id4.primary_eni.primary_ip(), Some(id4.primary_ip));
    let a4 = cloud::eni_addresses(&imds4, &id4.primary_eni.mac)
        .await
        .unwrap();
    assert_eq!(a4, cloud::EniAddresses::default());
}
