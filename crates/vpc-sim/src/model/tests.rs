//! Semantics of the model: limits, uniqueness, exhaustion, prefixes, lifecycle rules, lag.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use cloud::limits::InstanceLimits;
use ipnetwork::Ipv4Network;

use super::*;

const T0: u64 = 1_700_000_000_000;

fn topology(subnets: &[&str], nodes: usize, ty: &str) -> Topology {
    Topology {
        vpc_cidr: "10.0.0.0/16".parse().unwrap(),
        secondary_cidrs: vec![],
        region: "us-west-2".into(),
        subnets: subnets
            .iter()
            .map(|s| SubnetSpec::new(s.parse().unwrap()))
            .collect(),
        security_groups: vec![],
        ipv6: false,
        vpc_ipv6_cidr: None,
        nodes,
        instance_type: ty.into(),
        extra_types: vec![(
            "sim.big".into(),
            InstanceLimits {
                max_enis: 15,
                ipv4_per_eni: 50,
                nitro: true,
                bare_metal: false,
                network_cards: 1,
            },
        )],
    }
}

fn build(subnets: &[&str], nodes: usize, ty: &str) -> Model {
    Model::build(&topology(subnets, nodes, ty), Rng::seeded(42), T0).unwrap()
}

fn first_subnet(m: &Model) -> String {
    m.subnets()[0].id.clone()
}

fn only_instance(m: &Model) -> String {
    m.instances()[0].id.clone()
}

fn new_eni(m: &mut Model, subnet: &str) -> String {
    m.create_eni(
        CreateEni {
            subnet_id: subnet.into(),
            ..Default::default()
        },
        T0,
    )
    .unwrap()
    .id
    .clone()
}

#[test]
fn launch_creates_a_primary_eni_at_device_zero() {
    let m = build(&["10.0.0.0/24"], 2, "t3.medium");
    assert_eq!(m.instances().len(), 2);
    for inst in m.instances() {
        let eni = m.eni(&inst.primary_eni).unwrap();
        let att = eni.attachment.as_ref().unwrap();
        assert_eq!((att.device_index, att.delete_on_termination), (0, true));
        assert_eq!(att.instance_id, inst.id);
        assert_eq!(eni.status, EniStatus::InUse);
        assert!(eni.mac.starts_with("02:"));
        assert!(m.subnets()[0].cidr.contains(eni.primary_ip));
        assert!(u32::from(eni.primary_ip) >= u32::from(Ipv4Addr::new(10, 0, 0, 4)));
    }
    assert_eq!(m.subnets()[0].available_ip_address_count(), 251 - 2);
}

#[test]
fn unknown_instance_type_is_refused() {
    let e = Model::build(
        &topology(&["10.0.0.0/24"], 1, "x9.huge"),
        Rng::seeded(1),
        T0,
    )
    .unwrap_err();
    assert_eq!(e.code(), "InvalidInstanceType");
}

#[test]
fn secondary_ip_limit_per_eni_follows_the_instance_type() {
    // t3.medium: 6 IPv4 per ENI, the primary included.
    let mut m = build(&["10.0.0.0/24"], 1, "t3.medium");
    let eni = m.instances()[0].primary_eni.clone();
    let got = m
        .assign_private_ips(&eni, AssignRequest::Count(5), T0)
        .unwrap();
    assert_eq!(got.ips.len(), 5);
    let e = m
        .assign_private_ips(&eni, AssignRequest::Count(1), T0)
        .unwrap_err();
    assert_eq!(e.code(), "PrivateIpAddressLimitExceeded");
    assert_eq!(
        e.to_string(),
        "Number of private addresses will exceed limit."
    );
}

#[test]
fn a_prefix_takes_one_ipv4_slot() {
    let mut m = build(&["10.0.0.0/24"], 1, "t3.medium");
    let eni = m.instances()[0].primary_eni.clone();
    m.assign_private_ips(&eni, AssignRequest::PrefixCount(4), T0)
        .unwrap();
    m.assign_private_ips(&eni, AssignRequest::Count(1), T0)
        .unwrap();
    let e = m
        .assign_private_ips(&eni, AssignRequest::PrefixCount(1), T0)
        .unwrap_err();
    assert_eq!(e.code(), "PrivateIpAddressLimitExceeded");
    assert_eq!(m.eni(&eni).unwrap().ipv4_slots(), 6);
}

