//! The IPv6 part of the pool: assignment from a delegated /80, cooldown, persistence and
//! repair, and the invariants under random sequences of operations.

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use ipnetwork::{Ipv4Network, Ipv6Network};
use pool::*;
use proptest::prelude::*;

const COOLDOWN: Duration = Duration::from_secs(30);

fn prefix(s: &str) -> Ipv6Network {
    s.parse().unwrap()
}

fn key(n: u32) -> AttachmentKey {
    AttachmentKey {
        network: "aws-cni".into(),
        container_id: format!("c{n}"),
        ifname: "eth0".into(),
    }
}

fn with_prefix() -> (Pool, MemoryStore) {
    let mut p = Pool::new(COOLDOWN);
    let store = MemoryStore::default();
    store
        .apply(
            &p.v6_mut()
                .add_prefix("eni-0", prefix("2001:db8:0:1:a::/80"))
                .unwrap(),
        )
        .unwrap();
    (p, store)
}

#[test]
fn addresses_come_from_the_prefix_in_order_and_repeats_are_idempotent() {
    let (mut p, _) = with_prefix();
    let pod = PodInfo::default();
    let (a, m) = p.v6_mut().assign(&key(1), &pod, Timestamp(1)).unwrap();
    assert_eq!(a.ip, "2001:db8:0:1:a::1".parse::<Ipv6Addr>().unwrap());
    assert_eq!(a.eni_id, "eni-0");
    assert_eq!(m.len(), 1);
    let (b, _) = p.v6_mut().assign(&key(2), &pod, Timestamp(2)).unwrap();
    assert_eq!(b.ip, "2001:db8:0:1:a::2".parse::<Ipv6Addr>().unwrap());
    let (again, m) = p.v6_mut().assign(&key(1), &pod, Timestamp(3)).unwrap();
    assert_eq!(again, a);
    assert!(m.is_empty(), "a repeated ADD changes nothing");
}

#[test]
fn no_prefix_is_a_clear_error() {
    let mut p = Pool::new(COOLDOWN);
    let err = p
        .v6_mut()
        .assign(&key(1), &PodInfo::default(), Timestamp(1))
        .unwrap_err();
    assert_eq!(err, Pool6Error::NoPrefix);
    assert!(err.to_string().contains("no IPv6 prefix"));
}

#[test]
fn only_aligned_slash_80s_are_accepted_and_never_on_two_enis() {
    let mut p = Pool::new(COOLDOWN);
    let v6 = p.v6_mut();
    assert!(matches!(
        v6.add_prefix("eni-0", prefix("2001:db8::/64")),
        Err(Pool6Error::InvalidPrefix(_))
    ));
    assert!(matches!(
        v6.add_prefix("eni-0", prefix("2001:db8::1/80")),
        Err(Pool6Error::InvalidPrefix(_))
    ));
    assert_eq!(
        v6.add_prefix("eni-0", prefix("2001:db8::/80"))
            .unwrap()
            .len(),
        1
    );
    assert!(
        v6.add_prefix("eni-0", prefix("2001:db8::/80"))
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        v6.add_prefix("eni-1", prefix("2001:db8::/80")),
        Err(Pool6Error::PrefixOnOtherEni { .. })
    ));
}

#[test]
fn a_released_address_cools_down_and_is_then_forgotten() {
    let (mut p, store) = with_prefix();
    let pod = PodInfo::default();
    let (a, m) = p.v6_mut().assign(&key(1), &pod, Timestamp(1_000)).unwrap();
    store.apply(&m).unwrap();
    let (released, m) = p.v6_mut().release(&key(1), Timestamp(2_000)).unwrap();
    store.apply(&m).unwrap();
    assert_eq!(released.ip, a.ip);
    assert!(p.v6_mut().release(&key(1), Timestamp(2_001)).is_none());
    assert_eq!(p.v6().counts(Timestamp(2_001)).cooling, 1);
    // Within the cooldown the next pod gets another address.
    let (b, m) = p.v6_mut().assign(&key(2), &pod, Timestamp(3_000)).unwrap();
    store.apply(&m).unwrap();
    assert_ne!(b.ip, a.ip);
    // After it, the cooled address is dropped from the state, which stays as small as the pods.
    let later = Timestamp(2_000).after(COOLDOWN);
    let (_, m) = p.v6_mut().assign(&key(3), &pod, later).unwrap();
    assert!(m.contains(&Mutation::DeleteAddr6(a.ip)));
    store.apply(&m).unwrap();
    assert_eq!(store.load().unwrap().addrs6.len(), 2);
}

