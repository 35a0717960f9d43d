mod common;

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
        p.remove_address(a.ip, false),
        Err(PoolError::InUse { .. })
    ));
    let (taken, _) = p.remove_address(a.ip, true).unwrap();
    assert_eq!(taken.unwrap().key, key(1));
    assert!(p.get(&key(1)).is_none());
    assert_eq!(p.counts(Timestamp(0)).total, 1);

    assert!(p.remove_eni("eni-0", false).is_ok());
    assert_eq!(p.enis().count(), 0);
}

#[test]
fn removing_an_eni_in_use_needs_force_and_reports_the_pods() {
    let mut p = pool_with(2);
    p.assign(&key(1), &PodInfo::default(), Timestamp(0))
        .unwrap();
    assert!(matches!(
        p.remove_eni("eni-0", false),
        Err(PoolError::InUse { .. })
    ));
    let (dropped, muts) = p.remove_eni("eni-0", true).unwrap();
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
fn route_tables_follow_the_device_number() {
    assert_eq!(eni("e", 0, "10.0.0.1").route_table(), MAIN_TABLE);
    assert_eq!(eni("e", 2, "10.0.0.1").route_table(), 3);
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