#[test]
fn prefixes_need_nitro() {
    let mut m = build(&["10.0.0.0/24"], 1, "c4.large");
    let eni = m.instances()[0].primary_eni.clone();
    let e = m
        .assign_private_ips(&eni, AssignRequest::PrefixCount(1), T0)
        .unwrap_err();
    assert_eq!(e.code(), "InvalidParameterValue");
    assert!(e.to_string().contains("c4.large"), "{e}");
}

#[test]
fn attachment_limit_and_device_index_rules() {
    let mut m = build(&["10.0.0.0/24"], 1, "t3.medium");
    let (inst, subnet) = (only_instance(&m), first_subnet(&m));
    for dev in 1..=2 {
        let eni = new_eni(&mut m, &subnet);
        m.attach_eni(&eni, &inst, dev, 0, T0).unwrap();
    }
    let extra = new_eni(&mut m, &subnet);
    let e = m.attach_eni(&extra, &inst, 2, 0, T0).unwrap_err();
    assert_eq!(e.code(), "InvalidParameterValue");
    assert!(e.to_string().contains("device index '2'"), "{e}");
    let e = m.attach_eni(&extra, &inst, 3, 0, T0).unwrap_err();
    assert_eq!(e.code(), "AttachmentLimitExceeded");
    assert_eq!(
        e.to_string(),
        "Interface count 4 exceeds the limit for t3.medium"
    );
    assert_eq!(m.eni(&extra).unwrap().status, EniStatus::Available);
}

#[test]
fn attaching_an_attached_eni_or_an_overfull_one_fails() {
    let mut m = build(&["10.0.0.0/24"], 1, "t3.medium");
    let (inst, subnet) = (only_instance(&m), first_subnet(&m));
    let primary = m.instances()[0].primary_eni.clone();
    assert_eq!(
        m.attach_eni(&primary, &inst, 1, 0, T0).unwrap_err().code(),
        "InvalidNetworkInterface.InUse"
    );
    let big = m
        .create_eni(
            CreateEni {
                subnet_id: subnet,
                secondary_count: 9,
                ..Default::default()
            },
            T0,
        )
        .unwrap()
        .id
        .clone();
    assert_eq!(
        m.attach_eni(&big, &inst, 1, 0, T0).unwrap_err().code(),
        "PrivateIpAddressLimitExceeded"
    );
}

#[test]
fn addresses_stay_unique_across_many_assigns_and_subnets() {
    let mut m = build(&["10.0.0.0/24", "10.0.1.0/25"], 3, "sim.big");
    let subnets: Vec<String> = m.subnets().iter().map(|s| s.id.clone()).collect();
    let instances: Vec<String> = m.instances().iter().map(|i| i.id.clone()).collect();
    for (n, inst) in instances.iter().enumerate() {
        for dev in 1..4 {
            let subnet = &subnets[(n + dev as usize) % 2];
            let eni = new_eni(&mut m, subnet);
            m.attach_eni(&eni, inst, dev, 0, T0).unwrap();
            // Mix single addresses and prefixes; stop quietly when a subnet runs out.
            let _ = m.assign_private_ips(&eni, AssignRequest::Count(7), T0);
            let _ = m.assign_private_ips(&eni, AssignRequest::PrefixCount(1), T0);
            let _ = m.assign_private_ips(&eni, AssignRequest::Count(3), T0);
        }
    }
    let mut seen = HashSet::new();
    let mut used_per_subnet = std::collections::HashMap::<String, u32>::new();
    for eni in m.enis() {
        let subnet = m.subnet(&eni.subnet_id).unwrap();
        let mut addrs: Vec<Ipv4Addr> = eni.private_ips().collect();
        for p in &eni.prefixes {
            assert_eq!(p.value.prefix(), 28);
            assert_eq!(p.value.ip(), p.value.network(), "{} not aligned", p.value);
            addrs.extend(p.value.iter());
        }
        for a in addrs {
            assert!(subnet.cidr.contains(a), "{a} outside {}", subnet.cidr);
            assert!(seen.insert(a), "{a} handed out twice");
            let off = u32::from(a) - u32::from(subnet.cidr.network());
            assert!(off >= 4 && a != subnet.cidr.broadcast(), "{a} is reserved");
            *used_per_subnet.entry(subnet.id.clone()).or_default() += 1;
        }
    }
    for s in m.subnets() {
        let used = used_per_subnet.get(&s.id).copied().unwrap_or(0);
        assert_eq!(
            s.available_ip_address_count(),
            s.cidr.size() - 5 - used,
            "{}",
            s.cidr
        );
    }
}

