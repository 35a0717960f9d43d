//! The EC2 Query API over HTTP, in-process: element names the SDK reads, error shapes, semantics.

use crate::common;

use common::{Harness, Node, topology};
use vpc_sim::model::{SubnetSpec, Topology};

const NS: &str = "http://ec2.amazonaws.com/doc/2016-11-15/";

async fn new_eni(h: &Harness, extra: &[(&str, &str)]) -> String {
    let subnet = h.subnet(0);
    let mut pairs = vec![
        ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
        ("SubnetId", subnet.as_str()),
    ];
    pairs.extend_from_slice(extra);
    h.ok(&pairs)
        .await
        .text_at("networkInterface/networkInterfaceId")
        .to_string()
}

#[tokio::test]
async fn describe_network_interfaces_has_the_sdk_shape() {
    let h = Harness::basic();
    let (inst, eni) = h.instance(0);
    let r = h
        .call(&[
            (
                "Action",
                cloud::Action::DescribeNetworkInterfaces.wire_name(),
            ),
            ("NetworkInterfaceId.1", &eni),
        ])
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], "text/xml;charset=UTF-8");
    let x = r.xml();
    assert_eq!(x.name, "DescribeNetworkInterfacesResponse");
    assert_eq!(x.attrs, vec![("xmlns".to_string(), NS.to_string())]);
    assert_eq!(r.headers["x-amzn-requestid"], x.text_at("requestId"));
    let items = x.items("networkInterfaceSet");
    assert_eq!(items.len(), 1);
    let e = items[0];
    for name in [
        "networkInterfaceId",
        "subnetId",
        "vpcId",
        "availabilityZone",
        "description",
        "ownerId",
        "status",
        "macAddress",
        "privateIpAddress",
        "privateDnsName",
        "sourceDestCheck",
        "groupSet",
        "attachment",
        "tagSet",
        "privateIpAddressesSet",
        "ipv4PrefixSet",
        "interfaceType",
    ] {
        assert!(e.child(name).is_some(), "missing {name}: {:?}", e.names());
    }
    assert_eq!(e.text_at("networkInterfaceId"), eni);
    assert_eq!(e.text_at("status"), "in-use");
    assert!(e.text_at("macAddress").starts_with("02:"));
    assert!(e.items("groupSet")[0].text_at("groupId").starts_with("sg-"));
    let a = e.at("attachment");
    assert_eq!(a.text_at("instanceId"), inst);
    assert_eq!(a.text_at("deviceIndex"), "0");
    assert_eq!(a.text_at("networkCardIndex"), "0");
    assert_eq!(a.text_at("status"), "attached");
    assert_eq!(a.text_at("deleteOnTermination"), "true");
    assert_eq!(a.text_at("attachTime"), "2026-01-01T00:00:00.000Z");
    assert!(a.text_at("attachmentId").starts_with("eni-attach-"));
    let ips = e.items("privateIpAddressesSet");
    assert_eq!(ips.len(), 1);
    assert_eq!(ips[0].text_at("primary"), "true");
    assert_eq!(
        ips[0].text_at("privateIpAddress"),
        e.text_at("privateIpAddress")
    );
}

#[tokio::test]
async fn unknown_eni_ids_are_named_in_the_error() {
    let h = Harness::basic();
    let (_, eni) = h.instance(0);
    let (code, msg) = h
        .err(&[
            (
                "Action",
                cloud::Action::DescribeNetworkInterfaces.wire_name(),
            ),
            ("NetworkInterfaceId.1", &eni),
            ("NetworkInterfaceId.2", "eni-00000088"),
        ])
        .await;
    assert_eq!(code, "InvalidNetworkInterfaceID.NotFound");
    assert_eq!(msg, "The networkInterface ID 'eni-00000088' does not exist");
    let (_, msg) = h
        .err(&[
            (
                "Action",
                cloud::Action::DescribeNetworkInterfaces.wire_name(),
            ),
            ("NetworkInterfaceId.1", "eni-0000000a"),
            ("NetworkInterfaceId.2", "eni-0000000b"),
        ])
        .await;
    assert_eq!(
        msg,
        "The networkInterface IDs 'eni-0000000a, eni-0000000b' do not exist"
    );
    let (code, _) = h
        .err(&[
            (
                "Action",
                cloud::Action::DescribeNetworkInterfaces.wire_name(),
            ),
            ("NetworkInterfaceId.1", "nope"),
        ])
        .await;
    assert_eq!(code, "InvalidNetworkInterfaceID.Malformed");
}

