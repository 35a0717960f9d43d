use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use pool::*;

#[test]
fn the_same_attachment_gets_the_same_address_without_a_change() {
    let mut p = pool_with(3);
    let (a, muts) = p
        .assign(&key(1), &PodInfo::default(), Timestamp(5))
        .unwrap();
    assert_eq!(a.ip, ip("10.0.0.11"));
    assert_eq!(muts.len(), 1);
    let (again, muts) = p
        .assign(&key(1), &PodInfo::default(), Timestamp(9))
        .unwrap();
    assert_eq!(again, a);
    assert!(muts.is_empty(), "a repeated ADD changes nothing");
}

#[test]
fn addresses_are_reused_as_late_as_possible() {
    let mut p = pool_with(3);
    let now = Timestamp(1_000_000);
    let a = p.assign(&key(1), &PodInfo::default(), now).unwrap().0;
    p.release(&key(1), now).unwrap();
    // Never-used addresses go first, lowest first.
    let later = now.after(COOLDOWN * 2);
    assert_eq!(
        p.assign(&key(2), &PodInfo::default(), later).unwrap().0.ip,
        ip("10.0.0.12")
    );
    assert_eq!(
        p.assign(&key(3), &PodInfo::default(), later).unwrap().0.ip,
        ip("10.0.0.13")
    );
    // Then the one released longest ago.
    assert_eq!(
        p.assign(&key(4), &PodInfo::default(), later).unwrap().0.ip,
        a.ip
    );
}

#[test]
fn a_cooling_address_is_not_handed_out_and_the_error_says_when() {
    let mut p = pool_with(1);
    let t0 = Timestamp(50_000);
    p.assign(&key(1), &PodInfo::default(), t0).unwrap();
    let (released, _) = p.release(&key(1), t0).unwrap();
    assert_eq!(released.cooling_until, t0.after(COOLDOWN));
    let counts = p.counts(t0.after(Duration::from_secs(10)));
    assert_eq!((counts.total, counts.cooling, counts.available), (1, 1, 0));

    let err = p
        .assign(
            &key(2),
            &PodInfo::default(),
            t0.after(Duration::from_secs(10)),
        )
        .unwrap_err();
    assert_eq!(
        err,
        AssignError::AllCooling {
            cooling: 1,
            next_free_in: Duration::from_secs(20)
        }
    );
    assert!(err.to_string().contains("next is free in 20s"), "{err}");

    let ok = p
        .assign(&key(2), &PodInfo::default(), t0.after(COOLDOWN))
        .unwrap();
    assert_eq!(ok.0.ip, ip("10.0.0.11"));
}

#[test]
fn errors_name_why_no_address_is_left() {
    let mut empty = Pool::new(COOLDOWN);
    empty.upsert_eni(eni("eni-0", 0, "10.0.0.10"));
    assert_eq!(
        empty
            .assign(&key(1), &PodInfo::default(), Timestamp(0))
            .unwrap_err(),
        AssignError::EmptyPool
    );
    let mut full = pool_with(1);
    full.assign(&key(1), &PodInfo::default(), Timestamp(0))
        .unwrap();
    let err = full
        .assign(&key(2), &PodInfo::default(), Timestamp(0))
        .unwrap_err();
    assert_eq!(err, AssignError::AllAssigned { assigned: 1 });
    assert_eq!(err.to_string(), "all 1 addresses on the node are assigned");
}

#[test]
fn release_of_an_unknown_attachment_is_a_no_op() {
    let mut p = pool_with(1);
    assert!(p.release(&key(9), Timestamp(0)).is_none());
}

#[test]
fn addresses_cannot_be_claimed_twice_or_be_an_enis_own() {
    let mut p = pool_with(1);
    p.upsert_eni(eni("eni-1", 1, "10.0.0.20"));
    assert_eq!(
        p.add_addresses("eni-1", &[ip("10.0.0.11")]).unwrap_err(),
        PoolError::AddressOnOtherEni {
            ip: ip("10.0.0.11"),
            held_on: "eni-0".into(),
            eni: "eni-1".into()
        }
    );
    assert!(matches!(
        p.add_addresses("eni-1", &[ip("10.0.0.20")]),
        Err(PoolError::PrimaryAddress { .. })
    ));
    assert!(matches!(
        p.add_addresses("eni-9", &[ip("10.0.0.30")]),
        Err(PoolError::UnknownEni(_))
    ));
    // Reporting a held address again is not a change.
    assert!(
        p.add_addresses("eni-0", &[ip("10.0.0.11")])
            .unwrap()
            .is_empty()
    );
}