#[test]
fn a_28_subnet_runs_out_with_the_right_error_and_nothing_half_done() {
    let mut m = build(&["10.0.0.0/28"], 1, "sim.big");
    let subnet = first_subnet(&m);
    assert_eq!(m.subnet(&subnet).unwrap().available_ip_address_count(), 10);
    let eni = m
        .create_eni(
            CreateEni {
                subnet_id: subnet.clone(),
                secondary_count: 6,
                ..Default::default()
            },
            T0,
        )
        .unwrap()
        .id
        .clone();
    assert_eq!(m.subnet(&subnet).unwrap().available_ip_address_count(), 3);
    let e = m
        .assign_private_ips(&eni, AssignRequest::Count(4), T0)
        .unwrap_err();
    assert_eq!(e.code(), "InsufficientFreeAddressesInSubnet");
    assert_eq!(
        m.subnet(&subnet).unwrap().available_ip_address_count(),
        3,
        "all or nothing"
    );
    assert_eq!(m.eni(&eni).unwrap().secondary_ips.len(), 6);
    m.assign_private_ips(&eni, AssignRequest::Count(3), T0)
        .unwrap();
    let e = m
        .create_eni(
            CreateEni {
                subnet_id: subnet.clone(),
                ..Default::default()
            },
            T0,
        )
        .unwrap_err();
    assert_eq!(e.code(), "InsufficientFreeAddressesInSubnet");
    // A /28 subnet never has a free /28: its only block holds the reserved addresses.
    let e = m
        .assign_private_ips(&eni, AssignRequest::PrefixCount(1), T0)
        .unwrap_err();
    assert_eq!(e.code(), "InsufficientCidrBlocks");
}

#[test]
fn prefixes_are_aligned_disjoint_and_avoid_used_addresses() {
    let mut m = build(&["10.0.0.0/25"], 1, "sim.big");
    let eni = m.instances()[0].primary_eni.clone();
    // Primary .4 and secondaries .5-.16: the second block (.16/28) is no longer free.
    m.assign_private_ips(&eni, AssignRequest::Count(12), T0)
        .unwrap();
    let got = m
        .assign_private_ips(&eni, AssignRequest::PrefixCount(5), T0)
        .unwrap();
    assert!(got.ips.is_empty());
    let mut blocks: Vec<Ipv4Network> = got.prefixes.clone();
    blocks.sort();
    blocks.dedup();
    assert_eq!(blocks.len(), 5);
    for p in &got.prefixes {
        assert_eq!((p.prefix(), p.ip()), (28, p.network()));
        assert!(!p.contains(m.eni(&eni).unwrap().primary_ip));
        for s in &m.eni(&eni).unwrap().secondary_ips {
            assert!(!p.contains(s.value), "{p} holds secondary {}", s.value);
        }
    }
    // /25 = 8 blocks: .0/28 is reserved, .16/28 used, .112/28 holds the broadcast.
    let e = m
        .assign_private_ips(&eni, AssignRequest::PrefixCount(1), T0)
        .unwrap_err();
    assert_eq!(e.code(), "InsufficientCidrBlocks");
    // A specific prefix that overlaps one in use is refused.
    let taken = got.prefixes[0];
    let e = m
        .assign_private_ips(&eni, AssignRequest::Prefixes(vec![taken]), T0)
        .unwrap_err();
    assert_eq!(e.code(), "InvalidParameterValue");
}

#[test]
fn specific_addresses_are_unique_across_the_vpc() {
    let mut m = build(&["10.0.0.0/24"], 1, "t3.medium");
    let eni = m.instances()[0].primary_eni.clone();
    let ip: Ipv4Addr = "10.0.0.77".parse().unwrap();
    m.assign_private_ips(&eni, AssignRequest::Addresses(vec![ip]), T0)
        .unwrap();
    assert!(m.address_in_use(ip));
    let e = m
        .create_eni(
            CreateEni {
                subnet_id: first_subnet(&m),
                primary_ip: Some(ip),
                ..Default::default()
            },
            T0,
        )
        .unwrap_err();
    assert_eq!(e.code(), "InvalidIPAddress.InUse");
    let e = m
        .assign_private_ips(
            &eni,
            AssignRequest::Addresses(vec!["10.0.0.2".parse().unwrap()]),
            T0,
        )
        .unwrap_err();
    assert_eq!(e.code(), "InvalidParameterValue");
    let e = m
        .assign_private_ips(
            &eni,
            AssignRequest::Addresses(vec!["10.0.9.9".parse().unwrap()]),
            T0,
        )
        .unwrap_err();
    assert_eq!(e.code(), "InvalidParameterValue");
}

