//! IPv6 in the model: the VPC's /56 and the subnets' /64s, ENI addresses and /80 prefixes,
//! limits, release and reuse, and what IMDS sees.

use std::collections::HashSet;
use std::net::Ipv6Addr;

use cloud::limits::InstanceLimits;
use ipnetwork::Ipv6Network;

use super::*;

const T0: u64 = 1_700_000_000_000;

fn topology(subnets: &[&str], nodes: usize, ty: &str, ipv6: bool) -> Topology {
    Topology {
        vpc_cidr: "10.0.0.0/16".parse().unwrap(),
        secondary_cidrs: vec![],
        region: "us-west-2".into(),
        subnets: subnets
            .iter()
            .map(|s| SubnetSpec::new(s.parse().unwrap()))
            .collect(),
        security_groups: vec![],
        ipv6,
        vpc_ipv6_cidr: None,
        nodes,
        instance_type: ty.into(),
        extra_types: vec![(
            "sim.tiny".into(),
            InstanceLimits {
                max_enis: 2,
                ipv4_per_eni: 4,
                nitro: true,
                bare_metal: false,
                network_cards: 1,
            },
        )],
    }
}

fn dual(subnets: &[&str], nodes: usize, ty: &str) -> Model {
    Model::build(&topology(subnets, nodes, ty, true), Rng::seeded(42), T0).unwrap()
}

fn primary_eni(m: &Model, node: usize) -> String {
    m.instances()[node].primary_eni.clone()
}

fn net(s: &str) -> Ipv6Network {
    s.parse().unwrap()
}

#[test]
fn an_ipv4_model_has_no_ipv6_and_draws_nothing_for_it() {
    let t = topology(&["10.0.0.0/24", "10.0.1.0/24"], 2, "t3.medium", false);
    let m = Model::build(&t, Rng::seeded(42), T0).unwrap();
    assert_eq!(m.vpc().ipv6_cidr, None);
    assert!(m.subnets().iter().all(|s| s.ipv6.is_none()));
    assert!(m.enis().all(|e| e.ipv6_slots() == 0));
    // The JSON of /_sim/state is what it was before IPv6: no IPv6 key anywhere.
    let json = serde_json::to_string(&m.snapshot()).unwrap();
    assert!(!json.contains("ipv6"), "{json}");
    // Same seed, IPv6 on: the VPC's id is the same (drawn first), the /56 comes after.
    let v6 = Model::build(
        &topology(&["10.0.0.0/24"], 1, "t3.medium", true),
        Rng::seeded(42),
        T0,
    )
    .unwrap();
    assert_eq!(v6.vpc().id, m.vpc().id);
}

#[test]
fn the_vpc_gets_a_56_and_each_subnet_the_64_of_its_position() {
    let m = dual(
        &["10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24"],
        1,
        "t3.medium",
    );
    let vpc6 = m.vpc().ipv6_cidr.unwrap();
    assert_eq!(vpc6.prefix(), 56);
    assert_eq!(vpc6.ip(), vpc6.network());
    assert!(VPC_V6_POOL.contains(vpc6.network()), "{vpc6}");
    let base = u128::from(vpc6.network());
    for (i, s) in m.subnets().iter().enumerate() {
        let c = s.ipv6_cidr().unwrap();
        assert_eq!(c.prefix(), 64);
        assert_eq!(u128::from(c.network()), base | ((i as u128) << 64), "{c}");
        assert!(s.assign_ipv6_on_creation());
        let assoc = &s.ipv6.as_ref().unwrap().association_id;
        assert!(well_formed(assoc, "subnet-cidr-assoc"), "{assoc}");
    }
    // Reproducible from the seed, different for another seed.
    let again = dual(&["10.0.0.0/24"], 1, "t3.medium");
    assert_eq!(again.vpc().ipv6_cidr, Some(vpc6));
    let other = Model::build(
        &topology(&["10.0.0.0/24"], 1, "t3.medium", true),
        Rng::seeded(43),
        T0,
    )
    .unwrap();
    assert_ne!(other.vpc().ipv6_cidr, Some(vpc6));
}