#[test]
fn state_round_trips_through_a_store_and_restore() {
    let (mut p, store) = with_prefix();
    let pod = PodInfo {
        namespace: "default".into(),
        name: "web".into(),
        ..Default::default()
    };
    for n in 0..5 {
        let (_, m) = p
            .v6_mut()
            .assign(&key(n), &pod, Timestamp(10 + u64::from(n)))
            .unwrap();
        store.apply(&m).unwrap();
    }
    let (_, m) = p.v6_mut().release(&key(2), Timestamp(100)).unwrap();
    store.apply(&m).unwrap();
    let (restored, fixes, issues) = Pool::restore(store.load().unwrap(), COOLDOWN);
    assert!(
        fixes.is_empty() && issues.is_empty(),
        "{fixes:?} {issues:?}"
    );
    assert_eq!(restored.v6().allocations(), p.v6().allocations());
    assert_eq!(
        restored.v6().counts(Timestamp(101)),
        p.v6().counts(Timestamp(101))
    );
    // The next address continues after the highest kept, not over a cooling one.
    let mut restored = restored;
    let (next, _) = restored
        .v6_mut()
        .assign(&key(9), &pod, Timestamp(102))
        .unwrap();
    assert_eq!(next.ip, "2001:db8:0:1:a::6".parse::<Ipv6Addr>().unwrap());
}

#[test]
fn restore_repairs_orphans_duplicates_and_bad_prefixes() {
    let assigned = |n: u32, at: u64| SlotState::Assigned {
        key: key(n),
        pod: PodInfo::default(),
        assigned_at: Timestamp(at),
    };
    let state = PersistedState {
        prefixes6: vec![
            Prefix6 {
                prefix: prefix("2001:db8::/80"),
                eni: "eni-0".into(),
            },
            Prefix6 {
                prefix: prefix("2001:db8:1::/64"),
                eni: "eni-0".into(),
            },
        ],
        addrs6: vec![
            PersistedAddr6 {
                ip: "2001:db8::1".parse().unwrap(),
                state: assigned(1, 5),
                egress_v4: None,
            },
            PersistedAddr6 {
                ip: "2001:db8::2".parse().unwrap(),
                state: assigned(1, 9),
                egress_v4: None,
            },
            PersistedAddr6 {
                ip: "2001:db8:9::1".parse().unwrap(),
                state: assigned(2, 5),
                egress_v4: None,
            },
        ],
        ..Default::default()
    };
    let (p, fixes, issues) = Pool::restore(state, COOLDOWN);
    assert_eq!(issues.len(), 3, "{issues:?}");
    assert!(fixes.contains(&Mutation::DeletePrefix6(prefix("2001:db8:1::/64"))));
    assert!(fixes.contains(&Mutation::DeleteAddr6("2001:db8::2".parse().unwrap())));
    assert!(fixes.contains(&Mutation::DeleteAddr6("2001:db8:9::1".parse().unwrap())));
    let held = p.v6().get(&key(1)).unwrap();
    assert_eq!(held.ip, "2001:db8::1".parse::<Ipv6Addr>().unwrap());
    assert!(p.v6().get(&key(2)).is_none());
}