#[test]
fn unassign_rules() {
    let mut m = build(&["10.0.0.0/24"], 1, "t3.medium");
    let eni = m.instances()[0].primary_eni.clone();
    let subnet = first_subnet(&m);
    let got = m
        .assign_private_ips(&eni, AssignRequest::Count(2), T0)
        .unwrap();
    let before = m.subnet(&subnet).unwrap().available_ip_address_count();

    let stranger: Ipv4Addr = "10.0.0.200".parse().unwrap();
    let e = m
        .unassign_private_ips(&eni, &[got.ips[0], stranger], &[])
        .unwrap_err();
    assert_eq!(e.code(), "InvalidParameterValue");
    assert_eq!(
        e.to_string(),
        format!("Some of the specified addresses are not assigned to interface {eni}")
    );
    assert_eq!(
        m.eni(&eni).unwrap().secondary_ips.len(),
        2,
        "nothing removed on error"
    );

    let primary = m.eni(&eni).unwrap().primary_ip;
    assert_eq!(
        m.unassign_private_ips(&eni, &[primary], &[])
            .unwrap_err()
            .code(),
        "InvalidParameterValue"
    );

    m.unassign_private_ips(&eni, &[got.ips[0]], &[]).unwrap();
    assert_eq!(
        m.subnet(&subnet).unwrap().available_ip_address_count(),
        before + 1
    );
    assert!(!m.address_in_use(got.ips[0]));
}

#[test]
fn detach_and_delete_rules() {
    let mut m = build(&["10.0.0.0/24"], 1, "t3.medium");
    let (inst, subnet) = (only_instance(&m), first_subnet(&m));
    let primary = m.instances()[0].primary_eni.clone();
    let primary_att = m.eni(&primary).unwrap().attachment.clone().unwrap().id;
    assert_eq!(
        m.detach_eni(&primary_att, true).unwrap_err().code(),
        "OperationNotPermitted"
    );
    assert_eq!(
        m.delete_eni(&primary).unwrap_err().code(),
        "InvalidNetworkInterface.InUse"
    );
    assert_eq!(
        m.detach_eni("eni-attach-0123456789abcdef0", false)
            .unwrap_err()
            .code(),
        "InvalidAttachmentID.NotFound"
    );

    let before = m.subnet(&subnet).unwrap().available_ip_address_count();
    let eni = m
        .create_eni(
            CreateEni {
                subnet_id: subnet.clone(),
                secondary_count: 3,
                ..Default::default()
            },
            T0,
        )
        .unwrap()
        .id
        .clone();
    let att = m.attach_eni(&eni, &inst, 1, 0, T0).unwrap();
    assert!(att.starts_with("eni-attach-"));
    assert_eq!(
        m.delete_eni(&eni).unwrap_err().code(),
        "InvalidNetworkInterface.InUse"
    );
    assert_eq!(m.detach_eni(&att, false).unwrap(), eni);
    assert_eq!(m.eni(&eni).unwrap().status, EniStatus::Available);
    m.delete_eni(&eni).unwrap();
    assert_eq!(
        m.eni(&eni).unwrap_err().code(),
        "InvalidNetworkInterfaceID.NotFound"
    );
    assert_eq!(
        m.subnet(&subnet).unwrap().available_ip_address_count(),
        before
    );
    assert_eq!(
        m.delete_eni(&eni).unwrap_err().code(),
        "InvalidNetworkInterfaceID.NotFound"
    );
    assert_eq!(
        m.delete_eni("eni-bogus").unwrap_err().code(),
        "InvalidNetworkInterfaceID.Malformed"
    );
}