#[test]
fn cidr_associations_are_checked() {
    let mut m = Model::build(
        &topology(&["10.0.0.0/24", "10.0.1.0/24"], 1, "t3.medium", false),
        Rng::seeded(1),
        T0,
    )
    .unwrap();
    let (a, b) = (m.subnets()[0].id.clone(), m.subnets()[1].id.clone());
    let e = m.associate_subnet_ipv6_cidr(&a, None).unwrap_err();
    assert!(e.to_string().contains("no IPv6 CIDR"), "{e}");
    assert!(m.add_vpc_ipv6_cidr(Some(net("2001:db8:1::/48"))).is_err());
    assert!(m.add_vpc_ipv6_cidr(Some(net("2001:db8:1:1::/56"))).is_err());
    m.add_vpc_ipv6_cidr(Some(net("2001:db8:1:100::/56")))
        .unwrap();
    assert!(m.add_vpc_ipv6_cidr(None).is_err(), "one /56 only");
    for bad in [
        "2001:db8:1:200::/64",
        "2001:db8:1:100::/63",
        "2001:db8:1:100::1/64",
    ] {
        assert_eq!(
            m.associate_subnet_ipv6_cidr(&a, Some(net(bad)))
                .unwrap_err()
                .code(),
            "InvalidParameterValue",
            "{bad}"
        );
    }
    let chosen = net("2001:db8:1:1a0::/64");
    assert_eq!(m.associate_subnet_ipv6_cidr(&a, Some(chosen)), Ok(chosen));
    assert!(
        m.associate_subnet_ipv6_cidr(&a, None).is_err(),
        "one per subnet"
    );
    assert!(
        m.associate_subnet_ipv6_cidr(&b, Some(chosen)).is_err(),
        "taken"
    );
    assert_eq!(
        m.associate_subnet_ipv6_cidr(&b, None).unwrap(),
        net("2001:db8:1:100::/64")
    );
}

#[test]
fn launched_and_created_enis_get_one_ipv6_address_and_ipv4_only_subnets_none() {
    let mut m = dual(&["10.0.0.0/24"], 2, "t3.medium");
    let subnet6 = m.subnets()[0].ipv6_cidr().unwrap();
    let firsts: Vec<Ipv6Addr> = (0..2)
        .map(|n| m.eni(&primary_eni(&m, n)).unwrap().ipv6_addresses[0].value)
        .collect();
    assert!(firsts.iter().all(|a| subnet6.contains(*a)));
    assert_ne!(firsts[0], firsts[1]);
    let subnet = m.subnets()[0].id.clone();
    let eni = m
        .create_eni(
            CreateEni {
                subnet_id: subnet.clone(),
                ..CreateEni::default()
            },
            T0,
        )
        .unwrap();
    assert_eq!(eni.ipv6_addresses.len(), 1);
    let none = m
        .create_eni(
            CreateEni {
                subnet_id: subnet.clone(),
                ipv6_address_count: Some(0),
                ..CreateEni::default()
            },
            T0,
        )
        .unwrap();
    assert!(none.ipv6_addresses.is_empty());
    let three = m
        .create_eni(
            CreateEni {
                subnet_id: subnet,
                ipv6_address_count: Some(3),
                ..CreateEni::default()
            },
            T0,
        )
        .unwrap();
    assert_eq!(three.ipv6_addresses.len(), 3);

    // A subnet added without an IPv6 CIDR in the same VPC: nothing IPv6, and asking fails.
    let plain = m
        .add_subnet("10.0.9.0/24".parse().unwrap(), None, Tags::new())
        .unwrap();
    let v4 = m
        .create_eni(
            CreateEni {
                subnet_id: plain.clone(),
                ..CreateEni::default()
            },
            T0,
        )
        .unwrap();
    assert!(v4.ipv6_addresses.is_empty());
    let e = m
        .create_eni(
            CreateEni {
                subnet_id: plain.clone(),
                ipv6_address_count: Some(1),
                ..CreateEni::default()
            },
            T0,
        )
        .unwrap_err();
    assert_eq!(e, ModelError::SubnetWithoutIpv6(plain.clone()));
    let e = m
        .assign_ipv6(&v4.id, Assign6Request::PrefixCount(1), T0)
        .unwrap_err();
    assert_eq!(e, ModelError::SubnetWithoutIpv6(plain));
    assert_eq!(e.code(), "InvalidParameterValue");
}