#[test]
fn removing_a_prefix_takes_its_addresses_and_says_from_whom() {
    let (mut p, _) = with_prefix();
    let (a, _) = p
        .v6_mut()
        .assign(&key(1), &PodInfo::default(), Timestamp(1))
        .unwrap();
    let (taken, m) = p.v6_mut().remove_prefix(prefix("2001:db8:0:1:a::/80"));
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].ip, a.ip);
    assert_eq!(taken[0].eni_id, "eni-0");
    assert!(m.contains(&Mutation::DeleteAddr6(a.ip)));
    assert!(p.v6().get(&key(1)).is_none());
    assert_eq!(p.v6().counts(Timestamp(2)).prefixes, 0);
}

#[test]
fn gc_and_adopt_work_on_ipv6_attachments() {
    let (mut p, _) = with_prefix();
    let pod = PodInfo::default();
    for n in 0..3 {
        p.v6_mut().assign(&key(n), &pod, Timestamp(1)).unwrap();
    }
    let valid: HashSet<(String, String)> = [("c1".to_string(), "eth0".to_string())].into();
    let (released, _) = p.v6_mut().gc("aws-cni", &valid, Timestamp(2));
    let gone: Vec<_> = released
        .iter()
        .map(|a| a.key.container_id.clone())
        .collect();
    assert_eq!(gone, ["c0", "c2"]);
    // A live pod's address found on the node is adopted, also while cooling.
    let cooling = released[0].ip;
    let (adopted, _) = p
        .v6_mut()
        .adopt(&key(7), &pod, cooling, None, Timestamp(3))
        .unwrap();
    assert_eq!(adopted.ip, cooling);
    let held = p.v6().get(&key(1)).unwrap().ip;
    assert!(
        p.v6_mut()
            .adopt(&key(8), &pod, held, None, Timestamp(3))
            .is_none()
    );
    assert!(
        p.v6_mut()
            .adopt(
                &key(8),
                &pod,
                "2001:db8:ffff::1".parse().unwrap(),
                None,
                Timestamp(3)
            )
            .is_none(),
        "an address outside every prefix is not ours"
    );
}