#[test]
fn delete_on_termination_decides_what_termination_deletes() {
    let mut m = build(&["10.0.0.0/24"], 1, "t3.medium");
    let (inst, subnet) = (only_instance(&m), first_subnet(&m));
    let primary = m.instances()[0].primary_eni.clone();
    let keep = new_eni(&mut m, &subnet);
    let drop = new_eni(&mut m, &subnet);
    m.attach_eni(&keep, &inst, 1, 0, T0).unwrap();
    let drop_att = m.attach_eni(&drop, &inst, 2, 0, T0).unwrap();
    assert!(
        !m.eni(&drop)
            .unwrap()
            .attachment
            .as_ref()
            .unwrap()
            .delete_on_termination
    );

    let wrong = EniChange::DeleteOnTermination {
        attachment_id: "eni-attach-0000000000000000a".into(),
        value: true,
    };
    assert_eq!(
        m.modify_eni(&drop, wrong).unwrap_err().code(),
        "InvalidAttachmentID.NotFound"
    );
    m.modify_eni(
        &drop,
        EniChange::DeleteOnTermination {
            attachment_id: drop_att,
            value: true,
        },
    )
    .unwrap();
    assert!(
        m.eni(&drop)
            .unwrap()
            .attachment
            .as_ref()
            .unwrap()
            .delete_on_termination
    );

    let mut deleted = m.terminate_instance(&inst).unwrap();
    deleted.sort();
    let mut expect = vec![primary, drop];
    expect.sort();
    assert_eq!(deleted, expect);
    assert_eq!(m.eni(&keep).unwrap().status, EniStatus::Available);
    assert_eq!(
        m.instance(&inst).unwrap_err().code(),
        "InvalidInstanceID.NotFound"
    );
}

#[test]
fn create_eni_validates_its_inputs() {
    let mut m = build(&["10.0.0.0/24"], 1, "t3.medium");
    let subnet = first_subnet(&m);
    let both = CreateEni {
        subnet_id: subnet.clone(),
        secondary_count: 1,
        prefix_count: 1,
        ..Default::default()
    };
    assert_eq!(
        m.create_eni(both, T0).unwrap_err().code(),
        "InvalidParameterCombination"
    );
    let sg = CreateEni {
        subnet_id: subnet.clone(),
        security_groups: vec!["sg-00000001".into()],
        ..Default::default()
    };
    assert_eq!(
        m.create_eni(sg, T0).unwrap_err().code(),
        "InvalidGroup.NotFound"
    );
    let missing = CreateEni {
        subnet_id: "subnet-0123456789abcdef0".into(),
        ..Default::default()
    };
    assert_eq!(
        m.create_eni(missing, T0).unwrap_err().code(),
        "InvalidSubnetID.NotFound"
    );
    let too_many = CreateEni {
        subnet_id: subnet,
        secondary_count: 50,
        ..Default::default()
    };
    assert_eq!(
        m.create_eni(too_many, T0).unwrap_err().code(),
        "PrivateIpAddressLimitExceeded"
    );
}

#[test]
fn tags_need_known_resources() {
    let mut m = build(&["10.0.0.0/24"], 1, "t3.medium");
    let eni = m.instances()[0].primary_eni.clone();
    let tags: Tags = [("k".to_string(), "v".to_string())].into();
    m.create_tags(&[eni.clone(), m.vpc().id.clone()], &tags)
        .unwrap();
    assert_eq!(
        m.eni(&eni).unwrap().tags.get("k").map(String::as_str),
        Some("v")
    );
    let e = m
        .create_tags(&[eni, "eni-0000000000000000f".into()], &tags)
        .unwrap_err();
    assert_eq!(e.code(), "InvalidNetworkInterfaceID.NotFound");
}

#[test]
fn imds_view_lags_attachments_and_new_addresses() {
    let lag = 2_000;
    let mut m = build(&["10.0.0.0/24"], 1, "t3.medium");
    let (inst, subnet) = (only_instance(&m), first_subnet(&m));
    // Whatever existed at launch is visible at once, whatever the lag.
    let v = m.imds_view(&inst, T0, lag).unwrap();
    assert_eq!(v.interfaces.len(), 1);

    let t1 = T0 + 10_000;
    let eni = new_eni(&mut m, &subnet);
    m.attach_eni(&eni, &inst, 1, 0, t1).unwrap();
    let primary = m.instances()[0].primary_eni.clone();
    let got = m
        .assign_private_ips(&primary, AssignRequest::Count(1), t1)
        .unwrap();

    let before = m.imds_view(&inst, t1 + lag - 1, lag).unwrap();
    assert_eq!(before.interfaces.len(), 1);
    assert_eq!(before.interfaces[0].ipv4s.len(), 1);

    let after = m.imds_view(&inst, t1 + lag, lag).unwrap();
    assert_eq!(after.interfaces.len(), 2);
    assert_eq!(after.interfaces[1].eni_id, eni);
    assert_eq!(after.interfaces[1].device_number, 1);
    assert_eq!(after.interfaces[0].ipv4s[1], got.ips[0]);
    assert_eq!(
        after.interfaces[0].ipv4s[0],
        m.eni(&primary).unwrap().primary_ip,
        "primary first"
    );

    // Without lag everything is visible immediately.
    assert_eq!(m.imds_view(&inst, t1, 0).unwrap().interfaces.len(), 2);
}