#[test]
fn prefixes_and_addresses_are_assigned_within_the_limit_all_or_nothing() {
    // t3.medium: 6 IPv6 per ENI; the primary holds one address already.
    let mut m = dual(&["10.0.0.0/24"], 1, "t3.medium");
    let eni = primary_eni(&m, 0);
    let got = m
        .assign_ipv6(&eni, Assign6Request::PrefixCount(1), T0)
        .unwrap();
    assert_eq!(got.prefixes.len(), 1);
    assert_eq!(got.prefixes[0].prefix(), PREFIX_V6_LEN);
    let subnet6 = m.subnets()[0].ipv6_cidr().unwrap();
    assert!(subnet6.contains(got.prefixes[0].network()));
    let more = m.assign_ipv6(&eni, Assign6Request::Count(3), T0).unwrap();
    assert_eq!(more.addresses.len(), 3);
    assert!(more.prefixes.is_empty());
    let before = m.clone();
    let e = m
        .assign_ipv6(&eni, Assign6Request::Count(2), T0)
        .unwrap_err();
    assert_eq!(
        e,
        ModelError::Ipv6Limit {
            eni_id: eni.clone(),
            limit: 6
        }
    );
    assert_eq!(
        serde_json::to_string(&m.snapshot()).unwrap(),
        serde_json::to_string(&before.snapshot()).unwrap(),
        "a refused call changes nothing"
    );
    m.assign_ipv6(&eni, Assign6Request::Count(1), T0).unwrap();
    assert_eq!(m.eni(&eni).unwrap().ipv6_slots(), 6);

    // Specific ones: one taken elsewhere fails the whole call.
    let mut m = dual(&["10.0.0.0/24"], 2, "t3.medium");
    let (a, b) = (primary_eni(&m, 0), primary_eni(&m, 1));
    let held = m.eni(&b).unwrap().ipv6_addresses[0].value;
    let base = u128::from(m.subnets()[0].ipv6_cidr().unwrap().network());
    let free = Ipv6Addr::from(base | 0x99);
    let e = m
        .assign_ipv6(&a, Assign6Request::Addresses(vec![free, held]), T0)
        .unwrap_err();
    assert_eq!(e, ModelError::Ipv6AddressInUse(held));
    assert_eq!(e.code(), "InvalidIPAddress.InUse");
    assert!(!m.ipv6_in_use(free), "all or nothing");
    assert!(
        m.assign_ipv6(&a, Assign6Request::Addresses(vec![free, free]), T0)
            .is_err(),
        "listed twice"
    );
    m.assign_ipv6(&a, Assign6Request::Addresses(vec![free]), T0)
        .unwrap();
    assert!(m.ipv6_in_use(free));
    let p = Ipv6Network::new(Ipv6Addr::from(base | (7u128 << 48)), 80).unwrap();
    m.assign_ipv6(&a, Assign6Request::Prefixes(vec![p]), T0)
        .unwrap();
    assert!(m.ipv6_in_use(Ipv6Addr::from(base | (7u128 << 48) | 5)));
    assert!(
        m.assign_ipv6(&b, Assign6Request::Prefixes(vec![p]), T0)
            .is_err(),
        "a prefix is one ENI's"
    );
    assert!(
        m.assign_ipv6(&a, Assign6Request::Count(0), T0).is_err(),
        "nothing asked"
    );
}

