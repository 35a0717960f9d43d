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
        region: "us-west-2".into(),
        subnets: subnets.iter().map(|s| s.parse().unwrap()).collect(),
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