#[test]
fn names_derived_from_region() {
    let ip: Ipv4Addr = "10.0.0.5".parse().unwrap();
    assert_eq!(
        private_dns_name("us-west-2", ip),
        "ip-10-0-0-5.us-west-2.compute.internal"
    );
    assert_eq!(
        private_dns_name("us-east-1", ip),
        "ip-10-0-0-5.ec2.internal"
    );
    assert_eq!(az_id("us-west-2a"), "usw2-az1");
    assert_eq!(az_id("eu-central-1b"), "euc1-az2");
}

#[test]
fn a_client_token_makes_create_idempotent_and_refuses_other_parameters() {
    let mut m = build(&["10.0.0.0/24"], 1, "t3.medium");
    let subnet = m.subnets()[0].id.clone();
    let req = CreateEni {
        subnet_id: subnet.clone(),
        secondary_count: 2,
        client_token: Some("tok-1".into()),
        ..Default::default()
    };
    let first = m.create_eni(req.clone(), T0).unwrap();
    let again = m.create_eni(req.clone(), T0 + 1).unwrap();
    assert_eq!(
        again.id, first.id,
        "the same token and request: the same ENI"
    );
    assert_eq!(again.secondary_ips, first.secondary_ips);
    assert_eq!(m.enis().count(), 2, "the primary and one new ENI, not two");

    let other = CreateEni {
        secondary_count: 3,
        ..req.clone()
    };
    assert_eq!(
        m.create_eni(other, T0).unwrap_err().code(),
        "IdempotentParameterMismatch"
    );

    // Deleted since: EC2 still answers with that ENI, and creates no other.
    m.delete_eni(&first.id).unwrap();
    assert_eq!(m.create_eni(req, T0).unwrap().id, first.id);
    assert_eq!(m.enis().count(), 1);

    // Without a token every request creates an ENI.
    let untokened = CreateEni {
        subnet_id: subnet,
        ..Default::default()
    };
    let a = m.create_eni(untokened.clone(), T0).unwrap().id;
    let b = m.create_eni(untokened, T0).unwrap().id;
    assert_ne!(a, b);
}

/// A VPC with a secondary CIDR: the nodes' subnet (AZ a), a tagged pod subnet in AZ a, and a
/// pod subnet in AZ b with one node of its own.
fn multi_az(nodes: usize) -> Model {
    let spec = |cidr: &str, az: Option<&str>, tags: &[(&str, &str)], nodes| SubnetSpec {
        cidr: cidr.parse().unwrap(),
        az: az.map(str::to_string),
        tags: tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        nodes,
        fragment: Fragment::None,
    };
    let t = Topology {
        secondary_cidrs: vec!["100.64.0.0/16".parse().unwrap()],
        subnets: vec![
            spec("10.0.0.0/24", None, &[], None),
            spec(
                "100.64.1.0/24",
                Some("us-west-2a"),
                &[("kubernetes.io/role/cni", "1")],
                None,
            ),
            spec("100.64.2.0/24", Some("us-west-2b"), &[], Some(1)),
        ],
        security_groups: vec!["pods".into()],
        ..topology(&[], nodes, "t3.medium")
    };
    Model::build(&t, Rng::seeded(42), T0).unwrap()
}

#[test]
fn subnets_in_a_secondary_cidr_and_other_azs_with_their_nodes() {
    let m = multi_az(3);
    assert_eq!(
        m.vpc().cidrs(),
        ["10.0.0.0/16", "100.64.0.0/16"].map(|c| c.parse().unwrap())
    );
    let s = m.subnets();
    let azs: Vec<&str> = s.iter().map(|s| s.az.as_str()).collect();
    assert_eq!(azs, ["us-west-2a", "us-west-2a", "us-west-2b"]);
    assert_eq!(
        s[1].tags.get("kubernetes.io/role/cni").map(String::as_str),
        Some("1")
    );
    // The first subnet takes the nodes no other asks for, and launches first.
    let placed: Vec<(&str, &str)> = m
        .instances()
        .iter()
        .map(|i| (i.subnet_id.as_str(), i.az.as_str()))
        .collect();
    assert_eq!(
        placed,
        [
            (s[0].id.as_str(), "us-west-2a"),
            (s[0].id.as_str(), "us-west-2a"),
            (s[2].id.as_str(), "us-west-2b")
        ]
    );
    let in_b = m.instances()[2];
    let eni = m.eni(&in_b.primary_eni).unwrap();
    assert!(s[2].cidr.contains(eni.primary_ip), "{}", eni.primary_ip);
    assert_eq!(eni.az, "us-west-2b");
    let view = m.imds_view(&in_b.id, T0, 0).unwrap();
    assert_eq!(view.az, "us-west-2b");
    let i = &view.interfaces[0];
    assert_eq!(i.vpc_cidrs, m.vpc().cidrs());
    assert_eq!(i.subnet_cidr.to_string(), "100.64.2.0/24");
}

