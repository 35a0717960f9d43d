//! Property tests: random sequences of pool operations keep the invariants the daemon relies on.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::time::Duration;

use common::*;
use pool::*;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    AddAddresses(u8),
    AddPrefix(u8),
    /// A /32 where prefixes are offered: refused inside a held one, else it blocks one.
    AddStray(u8),
    RemovePrefix(u8, bool),
    Assign(u32),
    Release(u32),
    Advance(u64),
    Gc(Vec<u32>),
    RemoveFree(u8),
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (1u8..4).prop_map(Op::AddAddresses),
        1 => (0u8..8).prop_map(Op::AddPrefix),
        1 => (0u8..128).prop_map(Op::AddStray),
        1 => (0u8..8, any::<bool>()).prop_map(|(i, force)| Op::RemovePrefix(i, force)),
        5 => (0u32..10).prop_map(Op::Assign),
        4 => (0u32..10).prop_map(Op::Release),
        3 => (0u64..45_000).prop_map(Op::Advance),
        1 => proptest::collection::vec(0u32..10, 0..6).prop_map(Op::Gc),
        1 => (0u8..40).prop_map(Op::RemoveFree),
        1 => Just(Op::Restart),
    ]
}

fn holders(p: &Pool) -> Vec<(Ipv4Addr, AttachmentKey)> {
    p.to_state()
        .addrs
        .into_iter()
        .filter_map(|a| a.slot.holder().cloned().map(|k| (a.ip, k)))
        .collect()
}