#[test]
fn an_assigned_address_is_only_removed_by_force() {
    let mut p = pool_with(2);
    let a = p
        .assign(&key(1), &PodInfo::default(), Timestamp(0))
        .unwrap()
        .0;
    assert!(matches!(
        p.remove_address(a.ip, Removal::IfUnused(Timestamp(0))),
        Err(PoolError::InUse { .. })
    ));
    let (taken, _) = p.remove_address(a.ip, Removal::Force).unwrap();
    assert_eq!(taken.unwrap().key, key(1));
    assert!(p.get(&key(1)).is_none());
    assert_eq!(p.counts(Timestamp(0)).total, 1);

    assert!(
        p.remove_eni("eni-0", Removal::IfUnused(Timestamp(0)))
            .is_ok()
    );
    assert_eq!(p.enis().count(), 0);
}

#[test]
fn removing_an_eni_in_use_needs_force_and_reports_the_pods() {
    let mut p = pool_with(2);
    p.assign(&key(1), &PodInfo::default(), Timestamp(0))
        .unwrap();
    assert!(matches!(
        p.remove_eni("eni-0", Removal::IfUnused(Timestamp(0))),
        Err(PoolError::InUse { .. })
    ));
    let (dropped, muts) = p.remove_eni("eni-0", Removal::Force).unwrap();
    assert_eq!(dropped.len(), 1);
    assert_eq!(muts.last(), Some(&Mutation::DeleteEni("eni-0".into())));
    assert!(p.get(&key(1)).is_none());
}

#[test]
fn gc_releases_only_unlisted_attachments_of_that_network() {
    let mut p = pool_with(4);
    for n in 1..=3 {
        p.assign(&key(n), &PodInfo::default(), Timestamp(0))
            .unwrap();
    }
    let other = AttachmentKey {
        network: "other".into(),
        ..key(4)
    };
    p.assign(&other, &PodInfo::default(), Timestamp(0)).unwrap();
    let valid: HashSet<(String, String)> = [("c2".to_string(), "eth0".to_string())].into();
    let (released, _) = p.gc("aws-cni", &valid, Timestamp(7));
    let keys: Vec<_> = released.iter().map(|r| r.allocation.key.clone()).collect();
    assert_eq!(keys, vec![key(1), key(3)]);
    assert!(p.get(&key(2)).is_some() && p.get(&other).is_some());
}