fn egress(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

/// A pool whose addresses carry egress addresses from a range with room for two.
fn with_small_egress_range() -> Pool {
    let (mut p, _) = with_prefix();
    let range: Ipv4Network = "169.254.172.0/30".parse().unwrap();
    p.v6_mut().set_egress_range(Some(range));
    p
}

#[test]
fn each_address_carries_its_own_egress_address_until_it_has_cooled() {
    let mut p = with_small_egress_range();
    let pod = PodInfo::default();
    let (a, m) = p.v6_mut().assign(&key(1), &pod, Timestamp(1)).unwrap();
    assert_eq!(
        a.egress_v4,
        Some(egress("169.254.172.1")),
        "never the range's own name"
    );
    assert!(matches!(&m[..], [Mutation::PutAddr6(r)] if r.egress_v4 == a.egress_v4));
    let (b, _) = p.v6_mut().assign(&key(2), &pod, Timestamp(1)).unwrap();
    assert_eq!(b.egress_v4, Some(egress("169.254.172.2")));
    let err = p.v6_mut().assign(&key(3), &pod, Timestamp(1)).unwrap_err();
    assert!(matches!(err, Pool6Error::EgressExhausted(_)), "{err}");
    assert!(err.to_string().contains("169.254.172.0/30"), "{err}");
    assert!(
        p.v6().get(&key(3)).is_none(),
        "no IPv6 address without its egress address"
    );

    // Released, the egress address cools with its IPv6 address.
    let (released, m) = p.v6_mut().release(&key(1), Timestamp(2)).unwrap();
    assert_eq!(released.egress_v4, a.egress_v4);
    assert!(matches!(&m[..], [Mutation::PutAddr6(r)] if r.egress_v4 == a.egress_v4));
    assert!(p.v6_mut().assign(&key(3), &pod, Timestamp(3)).is_err());
    let cooled = Timestamp(2).after(COOLDOWN);
    let (c, _) = p.v6_mut().assign(&key(3), &pod, cooled).unwrap();
    assert_eq!(c.egress_v4, a.egress_v4);
    assert_ne!(c.ip, a.ip);

    // A pod whose wiring failed gives its egress address back at once.
    p.v6_mut().unassign_unused(&key(3)).unwrap();
    let (d, _) = p.v6_mut().assign(&key(4), &pod, cooled).unwrap();
    assert_eq!(d.egress_v4, a.egress_v4);
}

#[test]
fn egress_off_gives_none_and_on_keeps_what_was_given_before() {
    let (mut p, _) = with_prefix();
    let pod = PodInfo::default();
    let (a, _) = p.v6_mut().assign(&key(1), &pod, Timestamp(1)).unwrap();
    assert_eq!(a.egress_v4, None);
    p.v6_mut().set_egress_range(Some(EGRESS_V4_RANGE));
    assert_eq!(p.v6().egress_range(), Some(EGRESS_V4_RANGE));
    let (again, _) = p.v6_mut().assign(&key(1), &pod, Timestamp(2)).unwrap();
    assert_eq!(again, a, "a repeated ADD changes nothing");
    let (b, _) = p.v6_mut().assign(&key(2), &pod, Timestamp(2)).unwrap();
    assert_eq!(b.egress_v4, Some(egress("169.254.172.1")));
}

#[test]
fn restore_keeps_egress_addresses_and_frees_a_duplicated_one() {
    let (mut p, store) = with_prefix();
    p.v6_mut().set_egress_range(Some(EGRESS_V4_RANGE));
    let pod = PodInfo::default();
    for n in 0..3 {
        let (_, m) = p.v6_mut().assign(&key(n), &pod, Timestamp(1)).unwrap();
        store.apply(&m).unwrap();
    }
    let mut state = store.load().unwrap();
    let (restored, fixes, issues) = Pool::restore(state.clone(), COOLDOWN);
    assert!(
        fixes.is_empty() && issues.is_empty(),
        "{fixes:?} {issues:?}"
    );
    assert_eq!(restored.v6().allocations(), p.v6().allocations());

    state.addrs6.sort_by_key(|a| a.ip);
    state.addrs6[2].egress_v4 = state.addrs6[0].egress_v4;
    let (restored, fixes, issues) = Pool::restore(state.clone(), COOLDOWN);
    assert_eq!(
        issues,
        [RestoreIssue::V6(RestoreIssue6::DuplicateEgress {
            egress: egress("169.254.172.1"),
            kept: state.addrs6[0].ip,
            dropped: state.addrs6[2].ip,
        })]
    );
    assert!(
        matches!(&fixes[..], [Mutation::PutAddr6(r)] if r.ip == state.addrs6[2].ip && r.egress_v4.is_none())
    );
    assert_eq!(restored.v6().get(&key(2)).unwrap().egress_v4, None);
}

#[test]
fn adopting_takes_a_live_pods_egress_address_unless_another_holds_it() {
    let (mut p, _) = with_prefix();
    p.v6_mut().set_egress_range(Some(EGRESS_V4_RANGE));
    let pod = PodInfo::default();
    let (a, _) = p.v6_mut().assign(&key(1), &pod, Timestamp(1)).unwrap();
    let free6: Ipv6Addr = "2001:db8:0:1:a::99".parse().unwrap();
    let (adopted, m) = p
        .v6_mut()
        .adopt(
            &key(2),
            &pod,
            free6,
            Some(egress("169.254.173.7")),
            Timestamp(2),
        )
        .unwrap();
    assert_eq!(adopted.egress_v4, Some(egress("169.254.173.7")));
    assert!(matches!(&m[..], [Mutation::PutAddr6(r)] if r.egress_v4 == adopted.egress_v4));
    let other6: Ipv6Addr = "2001:db8:0:1:a::98".parse().unwrap();
    let (adopted, _) = p
        .v6_mut()
        .adopt(&key(3), &pod, other6, a.egress_v4, Timestamp(2))
        .unwrap();
    assert_eq!(adopted.egress_v4, None, "{:?} is key 1's", a.egress_v4);
}

#[derive(Clone, Debug)]
enum Op {
    Assign(u32),
    Release(u32),
    Advance(u64),
    Gc(Vec<u32>),
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u32..12).prop_map(Op::Assign),
        4 => (0u32..12).prop_map(Op::Release),
        3 => (0u64..45_000).prop_map(Op::Advance),
        1 => proptest::collection::vec(0u32..12, 0..6).prop_map(Op::Gc),
        1 => Just(Op::Restart),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn invariants_hold_under_any_sequence(ops in proptest::collection::vec(op(), 1..80)) {
        let (mut p, store) = with_prefix();
        p.v6_mut().set_egress_range(Some(EGRESS_V4_RANGE));
        let net = prefix("2001:db8:0:1:a::/80");
        let mut now = Timestamp(1_000_000);
        // address -> end of its cooldown, for every release seen
        let mut cooling: HashMap<Ipv6Addr, Timestamp> = HashMap::new();
        for op in ops {
            match op {
                Op::Assign(n) => {
                    let before = p.v6().get(&key(n));
                    let (a, m) = p.v6_mut().assign(&key(n), &PodInfo::default(), now).unwrap();
                    store.apply(&m).unwrap();
                    prop_assert!(net.contains(a.ip) && a.ip != net.network());
                    if let Some(b) = before {
                        prop_assert_eq!(b.ip, a.ip);
                    } else if let Some(until) = cooling.get(&a.ip) {
                        prop_assert!(*until <= now, "{} handed out while cooling", a.ip);
                    }
                }
                Op::Release(n) => {
                    if let Some((a, m)) = p.v6_mut().release(&key(n), now) {
                        store.apply(&m).unwrap();
                        cooling.insert(a.ip, now.after(COOLDOWN));
                    }
                }
                Op::Advance(ms) => now = Timestamp(now.0 + ms),
                Op::Gc(keep) => {
                    let valid: HashSet<(String, String)> =
                        keep.iter().map(|n| (format!("c{n}"), "eth0".to_string())).collect();
                    let (released, m) = p.v6_mut().gc("aws-cni", &valid, now);
                    store.apply(&m).unwrap();
                    for a in released {
                        cooling.insert(a.ip, now.after(COOLDOWN));
                    }
                }
                Op::Restart => {
                    let (restored, fixes, issues) = Pool::restore(store.load().unwrap(), COOLDOWN);
                    prop_assert!(fixes.is_empty() && issues.is_empty());
                    prop_assert_eq!(restored.v6().allocations(), p.v6().allocations());
                    p = restored;
                    p.v6_mut().set_egress_range(Some(EGRESS_V4_RANGE));
                }
            }
            // One address per attachment and one attachment per address.
            let all = p.v6().allocations();
            let ips: HashSet<Ipv6Addr> = all.iter().map(|a| a.ip).collect();
            let keys: HashSet<&AttachmentKey> = all.iter().map(|a| &a.key).collect();
            prop_assert_eq!(ips.len(), all.len());
            prop_assert_eq!(keys.len(), all.len());
            // Every one has an egress address of the range, none shared, even with a cooling
            // address (whose egress address is kept with it until it has cooled).
            let mut egress = HashSet::new();
            for record in p.to_state().addrs6 {
                if matches!(record.state, SlotState::Assigned { .. }) {
                    prop_assert!(record.egress_v4.is_some());
                }
                if let Some(e) = record.egress_v4 {
                    prop_assert!(EGRESS_V4_RANGE.contains(e) && e != EGRESS_V4_RANGE.network());
                    prop_assert!(egress.insert(e), "{} carried twice", e);
                }
            }
            // The store always equals the pool.
            let mut stored = store.load().unwrap().addrs6;
            stored.sort_by_key(|a| a.ip);
            prop_assert_eq!(stored, p.to_state().addrs6);
        }
    }
}