#[test]
fn types_without_ipv6_or_prefix_delegation_are_refused() {
    // t2: Xen, so IPv6 addresses yes, /80 prefixes no (prefix delegation needs Nitro).
    let mut m = dual(&["10.0.0.0/24"], 1, "t2.medium");
    let eni = primary_eni(&m, 0);
    assert_eq!(m.eni(&eni).unwrap().ipv6_addresses.len(), 1);
    let e = m
        .assign_ipv6(&eni, Assign6Request::PrefixCount(1), T0)
        .unwrap_err();
    assert!(e.to_string().contains("Nitro"), "{e}");
    m.assign_ipv6(&eni, Assign6Request::Count(1), T0).unwrap();

    // m3: no IPv6 at all. It launches into an IPv6 subnet with an IPv4-only primary ENI, and
    // neither assigning to it nor attaching an ENI with IPv6 works.
    let mut m = dual(&["10.0.0.0/24"], 1, "m3.large");
    let eni = primary_eni(&m, 0);
    assert!(m.eni(&eni).unwrap().ipv6_addresses.is_empty());
    let e = m
        .assign_ipv6(&eni, Assign6Request::Count(1), T0)
        .unwrap_err();
    assert_eq!(
        e,
        ModelError::Ipv6Limit {
            eni_id: eni,
            limit: 0
        }
    );
    let subnet = m.subnets()[0].id.clone();
    let with_v6 = m
        .create_eni(
            CreateEni {
                subnet_id: subnet,
                ..CreateEni::default()
            },
            T0,
        )
        .unwrap();
    let inst = m.instances()[0].id.clone();
    let e = m.attach_eni(&with_v6.id, &inst, 1, 0, T0).unwrap_err();
    assert!(matches!(e, ModelError::Ipv6Limit { limit: 0, .. }), "{e:?}");
    assert_eq!(ipv6_per_eni("c5.large", &m.limits("c5.large").unwrap()), 10);
    assert_eq!(ipv6_per_eni("t1.micro", &m.limits("m3.large").unwrap()), 0);
}

#[test]
fn unassign_release_and_reuse() {
    let mut m = dual(&["10.0.0.0/24"], 1, "sim.tiny");
    let eni = primary_eni(&m, 0);
    let first = m.eni(&eni).unwrap().ipv6_addresses[0].value;
    let p = m
        .assign_ipv6(&eni, Assign6Request::PrefixCount(2), T0)
        .unwrap()
        .prefixes;
    // sim.tiny: 4 per ENI, 3 used.
    assert!(matches!(
        m.assign_ipv6(&eni, Assign6Request::PrefixCount(2), T0),
        Err(ModelError::Ipv6Limit { limit: 4, .. })
    ));
    let e = m.unassign_ipv6(&eni, &[], &[]).unwrap_err();
    assert_eq!(e.code(), "InvalidParameterValue");
    let stranger = net("2001:db8:ffff:ffff::/80");
    assert!(m.unassign_ipv6(&eni, &[], &[p[0], stranger]).is_err());
    assert_eq!(
        m.eni(&eni).unwrap().ipv6_prefixes.len(),
        2,
        "nothing changed"
    );
    let gone = m.unassign_ipv6(&eni, &[first], &[p[0]]).unwrap();
    assert_eq!((gone.addresses, gone.prefixes), (vec![first], vec![p[0]]));
    assert!(!m.ipv6_in_use(first));
    let e = m.eni(&eni).unwrap();
    assert_eq!(e.ipv6_slots(), 1);
    assert_eq!(e.ipv6_prefixes[0].value, p[1]);
    // What was given back is handed out again, lowest first.
    let again = m
        .assign_ipv6(&eni, Assign6Request::PrefixCount(1), T0)
        .unwrap();
    assert_eq!(again.prefixes, vec![p[0]]);
    let again = m.assign_ipv6(&eni, Assign6Request::Count(1), T0).unwrap();
    assert_eq!(again.addresses, vec![first]);

    // Deleting an ENI frees its IPv6 addresses and prefixes too.
    let subnet = m.subnets()[0].id.clone();
    let other = m
        .create_eni(
            CreateEni {
                subnet_id: subnet,
                ..CreateEni::default()
            },
            T0,
        )
        .unwrap();
    let held = other.ipv6_addresses[0].value;
    let op = m
        .assign_ipv6(&other.id, Assign6Request::PrefixCount(1), T0)
        .unwrap()
        .prefixes[0];
    m.delete_eni(&other.id).unwrap();
    assert!(!m.ipv6_in_use(held) && !m.ipv6_in_use(op.network()));
}