#[test]
fn available_counts_follow_allocations_in_a_secondary_cidr() {
    let mut m = multi_az(2);
    let pods = m.subnets()[1].id.clone();
    let free = |m: &Model| m.subnet(&pods).unwrap().available_ip_address_count();
    assert_eq!(free(&m), 251);
    let eni = m
        .create_eni(
            CreateEni {
                subnet_id: pods.clone(),
                secondary_count: 3,
                ..Default::default()
            },
            T0,
        )
        .unwrap();
    assert!(eni.private_ips().all(|ip| ip.octets()[..3] == [100, 64, 1]));
    assert_eq!(free(&m), 251 - 4);
    let inst = m.instances()[0].id.clone();
    m.attach_eni(&eni.id, &inst, 1, 0, T0).unwrap();
    let added = m
        .assign_private_ips(&eni.id, AssignRequest::Count(2), T0)
        .unwrap()
        .ips;
    assert_eq!(free(&m), 251 - 6);
    m.unassign_private_ips(&eni.id, &added[..1], &[]).unwrap();
    assert_eq!(free(&m), 251 - 5);
}

#[test]
fn an_eni_attaches_only_to_an_instance_of_its_az() {
    let mut m = multi_az(2);
    let (in_a, in_b) = (m.instances()[0].id.clone(), m.instances()[1].id.clone());
    let subnet_b = m.subnets()[2].id.clone();
    let eni = new_eni(&mut m, &subnet_b);
    let e = m.attach_eni(&eni, &in_a, 1, 0, T0).unwrap_err();
    assert_eq!(e.code(), "InvalidParameterCombination", "{e}");
    m.attach_eni(&eni, &in_b, 1, 0, T0).unwrap();
}

#[test]
fn bad_cidrs_azs_and_placements_are_refused() {
    let build_err = |f: &dyn Fn(&mut Topology)| {
        let mut t = topology(&["10.0.0.0/24"], 2, "t3.medium");
        f(&mut t);
        Model::build(&t, Rng::seeded(1), T0)
            .unwrap_err()
            .to_string()
    };
    let e = build_err(&|t| {
        t.subnets
            .push(SubnetSpec::new("100.64.1.0/24".parse().unwrap()))
    });
    assert!(e.contains("inside a CIDR of the VPC (10.0.0.0/16)"), "{e}");
    let e = build_err(&|t| t.secondary_cidrs = vec!["10.0.128.0/17".parse().unwrap()]);
    assert!(e.contains("overlaps 10.0.0.0/16"), "{e}");
    let e = build_err(&|t| {
        t.secondary_cidrs = vec![
            "100.64.0.0/16".parse().unwrap(),
            "100.64.0.0/20".parse().unwrap(),
        ]
    });
    assert!(e.contains("overlaps 100.64.0.0/16"), "{e}");
    let e = build_err(&|t| t.secondary_cidrs = vec!["100.64.0.0/12".parse().unwrap()]);
    assert!(e.contains("/16 to /28"), "{e}");
    let e = build_err(&|t| t.subnets[0].az = Some("us-east-1a".into()));
    assert!(
        e.contains("Value (us-east-1a) for parameter availabilityZone"),
        "{e}"
    );
    let e = build_err(&|t| t.subnets[0].az = Some("us-west-2ab".into()));
    assert!(e.contains("us-west-2ab"), "{e}");
    let e = build_err(&|t| t.subnets[0].nodes = Some(1));
    assert!(
        e.contains("the first takes the nodes no other subnet takes"),
        "{e}"
    );
    let e = build_err(&|t| {
        let mut s = SubnetSpec::new("10.0.1.0/24".parse().unwrap());
        s.nodes = Some(3);
        t.subnets.push(s);
    });
    assert!(
        e.contains("3 nodes are asked for in later subnets, but there are only 2"),
        "{e}"
    );
}