#[test]
fn restore_keeps_assignments_and_deadlines_and_repairs_the_rest() {
    let mut p = pool_with(3);
    let store = MemoryStore::default();
    store
        .apply(
            &p.to_state()
                .enis
                .into_iter()
                .map(Mutation::PutEni)
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let mut muts: Vec<Mutation> = p
        .to_state()
        .addrs
        .into_iter()
        .map(Mutation::PutAddr)
        .collect();
    muts.extend(
        p.assign(&key(1), &PodInfo::default(), Timestamp(10))
            .unwrap()
            .1,
    );
    muts.extend(
        p.assign(&key(2), &PodInfo::default(), Timestamp(11))
            .unwrap()
            .1,
    );
    muts.extend(p.release(&key(2), Timestamp(12)).unwrap().1);
    store.apply(&muts).unwrap();

    let (restored, fixes, issues) = Pool::restore(store.load().unwrap(), COOLDOWN);
    assert!(fixes.is_empty() && issues.is_empty());
    assert_eq!(restored.get(&key(1)), p.get(&key(1)));
    assert_eq!(restored.counts(Timestamp(13)), p.counts(Timestamp(13)));
    assert_eq!(restored.counts(Timestamp(13)).cooling, 1);

    // Damaged state: an address of a vanished ENI, and one key on two addresses.
    let mut state = store.load().unwrap();
    let mut dup = state.addrs[0].clone();
    assert!(dup.slot.holder().is_some());
    dup.ip = ip("10.0.0.99");
    state.addrs.push(dup);
    let mut orphan = state.addrs[1].clone();
    orphan.ip = ip("10.0.0.77");
    orphan.eni = "eni-gone".into();
    state.addrs.push(orphan);
    let (repaired, fixes, issues) = Pool::restore(state, COOLDOWN);
    assert_eq!(issues.len(), 2, "{issues:?}");
    assert_eq!(fixes.len(), 2);
    assert_eq!(repaired.get(&key(1)).unwrap().ip, ip("10.0.0.11"));
}

#[test]
fn unassign_unused_frees_without_cooldown() {
    let mut p = pool_with(1);
    p.assign(&key(1), &PodInfo::default(), Timestamp(0))
        .unwrap();
    p.unassign_unused(&key(1)).unwrap();
    assert_eq!(p.counts(Timestamp(0)).available, 1);
    assert!(p.unassign_unused(&key(1)).is_none());
}

fn net(s: &str) -> ipnetwork::Ipv4Network {
    s.parse().unwrap()
}

#[test]
fn a_prefix_brings_sixteen_free_addresses_tagged_with_it() {
    let mut p = pool_with(0);
    let muts = p.add_prefixes("eni-0", &[net("10.0.3.16/28")]).unwrap();
    assert_eq!(muts.len(), 16);
    assert_eq!(
        p.prefixes("eni-0").collect::<Vec<_>>(),
        vec![net("10.0.3.16/28")]
    );
    let addrs: Vec<_> = p.addresses("eni-0").collect();
    assert_eq!(addrs.len(), 16);
    assert_eq!(addrs[0].0, ip("10.0.3.16"));
    assert_eq!(addrs[15].0, ip("10.0.3.31"));
    assert!(
        addrs
            .iter()
            .all(|(_, s)| s.prefix == Some(net("10.0.3.16/28")) && s.is_available(Timestamp(0)))
    );
    assert_eq!(p.counts(Timestamp(0)).available, 16);
    // Reported again: no change.
    assert!(
        p.add_prefixes("eni-0", &[net("10.0.3.16/28")])
            .unwrap()
            .is_empty()
    );
}

#[test]
fn prefixes_that_cannot_be_delegated_or_overlap_are_refused_whole() {
    let mut p = pool_with(1); // 10.0.0.11 on eni-0, whose own address is 10.0.0.10
    p.upsert_eni(eni("eni-1", 1, "10.0.1.10"));
    p.add_prefixes("eni-1", &[net("10.0.4.0/28")]).unwrap();
    let cases = [
        (
            net("10.0.5.0/27"),
            PoolError::InvalidPrefix(net("10.0.5.0/27")),
        ),
        (
            net("10.0.5.3/28"),
            PoolError::InvalidPrefix(net("10.0.5.3/28")),
        ),
        (
            net("10.0.0.0/28"),
            PoolError::PrefixOverlap {
                prefix: net("10.0.0.0/28"),
                ip: ip("10.0.0.10"),
                held_on: "eni-0".into(),
            },
        ),
        (
            net("10.0.1.0/28"),
            PoolError::PrefixOverlap {
                prefix: net("10.0.1.0/28"),
                ip: ip("10.0.1.10"),
                held_on: "eni-1".into(),
            },
        ),
        (
            net("10.0.4.0/28"),
            PoolError::PrefixOnOtherEni {
                prefix: net("10.0.4.0/28"),
                held_on: "eni-1".into(),
                eni: "eni-0".into(),
            },
        ),
    ];
    for (prefix, err) in cases {
        // A good prefix first: nothing of a refused batch is added.
        assert_eq!(
            p.add_prefixes("eni-0", &[net("10.0.6.0/28"), prefix]),
            Err(err),
            "{prefix}"
        );
        assert_eq!(p.prefixes("eni-0").count(), 0);
    }
    assert!(
        PoolError::InvalidPrefix(net("10.0.5.3/28"))
            .to_string()
            .contains("10.0.5.3/28 is not a /28")
    );
    // A /32 on the same ENI inside the prefix.
    p.add_addresses("eni-0", &[ip("10.0.7.5")]).unwrap();
    assert!(matches!(
        p.add_prefixes("eni-0", &[net("10.0.7.0/28")]),
        Err(PoolError::PrefixOverlap { .. })
    ));
    assert_eq!(
        p.add_prefixes("eni-9", &[net("10.0.8.0/28")]),
        Err(PoolError::UnknownEni("eni-9".into()))
    );
    // Single members are not secondaries.
    assert_eq!(
        p.add_addresses("eni-1", &[ip("10.0.4.3")]),
        Err(PoolError::AddressInPrefix {
            ip: ip("10.0.4.3"),
            prefix: net("10.0.4.0/28")
        })
    );
    assert!(matches!(
        p.add_addresses("eni-0", &[ip("10.0.4.3")]),
        Err(PoolError::AddressOnOtherEni { .. })
    ));
    assert!(matches!(
        p.remove_address(ip("10.0.4.3"), Removal::Force),
        Err(PoolError::AddressInPrefix { .. })
    ));
}

#[test]
fn a_prefix_in_use_or_cooling_is_only_removed_by_force() {
    let mut p = pool_with(0);
    p.add_prefixes("eni-0", &[net("10.0.3.0/28")]).unwrap();
    let a = p
        .assign(&key(1), &PodInfo::default(), Timestamp(0))
        .unwrap()
        .0;
    assert_eq!(
        p.remove_prefix(net("10.0.3.0/28"), Removal::IfUnused(Timestamp(0))),
        Err(PoolError::InUse {
            ip: a.ip,
            holder: key(1).to_string()
        })
    );
    p.release(&key(1), Timestamp(0)).unwrap();
    // Cooling: not given back (other nodes may still route the old pod's traffic to it)...
    assert!(matches!(
        p.remove_prefix(net("10.0.3.0/28"), Removal::IfUnused(Timestamp(0))),
        Err(PoolError::Cooling { ip, .. }) if ip == a.ip
    ));
    // ...until the cooldown is over.
    let (taken, muts) = p
        .remove_prefix(
            net("10.0.3.0/28"),
            Removal::IfUnused(Timestamp(0).after(COOLDOWN)),
        )
        .unwrap();
    assert!(taken.is_empty());
    assert_eq!(muts.len(), 16);
    assert_eq!(p.counts(Timestamp(0)).total, 0);
    assert_eq!(p.prefixes("eni-0").count(), 0);
    assert_eq!(
        p.remove_prefix(net("10.0.3.0/28"), Removal::Force),
        Err(PoolError::UnknownPrefix(net("10.0.3.0/28")))
    );

    p.add_prefixes("eni-0", &[net("10.0.3.0/28")]).unwrap();
    p.assign(&key(2), &PodInfo::default(), Timestamp(0))
        .unwrap();
    let (taken, _) = p.remove_prefix(net("10.0.3.0/28"), Removal::Force).unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].key, key(2));
    assert!(p.get(&key(2)).is_none());
    // The same prefix may come back on another ENI once gone.
    p.upsert_eni(eni("eni-1", 1, "10.0.1.10"));
    p.add_prefixes("eni-1", &[net("10.0.3.0/28")]).unwrap();
}