#[test]
fn random_assign_and_unassign_never_hand_out_anything_twice() {
    // A bounded random walk over two ENIs of a big type: after every step each address and each
    // prefix belongs to one ENI at most, no address lies inside any prefix, and the subnet's
    // book agrees with the ENIs.
    let mut m = dual(&["10.0.0.0/24"], 2, "c5.18xlarge");
    let enis = [primary_eni(&m, 0), primary_eni(&m, 1)];
    let mut rng = Rng::seeded(99);
    let (mut assigned, mut released) = (0, 0);
    for step in 0..400 {
        let eni = &enis[(rng.next_u64() % 2) as usize];
        let held = m.eni(eni).unwrap().clone();
        let req = match rng.next_u64() % 4 {
            0 => Some(Assign6Request::Count(1 + (rng.next_u64() % 3) as u32)),
            1 => Some(Assign6Request::PrefixCount(1)),
            2 if !held.ipv6_addresses.is_empty() => {
                let pick = held.ipv6_addresses
                    [(rng.next_u64() as usize) % held.ipv6_addresses.len()]
                .value;
                m.unassign_ipv6(eni, &[pick], &[]).unwrap();
                assert!(!m.ipv6_in_use(pick), "step {step}: {pick} released");
                released += 1;
                None
            }
            3 if !held.ipv6_prefixes.is_empty() => {
                let pick =
                    held.ipv6_prefixes[(rng.next_u64() as usize) % held.ipv6_prefixes.len()].value;
                m.unassign_ipv6(eni, &[], &[pick]).unwrap();
                assert!(
                    !m.ipv6_in_use(pick.network()),
                    "step {step}: {pick} released"
                );
                released += 1;
                None
            }
            _ => None,
        };
        if let Some(req) = req {
            match m.assign_ipv6(eni, req, T0) {
                Ok(_) => assigned += 1,
                // The only refusal possible here: the ENI is full.
                Err(e) => assert!(
                    matches!(e, ModelError::Ipv6Limit { limit: 50, .. }),
                    "step {step}: {e}"
                ),
            }
        }
        let mut addrs = HashSet::new();
        let mut prefixes = HashSet::new();
        for e in m.enis() {
            assert!(e.ipv6_slots() <= 50, "step {step}: limit");
            for a in &e.ipv6_addresses {
                assert!(addrs.insert(a.value), "step {step}: {} twice", a.value);
                assert!(m.ipv6_in_use(a.value));
            }
            for p in &e.ipv6_prefixes {
                assert!(prefixes.insert(p.value), "step {step}: {} twice", p.value);
                assert!(m.ipv6_in_use(p.value.network()));
            }
        }
        for a in &addrs {
            assert!(
                prefixes.iter().all(|p| !p.contains(*a)),
                "step {step}: {a} inside a prefix"
            );
        }
    }
    assert!(
        assigned > 100 && released > 100,
        "the walk did something: {assigned} assigned, {released} released"
    );
}

#[test]
fn imds_shows_ipv6_after_the_lag_and_the_instance_ipv6() {
    let mut m = dual(&["10.0.0.0/24"], 1, "t3.medium");
    let inst = m.instances()[0].id.clone();
    let eni = primary_eni(&m, 0);
    let first = m.eni(&eni).unwrap().ipv6_addresses[0].value;
    let p = m
        .assign_ipv6(&eni, Assign6Request::PrefixCount(1), T0 + 100)
        .unwrap()
        .prefixes[0];
    let v = m.imds_view(&inst, T0 + 100, 5_000).unwrap();
    assert_eq!(v.primary_ipv6, Some(first), "there at launch");
    let i = &v.interfaces[0];
    assert_eq!(i.ipv6s, vec![first]);
    assert!(i.ipv6_prefixes.is_empty(), "not yet visible");
    assert_eq!(i.subnet_ipv6_cidr, m.subnets()[0].ipv6_cidr());
    assert_eq!(i.vpc_ipv6_cidr, m.vpc().ipv6_cidr);
    let v = m.imds_view(&inst, T0 + 5_100, 5_000).unwrap();
    assert_eq!(v.interfaces[0].ipv6_prefixes, vec![p]);
    m.unassign_ipv6(&eni, &[first], &[]).unwrap();
    let v = m.imds_view(&inst, T0 + 5_100, 5_000).unwrap();
    assert_eq!(v.primary_ipv6, None, "removals show at once");
}