#[test]
fn security_groups_are_created_checked_and_carried_by_enis() {
    let mut m = multi_az(1);
    let vpc = m.vpc().id.clone();
    let default = m.vpc().default_security_group.clone();
    let pods = m
        .security_groups()
        .find(|g| g.name == "pods")
        .unwrap()
        .id
        .clone();
    let web = m
        .create_security_group("web", "web servers", &vpc, Tags::new())
        .unwrap();
    assert_eq!(
        (m.group_name(&web.id), m.group_name(&default)),
        ("web", "default")
    );
    for (name, vpc_id, code) in [
        ("web", vpc.as_str(), "InvalidGroup.Duplicate"),
        ("default", vpc.as_str(), "InvalidGroup.Duplicate"),
        ("sg-1", vpc.as_str(), "InvalidParameterValue"),
        ("other", "vpc-0123456789abcdef0", "InvalidVpcID.NotFound"),
    ] {
        let e = m
            .create_security_group(name, "d", vpc_id, Tags::new())
            .unwrap_err();
        assert_eq!(e.code(), code, "{name}: {e}");
    }
    let e = m
        .create_security_group("web", "d", &vpc, Tags::new())
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("The security group 'web' already exists for VPC '{vpc}'")
    );

    let subnet = m.subnets()[1].id.clone();
    let with = |groups: &[&str]| CreateEni {
        subnet_id: subnet.clone(),
        security_groups: groups.iter().map(|g| g.to_string()).collect(),
        ..Default::default()
    };
    let eni = m.create_eni(with(&[&pods, &web.id, &pods]), T0).unwrap();
    assert_eq!(eni.security_groups, [pods.clone(), web.id.clone()]);
    let e = m
        .create_eni(with(&[&pods, "sg-0123456789abcdef0"]), T0)
        .unwrap_err();
    assert_eq!(
        (e.code(), e.to_string().as_str()),
        (
            "InvalidGroup.NotFound",
            "The security group 'sg-0123456789abcdef0' does not exist"
        )
    );
    let e = m.create_eni(with(&["pods"]), T0).unwrap_err();
    assert_eq!(e.code(), "InvalidGroupId.Malformed");
    let e = m
        .modify_eni(
            &eni.id,
            EniChange::SecurityGroups(vec!["sg-0000000f".into()]),
        )
        .unwrap_err();
    assert_eq!(e.code(), "InvalidGroup.NotFound");
    m.modify_eni(&eni.id, EniChange::SecurityGroups(vec![default.clone()]))
        .unwrap();
    assert_eq!(m.eni(&eni.id).unwrap().security_groups, [default]);
}

#[test]
fn tags_are_created_and_deleted_on_every_taggable_resource() {
    let mut m = multi_az(1);
    let subnet = m.subnets()[0].id.clone();
    let group = m.vpc().default_security_group.clone();
    let ids = [subnet.clone(), group.clone()];
    let tags: Tags = [("a", "1"), ("b", "2"), ("c", "")]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
    m.create_tags(&ids, &tags).unwrap();
    let of = |m: &Model, id: &str| -> Vec<String> {
        let tags = if id.starts_with("sg-") {
            &m.security_groups().find(|g| g.id == id).unwrap().tags
        } else {
            &m.subnet(id).unwrap().tags
        };
        tags.keys().cloned().collect()
    };
    assert_eq!(of(&m, &group), ["a", "b", "c"]);
    let filter = |key: &str, value: Option<&str>| TagFilter {
        key: key.into(),
        value: value.map(str::to_string),
    };
    // A value that does not match keeps the tag; a key alone or the right value removes it.
    m.delete_tags(
        &ids,
        &[
            filter("a", Some("9")),
            filter("b", None),
            filter("c", Some("")),
        ],
    )
    .unwrap();
    assert_eq!(of(&m, &subnet), ["a"]);
    assert_eq!(of(&m, &group), ["a"]);
    // One unknown id: nothing is touched.
    let e = m
        .delete_tags(&[subnet.clone(), "sg-0123456789abcdef0".into()], &[])
        .unwrap_err();
    assert_eq!(e.code(), "InvalidGroup.NotFound");
    assert_eq!(of(&m, &subnet), ["a"]);
    m.delete_tags(std::slice::from_ref(&subnet), &[]).unwrap();
    assert!(of(&m, &subnet).is_empty());
    let e = m
        .create_tags(&["vpc-0123456789abcdef0".into()], &tags)
        .unwrap_err();
    assert_eq!(e.code(), "InvalidVpcID.NotFound");
}