#[test]
fn pods_are_packed_into_prefixes_already_in_use() {
    let mut p = pool_with(0);
    let t0 = Timestamp(1_000_000);
    p.add_prefixes("eni-0", &[net("10.0.3.16/28")]).unwrap();
    let first = p.assign(&key(0), &PodInfo::default(), t0).unwrap().0;
    assert_eq!(first.ip, ip("10.0.3.16"));
    // A lower, never-used prefix arrives: the used one is still filled first.
    p.add_prefixes("eni-0", &[net("10.0.3.0/28")]).unwrap();
    let second = p.assign(&key(1), &PodInfo::default(), t0).unwrap().0;
    assert_eq!(second.ip, ip("10.0.3.17"));
    // A secondary /32 comes before a prefix nobody uses.
    for k in 2..16 {
        p.assign(&key(k), &PodInfo::default(), t0).unwrap();
    }
    p.add_addresses("eni-0", &[ip("10.0.9.9")]).unwrap();
    assert_eq!(
        p.assign(&key(16), &PodInfo::default(), t0).unwrap().0.ip,
        ip("10.0.9.9")
    );
    assert_eq!(
        p.assign(&key(17), &PodInfo::default(), t0).unwrap().0.ip,
        ip("10.0.3.0")
    );
    // Now 10.0.3.16/28 holds 16 pods and 10.0.3.0/28 one. Fourteen leave the first; after
    // the cooldown it has 2 pods and 14 addresses free, the other 1 and 15: the fuller one
    // is filled first, although its free addresses were used more recently.
    for k in 2..16 {
        p.release(&key(k), t0).unwrap();
    }
    let later = t0.after(COOLDOWN);
    let next = p.assign(&key(18), &PodInfo::default(), later).unwrap().0;
    assert!(net("10.0.3.16/28").contains(next.ip), "{}", next.ip);
}