fn sorted(mut s: PersistedState) -> PersistedState {
    s.enis.sort_by(|a, b| a.id.cmp(&b.id));
    s.addrs.sort_by_key(|a| a.ip);
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn invariants_hold_under_any_sequence(ops in proptest::collection::vec(op(), 1..80)) {
        let mut p = Pool::new(COOLDOWN);
        let store = MemoryStore::default();
        store.apply(&p.upsert_eni(eni("eni-0", 0, "10.0.0.10"))).unwrap();
        store.apply(&p.upsert_eni(eni("eni-1", 1, "10.0.1.10"))).unwrap();
        let mut next_ip = 11u8;
        let mut now = Timestamp(1_000_000);
        let mut first_ip: HashMap<AttachmentKey, Ipv4Addr> = HashMap::new();

        for op in ops {
            match op {
                Op::AddAddresses(n) => {
                    let eni_id = if next_ip.is_multiple_of(2) { "eni-0" } else { "eni-1" };
                    let ips: Vec<Ipv4Addr> = (0..n)
                        .map(|i| Ipv4Addr::new(10, 0, 2, next_ip.wrapping_add(i)))
                        .collect();
                    next_ip = next_ip.wrapping_add(n);
                    if let Ok(m) = p.add_addresses(eni_id, &ips) { store.apply(&m).unwrap(); }
                }
                Op::AddPrefix(i) => {
                    // Eight /28s in 10.0.3.0/25, each offered to either ENI.
                    let base = Ipv4Addr::new(10, 0, 3, 16 * i);
                    let prefix = ipnetwork::Ipv4Network::new(base, 28).unwrap();
                    let eni_id = if (i + next_ip).is_multiple_of(2) { "eni-0" } else { "eni-1" };
                    if let Ok(m) = p.add_prefixes(eni_id, &[prefix]) {
                        store.apply(&m).unwrap();
                        prop_assert!(p.prefixes(eni_id).any(|q| q == prefix));
                    }
                }
                Op::AddStray(i) => {
                    let eni_id = if i.is_multiple_of(2) { "eni-0" } else { "eni-1" };
                    let stray = Ipv4Addr::new(10, 0, 3, i);
                    let covered = p.enis().any(|e| p.prefixes(&e.id).any(|q| q.contains(stray)));
                    match p.add_addresses(eni_id, &[stray]) {
                        Ok(m) => {
                            prop_assert!(!covered);
                            store.apply(&m).unwrap();
                        }
                        Err(e) => {
                            let other = if eni_id == "eni-0" { "eni-1" } else { "eni-0" };
                            let elsewhere = p.addresses(other).any(|(a, _)| a == stray);
                            prop_assert!(covered || elsewhere, "{}", e);
                        }
                    }
                }
                Op::RemovePrefix(i, force) => {
                    let held: Vec<_> = p.enis()
                        .flat_map(|e| p.prefixes(&e.id).collect::<Vec<_>>())
                        .collect();
                    if let Some(&prefix) = held.get(i as usize % held.len().max(1)) {
                        let in_use = p.allocations().iter().any(|a| prefix.contains(a.ip))
                            || p.enis().any(|e| p.addresses(&e.id).any(|(ip, s)| prefix.contains(ip) && s.is_cooling(now)));
                        let removal = if force { Removal::Force } else { Removal::IfUnused(now) };
                        match p.remove_prefix(prefix, removal) {
                            Ok((taken, m)) => {
                                prop_assert!(force || !in_use);
                                store.apply(&m).unwrap();
                                for a in taken {
                                    prop_assert_eq!(first_ip.remove(&a.key), Some(a.ip));
                                }
                            }
                            Err(e) => prop_assert!(!force && in_use, "{}", e),
                        }
                    }
                }
                Op::Assign(k) => {
                    let before: HashMap<Ipv4Addr, AddrSlot> = p
                        .to_state().addrs.into_iter().map(|a| (a.ip, a.slot)).collect();
                    match p.assign(&key(k), &PodInfo::default(), now) {
                        Ok((a, m)) => {
                            store.apply(&m).unwrap();
                            match first_ip.get(&key(k)) {
                                // Idempotent while held.
                                Some(held) => prop_assert_eq!(*held, a.ip),
                                None => {
                                    let slot = &before[&a.ip];
                                    prop_assert!(slot.is_available(now),
                                        "handed out {} in state {:?} at {:?}", a.ip, slot, now);
                                    first_ip.insert(key(k), a.ip);
                                }
                            }
                        }
                        Err(e) => {
                            prop_assert!(!first_ip.contains_key(&key(k)));
                            let c = p.counts(now);
                            prop_assert_eq!(c.available, 0, "refused ({}) with {:?}", e, c);
                        }
                    }
                }
                Op::Release(k) => {
                    if let Some((r, m)) = p.release(&key(k), now) {
                        store.apply(&m).unwrap();
                        prop_assert_eq!(r.cooling_until, now.after(COOLDOWN));
                        prop_assert_eq!(first_ip.remove(&key(k)), Some(r.allocation.ip));
                    } else {
                        prop_assert!(!first_ip.contains_key(&key(k)));
                    }
                }
                Op::Advance(ms) => now = now.after(Duration::from_millis(ms)),
                Op::Gc(keep) => {
                    let valid: HashSet<(String, String)> = keep
                        .iter().map(|k| (key(*k).container_id, "eth0".to_string())).collect();
                    let (released, m) = p.gc("aws-cni", &valid, now);
                    store.apply(&m).unwrap();
                    for r in released {
                        prop_assert!(!valid.contains(&(r.allocation.key.container_id.clone(), "eth0".into())));
                        first_ip.remove(&r.allocation.key);
                    }
                }
                Op::RemoveFree(i) => {
                    let free = p.to_state().addrs.into_iter()
                        .filter(|a| a.slot.holder().is_none() && a.slot.prefix.is_none())
                        .nth(i as usize);
                    if let Some(a) = free {
                        // EC2 taking a free (possibly cooling) address away.
                        let (taken, m) = p.remove_address(a.ip, Removal::Force).unwrap();
                        prop_assert!(taken.is_none());
                        store.apply(&m).unwrap();
                    }
                }
                Op::Restart => {
                    let (restored, fixes, issues) = Pool::restore(store.load().unwrap(), COOLDOWN);
                    prop_assert!(fixes.is_empty() && issues.is_empty(), "{:?}", issues);
                    prop_assert_eq!(sorted(restored.to_state()), sorted(p.to_state()));
                    for e in p.enis() {
                        let before: Vec<_> = p.prefixes(&e.id).collect();
                        let after: Vec<_> = restored.prefixes(&e.id).collect();
                        prop_assert_eq!(before, after);
                    }
                    p = restored;
                }
            }

            // No address held by two attachments; no attachment holding two addresses.
            let held = holders(&p);
            let ips: HashSet<_> = held.iter().map(|(ip, _)| *ip).collect();
            let keys: HashSet<_> = held.iter().map(|(_, k)| k.clone()).collect();
            prop_assert_eq!(ips.len(), held.len());
            prop_assert_eq!(keys.len(), held.len());
            // The pool agrees with the test's own record of who holds what.
            let expected: HashMap<AttachmentKey, Ipv4Addr> =
                held.iter().map(|(ip, k)| (k.clone(), *ip)).collect();
            prop_assert_eq!(&expected, &first_ip);
            // Counts add up.
            let c = p.counts(now);
            prop_assert_eq!(c.total, c.assigned + c.cooling + c.available);
            // What was persisted is exactly the pool.
            prop_assert_eq!(sorted(store.load().unwrap()), sorted(p.to_state()));
            // A held prefix is whole, on one ENI; every tagged address belongs to a held one.
            for e in p.enis() {
                let prefixes: HashSet<_> = p.prefixes(&e.id).collect();
                for prefix in &prefixes {
                    let members = p.addresses(&e.id)
                        .filter(|(_, s)| s.prefix == Some(*prefix))
                        .count();
                    prop_assert_eq!(members, 16);
                }
                for (ip, s) in p.addresses(&e.id) {
                    if let Some(prefix) = s.prefix {
                        prop_assert!(prefixes.contains(&prefix) && prefix.contains(ip));
                    }
                }
            }
        }
    }
}