#[tokio::test]
async fn describe_network_interfaces_filters() {
    let h = Harness::new(topology("sim.big", &["10.0.0.0/24", "10.0.1.0/24"], 1), 0);
    let (inst, primary) = h.instance(0);
    let tagged = new_eni(
        &h,
        &[
            ("Description", "aws-K8S-i-123"),
            ("TagSpecification.1.ResourceType", "network-interface"),
            (
                "TagSpecification.1.Tag.1.Key",
                "node.k8s.amazonaws.com/instance_id",
            ),
            ("TagSpecification.1.Tag.1.Value", &inst),
        ],
    )
    .await;
    let attached = new_eni(&h, &[]).await;
    h.ok(&[
        ("Action", cloud::Action::AttachNetworkInterface.wire_name()),
        ("NetworkInterfaceId", &attached),
        ("InstanceId", &inst),
        ("DeviceIndex", "2"),
    ])
    .await;
    let other_subnet = h.subnet(1);
    let far = h
        .ok(&[
            ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
            ("SubnetId", &other_subnet),
        ])
        .await
        .text_at("networkInterface/networkInterfaceId")
        .to_string();

    async fn ids(h: &Harness, filters: &[(&str, &[&str])]) -> Vec<String> {
        let mut owned: Vec<(String, String)> = vec![(
            "Action".into(),
            cloud::Action::DescribeNetworkInterfaces.wire_name().into(),
        )];
        for (i, (name, values)) in filters.iter().enumerate() {
            owned.push((format!("Filter.{}.Name", i + 1), name.to_string()));
            for (j, v) in values.iter().enumerate() {
                owned.push((format!("Filter.{}.Value.{}", i + 1, j + 1), v.to_string()));
            }
        }
        let pairs: Vec<(&str, &str)> = owned
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut v: Vec<String> = h
            .ok(&pairs)
            .await
            .items("networkInterfaceSet")
            .iter()
            .map(|e| e.text_at("networkInterfaceId").to_string())
            .collect();
        v.sort();
        v
    }
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(
        ids(&h, &[("attachment.instance-id", &[&inst])]).await,
        sorted(vec![primary.clone(), attached.clone()])
    );
    assert_eq!(
        ids(&h, &[("attachment.device-index", &["2"])]).await,
        vec![attached.clone()]
    );
    assert_eq!(
        ids(
            &h,
            &[
                ("attachment.status", &["attached"]),
                ("attachment.device-index", &["0"])
            ]
        )
        .await,
        vec![primary.clone()]
    );
    assert_eq!(
        ids(&h, &[("status", &["available"])]).await,
        sorted(vec![tagged.clone(), far.clone()])
    );
    assert_eq!(
        ids(&h, &[("tag-key", &["node.k8s.amazonaws.com/instance_id"])]).await,
        vec![tagged.clone()]
    );
    assert_eq!(
        ids(&h, &[("tag:node.k8s.amazonaws.com/instance_id", &[&inst])]).await,
        vec![tagged.clone()]
    );
    assert_eq!(
        ids(&h, &[("description", &["aws-K8S-*"])]).await,
        vec![tagged.clone()]
    );
    assert_eq!(
        ids(&h, &[("subnet-id", &[&other_subnet])]).await,
        vec![far.clone()]
    );
    assert_eq!(
        ids(&h, &[("network-interface-id", &[&far, &tagged])]).await,
        sorted(vec![far.clone(), tagged.clone()])
    );
    let vpc = h.sim.model().vpc().id.clone();
    assert_eq!(ids(&h, &[("vpc-id", &[&vpc])]).await.len(), 4);
    assert!(
        ids(&h, &[("vpc-id", &["vpc-0000000000000000f"])])
            .await
            .is_empty()
    );

    let (code, msg) = h
        .err(&[
            (
                "Action",
                cloud::Action::DescribeNetworkInterfaces.wire_name(),
            ),
            ("Filter.1.Name", "colour"),
            ("Filter.1.Value.1", "red"),
        ])
        .await;
    assert_eq!(
        (code.as_str(), msg.as_str()),
        ("InvalidParameterValue", "The filter 'colour' is invalid")
    );
}