#[test]
fn release_and_unassign_keep_an_address_in_its_prefix() {
    let mut p = pool_with(0);
    p.add_prefixes("eni-0", &[net("10.0.3.0/28")]).unwrap();
    p.assign(&key(1), &PodInfo::default(), Timestamp(0))
        .unwrap();
    p.assign(&key(2), &PodInfo::default(), Timestamp(0))
        .unwrap();
    let (_, muts) = p.release(&key(1), Timestamp(0)).unwrap();
    let Mutation::PutAddr(a) = &muts[0] else {
        panic!("{muts:?}")
    };
    assert_eq!(a.slot.prefix, Some(net("10.0.3.0/28")));
    let muts = p.unassign_unused(&key(2)).unwrap();
    let Mutation::PutAddr(a) = &muts[0] else {
        panic!("{muts:?}")
    };
    assert_eq!(a.slot.prefix, Some(net("10.0.3.0/28")));
    assert!(
        p.addresses("eni-0")
            .all(|(_, s)| s.prefix == Some(net("10.0.3.0/28")))
    );
}

#[test]
fn state_from_before_prefixes_still_loads_and_secondaries_are_written_as_before() {
    let old = concat!(
        r#"{"ip":"10.0.0.11","eni":"eni-0","#,
        r#""slot":{"state":{"free":{"cooling_until":5}},"released_at":3}}"#
    );
    let a: PersistedAddr = serde_json::from_str(old).unwrap();
    assert_eq!(a.slot.prefix, None);
    assert_eq!(serde_json::to_string(&a).unwrap(), old);
    let mut member = a.clone();
    member.slot.prefix = Some(net("10.0.0.0/28"));
    let json = serde_json::to_string(&member).unwrap();
    assert!(json.contains(r#""prefix":"10.0.0.0/28""#), "{json}");
    assert_eq!(
        serde_json::from_str::<PersistedAddr>(&json).unwrap(),
        member
    );
}

#[test]
fn restore_keeps_prefixes_and_repairs_broken_ones() {
    let mut p = pool_with(1);
    p.upsert_eni(eni("eni-1", 1, "10.0.1.10"));
    p.add_prefixes("eni-0", &[net("10.0.3.0/28")]).unwrap();
    p.add_prefixes("eni-1", &[net("10.0.3.16/28")]).unwrap();
    p.assign(&key(1), &PodInfo::default(), Timestamp(0))
        .unwrap();
    let (restored, fixes, issues) = Pool::restore(p.to_state(), COOLDOWN);
    assert!(fixes.is_empty() && issues.is_empty(), "{issues:?}");
    assert_eq!(
        restored.prefixes("eni-1").collect::<Vec<_>>(),
        vec![net("10.0.3.16/28")]
    );
    assert_eq!(restored.get(&key(1)), p.get(&key(1)));

    // One member lost, and a prefix claimed by both ENIs.
    let mut state = p.to_state();
    state.addrs.retain(|a| a.ip != ip("10.0.3.5"));
    for a in &mut state.addrs {
        if a.ip == ip("10.0.3.20") {
            a.eni = "eni-0".into();
        }
    }
    let (repaired, fixes, issues) = Pool::restore(state, COOLDOWN);
    assert_eq!(
        issues,
        vec![
            RestoreIssue::BrokenPrefix {
                prefix: net("10.0.3.16/28")
            },
            RestoreIssue::IncompletePrefix {
                prefix: net("10.0.3.0/28"),
                eni: "eni-0".into(),
                missing: 1
            },
        ]
    );
    assert_eq!(fixes.len(), 17, "16 members dropped, 1 added back");
    assert_eq!(repaired.prefixes("eni-1").count(), 0);
    assert_eq!(repaired.addresses("eni-0").count(), 17);
}

#[test]
fn a_cooling_address_or_an_eni_holding_one_is_not_given_back() {
    let mut p = pool_with(2);
    let t0 = Timestamp(0);
    let a = p.assign(&key(1), &PodInfo::default(), t0).unwrap().0;
    p.release(&key(1), t0).unwrap();
    assert!(matches!(
        p.remove_address(a.ip, Removal::IfUnused(t0)),
        Err(PoolError::Cooling { .. })
    ));
    assert!(matches!(
        p.remove_eni("eni-0", Removal::IfUnused(t0)),
        Err(PoolError::Cooling { .. })
    ));
    let later = t0.after(COOLDOWN);
    assert!(p.remove_address(a.ip, Removal::IfUnused(later)).is_ok());
    assert!(p.remove_eni("eni-0", Removal::IfUnused(later)).is_ok());
}

#[test]
fn an_adopted_address_stays_with_its_pod_and_is_never_handed_out_again() {
    let mut p = pool_with(3);
    let pod = PodInfo {
        namespace: "default".into(),
        name: "web".into(),
        ..PodInfo::default()
    };
    let (a, muts) = p
        .adopt(&key(1), &pod, ip("10.0.0.12"), Timestamp(7))
        .unwrap();
    assert_eq!(
        (a.ip, a.assigned_at, a.pod),
        (ip("10.0.0.12"), Timestamp(7), pod.clone())
    );
    assert_eq!(muts.len(), 1);
    let (again, muts) = p
        .adopt(&key(1), &pod, ip("10.0.0.12"), Timestamp(7))
        .unwrap();
    assert_eq!(again.ip, a.ip);
    assert!(muts.is_empty(), "adopting twice changes nothing");

    let others: HashSet<_> = (2..=3)
        .map(|n| {
            p.assign(&key(n), &PodInfo::default(), Timestamp(9))
                .unwrap()
                .0
                .ip
        })
        .collect();
    assert!(
        !others.contains(&a.ip),
        "an ADD never gets the adopted address"
    );
}

#[test]
fn adopting_refuses_what_the_pool_cannot_honour() {
    let mut p = pool_with(3);
    let pod = PodInfo::default();
    assert_eq!(
        p.adopt(&key(1), &pod, ip("10.9.9.9"), Timestamp(1))
            .unwrap_err(),
        PoolError::UnknownAddress(ip("10.9.9.9"))
    );
    p.adopt(&key(1), &pod, ip("10.0.0.11"), Timestamp(1))
        .unwrap();
    assert!(matches!(
        p.adopt(&key(2), &pod, ip("10.0.0.11"), Timestamp(1)).unwrap_err(),
        PoolError::InUse { ip: a, .. } if a == ip("10.0.0.11")
    ));
    assert!(matches!(
        p.adopt(&key(1), &pod, ip("10.0.0.12"), Timestamp(1)).unwrap_err(),
        PoolError::KeyHoldsOther { held, .. } if held == ip("10.0.0.11")
    ));
    assert_eq!(
        p.counts(Timestamp(2)).assigned,
        1,
        "refusals change nothing"
    );
}

#[test]
fn a_cooldown_starts_only_on_an_available_address() {
    let mut p = pool_with(3);
    let now = Timestamp(1_000);
    let held = p.assign(&key(1), &PodInfo::default(), now).unwrap().0.ip;
    let free = ip("10.0.0.12");
    assert!(p.start_cooldown(held, now).is_none(), "a held address");
    assert!(p.start_cooldown(ip("10.9.9.9"), now).is_none(), "unknown");
    let muts = p.start_cooldown(free, now).expect("a free address");
    assert_eq!(muts.len(), 1);
    assert!(p.start_cooldown(free, now).is_none(), "already cooling");
    assert_eq!(p.counts(now).cooling, 1);
    // Not handed out while cooling; handed out (last, as released) once it is over.
    let (b, _) = p.assign(&key(2), &PodInfo::default(), now).unwrap();
    assert_ne!(b.ip, free);
    assert!(p.assign(&key(3), &PodInfo::default(), now).is_err());
    let after = now.after(COOLDOWN);
    assert_eq!(
        p.assign(&key(3), &PodInfo::default(), after).unwrap().0.ip,
        free
    );
}