#[tokio::test]
async fn describe_network_interfaces_paginates() {
    let h = Harness::basic();
    for _ in 0..12 {
        new_eni(&h, &[]).await;
    }
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        pages += 1;
        assert!(pages <= 10, "pagination does not end");
        let mut pairs = vec![
            (
                "Action",
                cloud::Action::DescribeNetworkInterfaces.wire_name(),
            ),
            ("MaxResults", "5"),
        ];
        if let Some(t) = token.as_deref() {
            pairs.push(("NextToken", t));
        }
        let x = h.ok(&pairs).await;
        let page: Vec<String> = x
            .items("networkInterfaceSet")
            .iter()
            .map(|e| e.text_at("networkInterfaceId").to_string())
            .collect();
        assert!(page.len() <= 5);
        seen.extend(page);
        match x.child("nextToken") {
            Some(t) => token = Some(t.text.clone()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!((seen.len(), unique.len()), (13, 13));

    let (code, _) = h
        .err(&[
            (
                "Action",
                cloud::Action::DescribeNetworkInterfaces.wire_name(),
            ),
            ("MaxResults", "3"),
        ])
        .await;
    assert_eq!(code, "InvalidParameterValue");
    let (_, eni) = h.instance(0);
    let (code, _) = h
        .err(&[
            (
                "Action",
                cloud::Action::DescribeNetworkInterfaces.wire_name(),
            ),
            ("MaxResults", "5"),
            ("NetworkInterfaceId.1", &eni),
        ])
        .await;
    assert_eq!(code, "InvalidParameterCombination");
}

#[tokio::test]
async fn create_network_interface() {
    let h = Harness::new(topology("sim.big", &["10.0.0.0/24"], 1), 0);
    let subnet = h.subnet(0);
    let x = h
        .ok(&[
            ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
            ("SubnetId", &subnet),
            ("Description", "aws-K8S-i-1"),
            ("SecondaryPrivateIpAddressCount", "3"),
            ("TagSpecification.1.ResourceType", "network-interface"),
            ("TagSpecification.1.Tag.1.Key", "k"),
            ("TagSpecification.1.Tag.1.Value", "v"),
        ])
        .await;
    assert_eq!(x.name, "CreateNetworkInterfaceResponse");
    let e = x.at("networkInterface");
    assert!(e.text_at("networkInterfaceId").starts_with("eni-"));
    assert_eq!(e.text_at("status"), "available");
    assert_eq!(e.text_at("subnetId"), subnet);
    assert_eq!(e.text_at("description"), "aws-K8S-i-1");
    assert!(e.child("attachment").is_none());
    let ips = e.items("privateIpAddressesSet");
    assert_eq!(ips.len(), 4);
    assert_eq!(
        ips.iter()
            .filter(|i| i.text_at("primary") == "true")
            .count(),
        1
    );
    let tag = e.items("tagSet")[0];
    assert_eq!((tag.text_at("key"), tag.text_at("value")), ("k", "v"));

    let x = h
        .ok(&[
            ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
            ("SubnetId", &subnet),
            ("Ipv4PrefixCount", "2"),
        ])
        .await;
    let prefixes = x.items("networkInterface/ipv4PrefixSet");
    assert_eq!(prefixes.len(), 2);
    assert!(
        prefixes
            .iter()
            .all(|p| p.text_at("ipv4Prefix").ends_with("/28"))
    );

    let (code, msg) = h
        .err(&[("Action", cloud::Action::CreateNetworkInterface.wire_name())])
        .await;
    assert_eq!(
        (code.as_str(), msg.as_str()),
        (
            "MissingParameter",
            "The request must contain the parameter SubnetId"
        )
    );
    let (code, _) = h
        .err(&[
            ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
            ("SubnetId", "subnet-0123456789abcdef0"),
        ])
        .await;
    assert_eq!(code, "InvalidSubnetID.NotFound");
    let (code, _) = h
        .err(&[
            ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
            ("SubnetId", &subnet),
            ("SecondaryPrivateIpAddressCount", "x"),
        ])
        .await;
    assert_eq!(code, "InvalidParameterValue");
}

#[tokio::test]
async fn attach_detach_delete() {
    let h = Harness::basic();
    let (inst, primary) = h.instance(0);
    let a = new_eni(&h, &[]).await;
    let x = h
        .ok(&[
            ("Action", cloud::Action::AttachNetworkInterface.wire_name()),
            ("NetworkInterfaceId", &a),
            ("InstanceId", &inst),
            ("DeviceIndex", "1"),
        ])
        .await;
    assert_eq!(x.name, "AttachNetworkInterfaceResponse");
    let att = x.text_at("attachmentId").to_string();
    assert!(att.starts_with("eni-attach-"));
    assert_eq!(x.text_at("networkCardIndex"), "0");

    let b = new_eni(&h, &[]).await;
    let (code, msg) = h
        .err(&[
            ("Action", cloud::Action::AttachNetworkInterface.wire_name()),
            ("NetworkInterfaceId", &b),
            ("InstanceId", &inst),
            ("DeviceIndex", "1"),
        ])
        .await;
    assert_eq!(code, "InvalidParameterValue");
    assert!(msg.contains("device index '1'"), "{msg}");
    let (code, _) = h
        .err(&[
            ("Action", cloud::Action::AttachNetworkInterface.wire_name()),
            ("NetworkInterfaceId", &b),
            ("InstanceId", &inst),
        ])
        .await;
    assert_eq!(code, "MissingParameter");
    let (code, _) = h
        .err(&[
            ("Action", cloud::Action::AttachNetworkInterface.wire_name()),
            ("NetworkInterfaceId", &b),
            ("InstanceId", "i-0123456789abcdef0"),
            ("DeviceIndex", "2"),
        ])
        .await;
    assert_eq!(code, "InvalidInstanceID.NotFound");
    h.ok(&[
        ("Action", cloud::Action::AttachNetworkInterface.wire_name()),
        ("NetworkInterfaceId", &b),
        ("InstanceId", &inst),
        ("DeviceIndex", "2"),
    ])
    .await;
    let c = new_eni(&h, &[]).await;
    let (code, msg) = h
        .err(&[
            ("Action", cloud::Action::AttachNetworkInterface.wire_name()),
            ("NetworkInterfaceId", &c),
            ("InstanceId", &inst),
            ("DeviceIndex", "3"),
        ])
        .await;
    assert_eq!(
        (code.as_str(), msg.as_str()),
        (
            "AttachmentLimitExceeded",
            "Interface count 4 exceeds the limit for t3.medium"
        )
    );

    let (code, _) = h
        .err(&[
            ("Action", cloud::Action::DeleteNetworkInterface.wire_name()),
            ("NetworkInterfaceId", &a),
        ])
        .await;
    assert_eq!(code, "InvalidNetworkInterface.InUse");
    let x = h
        .ok(&[
            ("Action", cloud::Action::DetachNetworkInterface.wire_name()),
            ("AttachmentId", &att),
            ("Force", "true"),
        ])
        .await;
    assert_eq!(x.text_at("return"), "true");
    let x = h
        .ok(&[
            ("Action", cloud::Action::DeleteNetworkInterface.wire_name()),
            ("NetworkInterfaceId", &a),
        ])
        .await;
    assert_eq!(
        (x.name.as_str(), x.text_at("return")),
        ("DeleteNetworkInterfaceResponse", "true")
    );
    let (code, _) = h
        .err(&[
            (
                "Action",
                cloud::Action::DescribeNetworkInterfaces.wire_name(),
            ),
            ("NetworkInterfaceId.1", &a),
        ])
        .await;
    assert_eq!(code, "InvalidNetworkInterfaceID.NotFound");
    let (code, _) = h
        .err(&[
            ("Action", cloud::Action::DetachNetworkInterface.wire_name()),
            ("AttachmentId", &att),
        ])
        .await;
    assert_eq!(code, "InvalidAttachmentID.NotFound");

    let primary_att = h
        .sim
        .model()
        .eni(&primary)
        .unwrap()
        .attachment
        .clone()
        .unwrap()
        .id;
    let (code, _) = h
        .err(&[
            ("Action", cloud::Action::DetachNetworkInterface.wire_name()),
            ("AttachmentId", &primary_att),
        ])
        .await;
    assert_eq!(code, "OperationNotPermitted");
}

#[tokio::test]
async fn assign_lists_only_new_addresses() {
    let h = Harness::basic();
    let (_, eni) = h.instance(0);
    let x = h
        .ok(&[
            (
                "Action",
                cloud::Action::AssignPrivateIpAddresses.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
            ("SecondaryPrivateIpAddressCount", "2"),
        ])
        .await;
    assert_eq!(x.name, "AssignPrivateIpAddressesResponse");
    assert_eq!(x.text_at("networkInterfaceId"), eni);
    let first: Vec<String> = x
        .items("assignedPrivateIpAddressesSet")
        .iter()
        .map(|i| i.text_at("privateIpAddress").to_string())
        .collect();
    assert_eq!(first.len(), 2);
    let x = h
        .ok(&[
            (
                "Action",
                cloud::Action::AssignPrivateIpAddresses.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
            ("SecondaryPrivateIpAddressCount", "1"),
        ])
        .await;
    let second = x.items("assignedPrivateIpAddressesSet");
    assert_eq!(second.len(), 1, "only the new address, not the ENI's four");
    assert!(!first.contains(&second[0].text_at("privateIpAddress").to_string()));

    let x = h
        .ok(&[
            (
                "Action",
                cloud::Action::AssignPrivateIpAddresses.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
            ("Ipv4PrefixCount", "1"),
        ])
        .await;
    assert!(x.items("assignedPrivateIpAddressesSet").is_empty());
    let p = x.items("assignedIpv4PrefixSet");
    assert_eq!(p.len(), 1);
    assert!(p[0].text_at("ipv4Prefix").ends_with("/28"));

    let x = h
        .ok(&[
            (
                "Action",
                cloud::Action::AssignPrivateIpAddresses.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
            ("PrivateIpAddress.1", "10.0.0.200"),
        ])
        .await;
    assert_eq!(
        x.items("assignedPrivateIpAddressesSet")[0].text_at("privateIpAddress"),
        "10.0.0.200"
    );

    // 1 primary + 4 secondaries + 1 prefix = 6 = t3.medium's limit.
    let (code, msg) = h
        .err(&[
            (
                "Action",
                cloud::Action::AssignPrivateIpAddresses.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
            ("SecondaryPrivateIpAddressCount", "1"),
        ])
        .await;
    assert_eq!(
        (code.as_str(), msg.as_str()),
        (
            "PrivateIpAddressLimitExceeded",
            "Number of private addresses will exceed limit."
        )
    );
    let (code, _) = h
        .err(&[
            (
                "Action",
                cloud::Action::AssignPrivateIpAddresses.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
            ("SecondaryPrivateIpAddressCount", "1"),
            ("Ipv4PrefixCount", "1"),
        ])
        .await;
    assert_eq!(code, "InvalidParameterCombination");
    let (code, _) = h
        .err(&[
            (
                "Action",
                cloud::Action::AssignPrivateIpAddresses.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
        ])
        .await;
    assert_eq!(code, "MissingParameter");
    let (code, _) = h
        .err(&[
            (
                "Action",
                cloud::Action::AssignPrivateIpAddresses.wire_name(),
            ),
            ("SecondaryPrivateIpAddressCount", "1"),
        ])
        .await;
    assert_eq!(code, "MissingParameter");
}

#[tokio::test]
async fn subnet_exhaustion_over_http() {
    let h = Harness::new(topology("sim.big", &["10.0.0.0/28"], 1), 0);
    let (_, eni) = h.instance(0);
    h.ok(&[
        (
            "Action",
            cloud::Action::AssignPrivateIpAddresses.wire_name(),
        ),
        ("NetworkInterfaceId", &eni),
        ("SecondaryPrivateIpAddressCount", "9"),
    ])
    .await;
    let (code, msg) = h
        .err(&[
            (
                "Action",
                cloud::Action::AssignPrivateIpAddresses.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
            ("SecondaryPrivateIpAddressCount", "1"),
        ])
        .await;
    assert_eq!(code, "PrivateIpAddressLimitExceeded", "{msg}");
    let subnet = h.subnet(0);
    let (code, _) = h
        .err(&[
            ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
            ("SubnetId", &subnet),
            ("SecondaryPrivateIpAddressCount", "1"),
        ])
        .await;
    assert_eq!(code, "InsufficientFreeAddressesInSubnet");
    let x = h
        .ok(&[
            ("Action", cloud::Action::DescribeSubnets.wire_name()),
            ("SubnetId.1", &subnet),
        ])
        .await;
    assert_eq!(
        x.items("subnetSet")[0].text_at("availableIpAddressCount"),
        "1"
    );
    h.ok(&[
        ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
        ("SubnetId", &subnet),
    ])
    .await;
    let (code, _) = h
        .err(&[
            ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
            ("SubnetId", &subnet),
        ])
        .await;
    assert_eq!(code, "InsufficientFreeAddressesInSubnet");
}

#[tokio::test]
async fn unassign() {
    let h = Harness::basic();
    let (_, eni) = h.instance(0);
    let x = h
        .ok(&[
            (
                "Action",
                cloud::Action::AssignPrivateIpAddresses.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
            ("SecondaryPrivateIpAddressCount", "2"),
        ])
        .await;
    let ip = x.items("assignedPrivateIpAddressesSet")[0]
        .text_at("privateIpAddress")
        .to_string();
    let (code, msg) = h
        .err(&[
            (
                "Action",
                cloud::Action::UnassignPrivateIpAddresses.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
            ("PrivateIpAddress.1", "10.0.0.250"),
        ])
        .await;
    assert_eq!(code, "InvalidParameterValue");
    assert_eq!(
        msg,
        format!("Some of the specified addresses are not assigned to interface {eni}")
    );
    let x = h
        .ok(&[
            (
                "Action",
                cloud::Action::UnassignPrivateIpAddresses.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
            ("PrivateIpAddress.1", &ip),
        ])
        .await;
    assert_eq!(
        (x.name.as_str(), x.text_at("return")),
        ("UnassignPrivateIpAddressesResponse", "true")
    );
    let x = h
        .ok(&[
            (
                "Action",
                cloud::Action::DescribeNetworkInterfaces.wire_name(),
            ),
            ("NetworkInterfaceId.1", &eni),
        ])
        .await;
    let left: Vec<&str> = x.items("networkInterfaceSet")[0]
        .items("privateIpAddressesSet")
        .iter()
        .map(|i| i.text_at("privateIpAddress"))
        .collect();
    assert_eq!(left.len(), 2);
    assert!(!left.contains(&ip.as_str()));
    let (code, _) = h
        .err(&[
            (
                "Action",
                cloud::Action::UnassignPrivateIpAddresses.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
        ])
        .await;
    assert_eq!(code, "MissingParameter");
}

#[tokio::test]
async fn modify_network_interface_attribute() {
    let h = Harness::basic();
    let (inst, _) = h.instance(0);
    let eni = new_eni(&h, &[]).await;
    let att = h
        .ok(&[
            ("Action", cloud::Action::AttachNetworkInterface.wire_name()),
            ("NetworkInterfaceId", &eni),
            ("InstanceId", &inst),
            ("DeviceIndex", "1"),
        ])
        .await
        .text_at("attachmentId")
        .to_string();
    let dot = |x: &common::Node| {
        x.items("networkInterfaceSet")[0]
            .text_at("attachment/deleteOnTermination")
            .to_string()
    };
    let describe = [
        (
            "Action",
            cloud::Action::DescribeNetworkInterfaces.wire_name(),
        ),
        ("NetworkInterfaceId.1", eni.as_str()),
    ];
    assert_eq!(dot(&h.ok(&describe).await), "false");
    let x = h
        .ok(&[
            (
                "Action",
                cloud::Action::ModifyNetworkInterfaceAttribute.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
            ("Attachment.AttachmentId", &att),
            ("Attachment.DeleteOnTermination", "true"),
        ])
        .await;
    assert_eq!(
        (x.name.as_str(), x.text_at("return")),
        ("ModifyNetworkInterfaceAttributeResponse", "true")
    );
    assert_eq!(dot(&h.ok(&describe).await), "true");

    h.ok(&[
        (
            "Action",
            cloud::Action::ModifyNetworkInterfaceAttribute.wire_name(),
        ),
        ("NetworkInterfaceId", &eni),
        ("Description.Value", "hello"),
    ])
    .await;
    assert_eq!(
        h.ok(&describe).await.items("networkInterfaceSet")[0].text_at("description"),
        "hello"
    );

    let (code, _) = h
        .err(&[
            (
                "Action",
                cloud::Action::ModifyNetworkInterfaceAttribute.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
            ("Attachment.AttachmentId", "eni-attach-0000000000000000a"),
            ("Attachment.DeleteOnTermination", "true"),
        ])
        .await;
    assert_eq!(code, "InvalidAttachmentID.NotFound");
    let (code, _) = h
        .err(&[
            (
                "Action",
                cloud::Action::ModifyNetworkInterfaceAttribute.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
            ("SecurityGroupId.1", "sg-0000000000000000a"),
        ])
        .await;
    assert_eq!(code, "InvalidGroup.NotFound");
    let (code, _) = h
        .err(&[
            (
                "Action",
                cloud::Action::ModifyNetworkInterfaceAttribute.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
        ])
        .await;
    assert_eq!(code, "InvalidParameterCombination");
}

#[tokio::test]
async fn describe_instances() {
    let h = Harness::new(topology("t3.medium", &["10.0.0.0/24"], 2), 0);
    let (inst, eni) = h.instance(1);
    let x = h
        .ok(&[
            ("Action", cloud::Action::DescribeInstances.wire_name()),
            ("InstanceId.1", &inst),
        ])
        .await;
    let res = x.items("reservationSet");
    assert_eq!(res.len(), 1);
    assert!(res[0].text_at("reservationId").starts_with("r-"));
    let i = res[0].items("instancesSet")[0];
    assert_eq!(i.text_at("instanceId"), inst);
    assert_eq!(i.text_at("instanceType"), "t3.medium");
    assert_eq!(i.text_at("instanceState/name"), "running");
    assert_eq!(i.text_at("placement/availabilityZone"), "us-west-2a");
    assert_eq!(i.text_at("launchTime"), "2026-01-01T00:00:00.000Z");
    let nics = i.items("networkInterfaceSet");
    assert_eq!(nics.len(), 1);
    assert_eq!(nics[0].text_at("networkInterfaceId"), eni);
    assert_eq!(nics[0].text_at("attachment/deviceIndex"), "0");
    assert_eq!(
        nics[0].text_at("privateIpAddress"),
        i.text_at("privateIpAddress")
    );

    let all = h
        .ok(&[("Action", cloud::Action::DescribeInstances.wire_name())])
        .await;
    assert_eq!(all.items("reservationSet").len(), 2);
    let filtered = h
        .ok(&[
            ("Action", cloud::Action::DescribeInstances.wire_name()),
            ("Filter.1.Name", "network-interface.network-interface-id"),
            ("Filter.1.Value.1", &eni),
        ])
        .await;
    assert_eq!(filtered.items("reservationSet").len(), 1);
    let (code, msg) = h
        .err(&[
            ("Action", cloud::Action::DescribeInstances.wire_name()),
            ("InstanceId.1", "i-0123456789abcdef0"),
        ])
        .await;
    assert_eq!(
        (code.as_str(), msg.as_str()),
        (
            "InvalidInstanceID.NotFound",
            "The instance ID 'i-0123456789abcdef0' does not exist"
        )
    );
}

#[tokio::test]
async fn describe_instance_types() {
    let h = Harness::basic();
    let x = h
        .ok(&[
            ("Action", cloud::Action::DescribeInstanceTypes.wire_name()),
            ("InstanceType.1", "t3.medium"),
            ("InstanceType.2", "sim.big"),
        ])
        .await;
    let items = x.items("instanceTypeSet");
    assert_eq!(items.len(), 2);
    let t3 = items
        .iter()
        .find(|i| i.text_at("instanceType") == "t3.medium")
        .unwrap();
    assert_eq!(t3.text_at("hypervisor"), "nitro");
    assert_eq!(t3.text_at("bareMetal"), "false");
    let n = t3.at("networkInfo");
    assert_eq!(n.text_at("maximumNetworkInterfaces"), "3");
    assert_eq!(n.text_at("ipv4AddressesPerInterface"), "6");
    assert_eq!(n.text_at("defaultNetworkCardIndex"), "0");
    assert_eq!(n.text_at("maximumNetworkCards"), "1");
    let card = n.items("networkCards")[0];
    assert_eq!(
        (
            card.text_at("networkCardIndex"),
            card.text_at("maximumNetworkInterfaces")
        ),
        ("0", "3")
    );
    let big = items
        .iter()
        .find(|i| i.text_at("instanceType") == "sim.big")
        .unwrap();
    assert_eq!(big.text_at("networkInfo/ipv4AddressesPerInterface"), "10");

    let x = h
        .ok(&[
            ("Action", cloud::Action::DescribeInstanceTypes.wire_name()),
            ("InstanceType.1", "c4.large"),
        ])
        .await;
    assert_eq!(x.items("instanceTypeSet")[0].text_at("hypervisor"), "xen");
    let (code, msg) = h
        .err(&[
            ("Action", cloud::Action::DescribeInstanceTypes.wire_name()),
            ("InstanceType.1", "x9.nope"),
        ])
        .await;
    assert_eq!(
        (code.as_str(), msg.as_str()),
        (
            "InvalidInstanceType",
            "The following supplied instance types do not exist: [x9.nope]"
        )
    );
}

#[tokio::test]
async fn describe_subnets_and_tags() {
    let h = Harness::new(topology("t3.medium", &["10.0.0.0/24", "10.0.1.0/24"], 1), 0);
    let (s0, s1) = (h.subnet(0), h.subnet(1));
    let (_, eni) = h.instance(0);
    let vpc = h.sim.model().vpc().id.clone();
    let x = h
        .ok(&[
            ("Action", cloud::Action::DescribeSubnets.wire_name()),
            ("Filter.1.Name", "vpc-id"),
            ("Filter.1.Value.1", &vpc),
        ])
        .await;
    let items = x.items("subnetSet");
    assert_eq!(items.len(), 2);
    let first = items.iter().find(|s| s.text_at("subnetId") == s0).unwrap();
    assert_eq!(first.text_at("cidrBlock"), "10.0.0.0/24");
    assert_eq!(first.text_at("availabilityZone"), "us-west-2a");
    assert_eq!(first.text_at("vpcId"), vpc);
    assert_eq!(first.text_at("availableIpAddressCount"), "250");

    h.ok(&[
        (
            "Action",
            cloud::Action::AssignPrivateIpAddresses.wire_name(),
        ),
        ("NetworkInterfaceId", &eni),
        ("SecondaryPrivateIpAddressCount", "3"),
    ])
    .await;
    let x = h
        .ok(&[
            ("Action", cloud::Action::DescribeSubnets.wire_name()),
            ("SubnetId.1", &s0),
        ])
        .await;
    assert_eq!(
        x.items("subnetSet")[0].text_at("availableIpAddressCount"),
        "247"
    );

    let x = h
        .ok(&[
            ("Action", cloud::Action::CreateTags.wire_name()),
            ("ResourceId.1", &s1),
            ("ResourceId.2", &eni),
            ("Tag.1.Key", "kubernetes.io/role/cni"),
            ("Tag.1.Value", "1"),
        ])
        .await;
    assert_eq!(
        (x.name.as_str(), x.text_at("return")),
        ("CreateTagsResponse", "true")
    );
    let x = h
        .ok(&[
            ("Action", cloud::Action::DescribeSubnets.wire_name()),
            ("Filter.1.Name", "tag:kubernetes.io/role/cni"),
            ("Filter.1.Value.1", "1"),
            ("Filter.2.Name", "availability-zone"),
            ("Filter.2.Value.1", "us-west-2a"),
        ])
        .await;
    let items = x.items("subnetSet");
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].text_at("subnetId"), s1);
    assert_eq!(
        items[0].items("tagSet")[0].text_at("key"),
        "kubernetes.io/role/cni"
    );
    let x = h
        .ok(&[
            (
                "Action",
                cloud::Action::DescribeNetworkInterfaces.wire_name(),
            ),
            ("NetworkInterfaceId.1", &eni),
        ])
        .await;
    assert_eq!(
        x.items("networkInterfaceSet")[0].items("tagSet")[0].text_at("value"),
        "1"
    );

    let (code, _) = h
        .err(&[
            ("Action", cloud::Action::DescribeSubnets.wire_name()),
            ("SubnetId.1", "subnet-0123456789abcdef0"),
        ])
        .await;
    assert_eq!(code, "InvalidSubnetID.NotFound");
    let (code, _) = h
        .err(&[
            ("Action", cloud::Action::CreateTags.wire_name()),
            ("Tag.1.Key", "k"),
        ])
        .await;
    assert_eq!(code, "MissingParameter");
    let (code, _) = h
        .err(&[
            ("Action", cloud::Action::CreateTags.wire_name()),
            ("ResourceId.1", "eni-0000000000000000a"),
            ("Tag.1.Key", "k"),
        ])
        .await;
    assert_eq!(code, "InvalidNetworkInterfaceID.NotFound");
}

/// Two nodes in 10.0.0.0/24 (AZ a) and one in 100.64.2.0/24 (AZ b), a tagged pod subnet
/// 100.64.1.0/24 in AZ a: subnets 0, 1, 2.
fn multi_az() -> Topology {
    let mut t = topology("t3.medium", &["10.0.0.0/24"], 3);
    t.secondary_cidrs = vec!["100.64.0.0/16".parse().unwrap()];
    let mut pods = SubnetSpec::new("100.64.1.0/24".parse().unwrap());
    pods.tags = [("kubernetes.io/role/cni".to_string(), "1".to_string())].into();
    let mut b = SubnetSpec::new("100.64.2.0/24".parse().unwrap());
    b.az = Some("us-west-2b".into());
    b.nodes = Some(1);
    t.subnets.extend([pods, b]);
    t
}

/// `Filter.N.Name` / `Filter.N.Value.M` pairs for `filters`, after `action`.
fn with_filters(action: &str, filters: &[(&str, &[&str])]) -> Vec<(String, String)> {
    let mut owned = vec![("Action".to_string(), action.to_string())];
    for (i, (name, values)) in filters.iter().enumerate() {
        owned.push((format!("Filter.{}.Name", i + 1), name.to_string()));
        for (j, v) in values.iter().enumerate() {
            owned.push((format!("Filter.{}.Value.{}", i + 1, j + 1), v.to_string()));
        }
    }
    owned
}

async fn call_owned(h: &Harness, owned: &[(String, String)]) -> Node {
    let pairs: Vec<(&str, &str)> = owned
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    h.ok(&pairs).await
}

/// The subnets DescribeSubnets returns for `filters`: (id, item).
async fn subnets(h: &Harness, filters: &[(&str, &[&str])]) -> Vec<(String, Node)> {
    call_owned(
        h,
        &with_filters(cloud::Action::DescribeSubnets.wire_name(), filters),
    )
    .await
    .items("subnetSet")
    .into_iter()
    .map(|s| (s.text_at("subnetId").to_string(), s.clone()))
    .collect()
}

async fn subnet_ids(h: &Harness, filters: &[(&str, &[&str])]) -> Vec<String> {
    let mut ids: Vec<String> = subnets(h, filters)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn describe_subnets_in_a_secondary_cidr_and_another_az_with_tag_filters() {
    let h = Harness::new(multi_az(), 0);
    let (s0, s1, s2) = (h.subnet(0), h.subnet(1), h.subnet(2));
    let all = subnets(&h, &[]).await;
    assert_eq!(all.len(), 3);
    let (_, b) = all.iter().find(|(id, _)| *id == s2).unwrap();
    assert_eq!(b.text_at("cidrBlock"), "100.64.2.0/24");
    assert_eq!(b.text_at("availabilityZone"), "us-west-2b");
    assert_eq!(b.text_at("availabilityZoneId"), "usw2-az2");
    assert_eq!(
        b.text_at("availableIpAddressCount"),
        "250",
        "its node's primary"
    );
    assert!(b.items("tagSet").is_empty());

    let cni = vec![s1.clone()];
    assert_eq!(
        subnet_ids(&h, &[("tag-key", &["kubernetes.io/role/cni"])]).await,
        cni
    );
    assert_eq!(
        subnet_ids(&h, &[("tag-key", &["kubernetes.io/*"])]).await,
        cni
    );
    assert_eq!(
        subnet_ids(
            &h,
            &[
                ("tag:kubernetes.io/role/cni", &["1"]),
                ("availability-zone", &["us-west-2a"]),
            ]
        )
        .await,
        cni
    );
    assert_eq!(
        subnet_ids(&h, &[("availability-zone", &["us-west-2b"])]).await,
        std::slice::from_ref(&s2)
    );
    let mut in_a = vec![s0.clone(), s1.clone()];
    in_a.sort();
    assert_eq!(
        subnet_ids(&h, &[("availability-zone", &["us-west-2a"])]).await,
        in_a
    );
    assert_eq!(
        subnet_ids(&h, &[("cidr-block", &["100.64.*"])]).await.len(),
        2
    );
    let (_, tagged) = &subnets(&h, &[("subnet-id", &[&s1])]).await[0];
    let tag = tagged.items("tagSet")[0];
    assert_eq!(
        (tag.text_at("key"), tag.text_at("value")),
        ("kubernetes.io/role/cni", "1")
    );

    // availableIpAddressCount after every allocation and release.
    assert_eq!(free_count(&h, &s1).await, 251);
    let eni = h
        .ok(&[
            ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
            ("SubnetId", &s1),
            ("SecondaryPrivateIpAddressCount", "4"),
        ])
        .await;
    let e = eni.at("networkInterface");
    let eni_id = e.text_at("networkInterfaceId").to_string();
    assert!(e.text_at("privateIpAddress").starts_with("100.64.1."));
    assert_eq!(e.text_at("availabilityZone"), "us-west-2a");
    assert_eq!(free_count(&h, &s1).await, 251 - 5);
    h.ok(&[
        (
            "Action",
            cloud::Action::AssignPrivateIpAddresses.wire_name(),
        ),
        ("NetworkInterfaceId", &eni_id),
        ("Ipv4PrefixCount", "1"),
    ])
    .await;
    assert_eq!(free_count(&h, &s1).await, 251 - 5 - 16);
    h.ok(&[
        ("Action", cloud::Action::DeleteNetworkInterface.wire_name()),
        ("NetworkInterfaceId", &eni_id),
    ])
    .await;
    assert_eq!(free_count(&h, &s1).await, 251);

    // CreateTags and DeleteTags on a subnet move it in and out of the tag filters.
    h.ok(&[
        ("Action", cloud::Action::CreateTags.wire_name()),
        ("ResourceId.1", &s2),
        ("Tag.1.Key", "kubernetes.io/role/cni"),
        ("Tag.1.Value", "0"),
    ])
    .await;
    let mut both = vec![s1.clone(), s2.clone()];
    both.sort();
    assert_eq!(
        subnet_ids(&h, &[("tag-key", &["kubernetes.io/role/cni"])]).await,
        both
    );
    assert_eq!(
        subnet_ids(&h, &[("tag:kubernetes.io/role/cni", &["1"])]).await,
        cni
    );
    let x = h
        .ok(&[
            ("Action", cloud::Action::DeleteTags.wire_name()),
            ("ResourceId.1", &s2),
            ("ResourceId.2", &s1),
            ("Tag.1.Key", "kubernetes.io/role/cni"),
            ("Tag.1.Value", "0"),
        ])
        .await;
    assert_eq!(
        (x.name.as_str(), x.text_at("return")),
        ("DeleteTagsResponse", "true")
    );
    assert_eq!(
        subnet_ids(&h, &[("tag-key", &["kubernetes.io/role/cni"])]).await,
        cni,
        "only the tag with that value went"
    );
    let (code, _) = h
        .err(&[
            ("Action", cloud::Action::DeleteTags.wire_name()),
            ("Tag.1.Key", "k"),
        ])
        .await;
    assert_eq!(code, "MissingParameter");
    let (code, _) = h
        .err(&[
            ("Action", cloud::Action::DeleteTags.wire_name()),
            ("ResourceId.1", "subnet-0123456789abcdef0"),
        ])
        .await;
    assert_eq!(code, "InvalidSubnetID.NotFound");
}

/// DescribeSubnets' availableIpAddressCount of subnet `id`.
async fn free_count(h: &Harness, id: &str) -> u32 {
    let found = subnets(h, &[("subnet-id", &[id])]).await;
    found[0]
        .1
        .text_at("availableIpAddressCount")
        .parse()
        .unwrap()
}

/// CreateSecurityGroup in the harness's VPC: the new group's id.
async fn new_group(h: &Harness, name: &str) -> String {
    let vpc = h.sim.model().vpc().id.clone();
    let x = h
        .ok(&[
            ("Action", cloud::Action::CreateSecurityGroup.wire_name()),
            ("GroupName", name),
            ("GroupDescription", &format!("{name} of the pods")),
            ("VpcId", &vpc),
            ("TagSpecification.1.ResourceType", "security-group"),
            ("TagSpecification.1.Tag.1.Key", "team"),
            ("TagSpecification.1.Tag.1.Value", name),
        ])
        .await;
    assert_eq!(
        (x.name.as_str(), x.text_at("return")),
        ("CreateSecurityGroupResponse", "true")
    );
    assert!(
        x.text_at("securityGroupArn")
            .ends_with(x.text_at("groupId"))
    );
    x.text_at("groupId").to_string()
}

#[tokio::test]
async fn security_groups_are_created_described_and_put_on_new_enis() {
    let h = Harness::basic();
    let subnet = h.subnet(0);
    let vpc = h.sim.model().vpc().id.clone();
    let (g1, g2) = (new_group(&h, "pods").await, new_group(&h, "pods-b").await);
    assert!(g1.starts_with("sg-") && g1 != g2);

    for (pairs, code) in [
        (
            vec![
                ("GroupName", "pods"),
                ("GroupDescription", "d"),
                ("VpcId", &vpc),
            ],
            "InvalidGroup.Duplicate",
        ),
        (
            vec![("GroupName", "x"), ("GroupDescription", "d")],
            "VPCIdNotSpecified",
        ),
        (
            vec![("GroupName", "x"), ("VpcId", &vpc)],
            "MissingParameter",
        ),
        (
            vec![
                ("GroupName", "x"),
                ("GroupDescription", "d"),
                ("VpcId", "vpc-0000000f"),
            ],
            "InvalidVpcID.NotFound",
        ),
        (
            vec![
                ("GroupName", "x"),
                ("GroupDescription", "d"),
                ("VpcId", &vpc),
                ("TagSpecification.1.ResourceType", "network-interface"),
                ("TagSpecification.1.Tag.1.Key", "k"),
            ],
            "InvalidParameterValue",
        ),
    ] {
        let mut all = vec![("Action", cloud::Action::CreateSecurityGroup.wire_name())];
        all.extend(pairs.iter().copied());
        assert_eq!(h.err(&all).await.0, code, "{pairs:?}");
    }

    let x = h
        .ok(&[
            ("Action", cloud::Action::DescribeSecurityGroups.wire_name()),
            ("GroupId.1", &g1),
        ])
        .await;
    let items = x.items("securityGroupInfo");
    assert_eq!(items.len(), 1);
    let g = items[0];
    assert_eq!(g.text_at("groupName"), "pods");
    assert_eq!(g.text_at("groupDescription"), "pods of the pods");
    assert_eq!(g.text_at("vpcId"), vpc);
    assert_eq!(g.items("tagSet")[0].text_at("value"), "pods");
    assert!(g.items("ipPermissions").is_empty());
    let named = |filters: &[(&str, &[&str])]| {
        let owned = with_filters(cloud::Action::DescribeSecurityGroups.wire_name(), filters);
        let h = &h;
        async move {
            let mut v: Vec<String> = call_owned(h, &owned)
                .await
                .items("securityGroupInfo")
                .iter()
                .map(|g| g.text_at("groupName").to_string())
                .collect();
            v.sort();
            v
        }
    };
    assert_eq!(named(&[]).await, ["default", "pods", "pods-b"]);
    assert_eq!(
        named(&[("group-name", &["pods*"])]).await,
        ["pods", "pods-b"]
    );
    assert_eq!(named(&[("tag:team", &["pods-b"])]).await, ["pods-b"]);
    let x = h
        .ok(&[
            ("Action", cloud::Action::DescribeSecurityGroups.wire_name()),
            ("GroupName.1", "default"),
        ])
        .await;
    assert_eq!(
        x.items("securityGroupInfo")[0].text_at("groupId"),
        h.sim.model().vpc().default_security_group
    );
    for (key, value, code) in [
        ("GroupId.1", "sg-0123456789abcdef0", "InvalidGroup.NotFound"),
        ("GroupId.1", "pods", "InvalidGroupId.Malformed"),
        ("GroupName.1", "nope", "InvalidGroup.NotFound"),
    ] {
        let (got, _) = h
            .err(&[
                ("Action", cloud::Action::DescribeSecurityGroups.wire_name()),
                (key, value),
            ])
            .await;
        assert_eq!(got, code, "{key}={value}");
    }

    // An ENI with both groups shows them, by id and name, and is found by either.
    let x = h
        .ok(&[
            ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
            ("SubnetId", &subnet),
            ("SecurityGroupId.1", &g1),
            ("SecurityGroupId.2", &g2),
        ])
        .await;
    let groups: Vec<(String, String)> = x
        .items("networkInterface/groupSet")
        .iter()
        .map(|g| {
            (
                g.text_at("groupId").to_string(),
                g.text_at("groupName").to_string(),
            )
        })
        .collect();
    assert_eq!(
        groups,
        [
            (g1.clone(), "pods".to_string()),
            (g2.clone(), "pods-b".to_string())
        ]
    );
    let eni = x.text_at("networkInterface/networkInterfaceId").to_string();
    let found = call_owned(
        &h,
        &with_filters(
            cloud::Action::DescribeNetworkInterfaces.wire_name(),
            &[("group-id", &[&g2])],
        ),
    )
    .await;
    let found = found.items("networkInterfaceSet");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].text_at("networkInterfaceId"), eni);

    // An unknown group fails the call as EC2 does, and nothing is created.
    let before = h.sim.model().enis().count();
    let (code, msg) = h
        .err(&[
            ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
            ("SubnetId", &subnet),
            ("SecurityGroupId.1", &g1),
            ("SecurityGroupId.2", "sg-0123456789abcdef0"),
        ])
        .await;
    assert_eq!(
        (code.as_str(), msg.as_str()),
        (
            "InvalidGroup.NotFound",
            "The security group 'sg-0123456789abcdef0' does not exist"
        )
    );
    assert_eq!(h.sim.model().enis().count(), before);
}

#[tokio::test]
async fn unknown_or_missing_action() {
    let h = Harness::basic();
    let (code, msg) = h.err(&[("Action", "RunInstances")]).await;
    assert_eq!(
        (code.as_str(), msg.as_str()),
        (
            "InvalidAction",
            "The action RunInstances is not valid for this web service."
        )
    );
    let (code, msg) = h.err(&[]).await;
    assert_eq!(
        (code.as_str(), msg.as_str()),
        (
            "MissingParameter",
            "The request must contain the parameter Action"
        )
    );
}

#[tokio::test]
async fn admin_state_is_json_of_the_model() {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;
    let h = Harness::basic();
    let (inst, eni) = h.instance(0);
    let resp = h
        .ec2
        .clone()
        .oneshot(Request::get("/_sim/state").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let r = common::Reply::from(resp).await;
    assert_eq!(r.status, 200);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["instances"][0]["id"], inst.as_str());
    assert_eq!(v["enis"][0]["id"], eni.as_str());
    assert_eq!(v["subnets"][0]["available_ip_address_count"], 250);
    assert_eq!(v["subnets"][0]["az"], "us-west-2a");
    assert_eq!(v["subnets"][0]["tags"], serde_json::json!({}));
    assert_eq!(v["vpc"]["secondary_cidrs"], serde_json::json!([]));
    let default = &v["security_groups"][0];
    assert_eq!(default["name"], "default");
    assert_eq!(default["id"], v["vpc"]["default_security_group"]);
}

#[tokio::test]
async fn admin_calls_count_every_request_by_action() {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;
    let h = Harness::basic();
    h.ok(&[(
        "Action",
        cloud::Action::DescribeNetworkInterfaces.wire_name(),
    )])
    .await;
    h.ok(&[(
        "Action",
        cloud::Action::DescribeNetworkInterfaces.wire_name(),
    )])
    .await;
    // Refused requests count too: a client that retries them is still calling EC2.
    h.err(&[
        (
            "Action",
            cloud::Action::UnassignPrivateIpAddresses.wire_name(),
        ),
        ("NetworkInterfaceId", "eni-00000000000000000"),
        ("PrivateIpAddress.1", "10.0.0.9"),
    ])
    .await;
    h.err(&[]).await;
    let resp = h
        .ec2
        .clone()
        .oneshot(Request::get("/_sim/calls").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let r = common::Reply::from(resp).await;
    assert_eq!(r.status, 200);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(
        v,
        serde_json::json!({cloud::Action::DescribeNetworkInterfaces.wire_name(): 2, cloud::Action::UnassignPrivateIpAddresses.wire_name(): 1, "-": 1})
    );
}
