//! The WARM_ENI_TARGET plan: golden cases from the Go CNI's documented behaviour, and a
//! simulation in which EC2 grants every action.

mod common;

use std::net::Ipv4Addr;

use common::*;
use pool::*;
use proptest::prelude::*;

/// m5.large: 3 ENIs x 10 IPv4 (9 secondaries each), max pods 29.
const M5_LARGE: NodeLimits = NodeLimits {
    max_enis: 3,
    secondary_ips_per_eni: 9,
    max_pods: 29,
};

/// Plays EC2: carries out every action until the plan holds still (bounded).
fn converge(p: &mut Pool, limits: &NodeLimits, targets: &Targets, next_ip: &mut u32) -> Plan {
    for _ in 0..16 {
        let plan = plan(p, limits, targets, Timestamp(0));
        let Some(action) = plan.actions.first().cloned() else {
            return plan;
        };
        match action {
            Action::AssignIps { eni_id, count } => {
                let ips = fresh(next_ip, count);
                p.add_addresses(&eni_id, &ips).unwrap();
            }
            Action::CreateEni { ips } => {
                let device = p.enis().count() as u32;
                let id = format!("eni-{device}");
                p.upsert_eni(eni(
                    &id,
                    device,
                    &Ipv4Addr::from(0x0a00_1000 + device).to_string(),
                ));
                let ips = fresh(next_ip, ips);
                p.add_addresses(&id, &ips).unwrap();
            }
        }
    }
    panic!("the plan did not settle in 16 rounds");
}

fn fresh(next: &mut u32, count: u32) -> Vec<Ipv4Addr> {
    (0..count)
        .map(|_| {
            *next += 1;
            Ipv4Addr::from(0x0a00_0000 + *next)
        })
        .collect()
}

fn primary_only() -> Pool {
    let mut p = Pool::new(COOLDOWN);
    p.upsert_eni(eni("eni-0", 0, "10.255.0.1"));
    p
}

#[test]
fn m5_large_with_the_default_target_fills_the_primary_then_adds_an_eni_for_the_first_pod() {
    let targets = Targets::default();
    let mut p = primary_only();
    let mut next = 0;
    // 0 pods: the primary ENI is filled with 9 addresses, no second ENI.
    assert_eq!(
        plan(&p, &M5_LARGE, &targets, Timestamp(0)).actions,
        vec![Action::AssignIps {
            eni_id: "eni-0".into(),
            count: 9
        }]
    );
    converge(&mut p, &M5_LARGE, &targets, &mut next);
    assert_eq!((p.enis().count(), p.counts(Timestamp(0)).total), (1, 9));
    // 1 pod: 8 available < 9, the primary is full: a new ENI with 9.
    p.assign(&key(1), &PodInfo::default(), Timestamp(0))
        .unwrap();
    assert_eq!(
        plan(&p, &M5_LARGE, &targets, Timestamp(0)).actions,
        vec![Action::CreateEni { ips: 9 }]
    );
    converge(&mut p, &M5_LARGE, &targets, &mut next);
    assert_eq!((p.enis().count(), p.counts(Timestamp(0)).total), (2, 18));
}

#[test]
fn warm_eni_target_two_keeps_two_enis_of_addresses_free() {
    let targets = Targets { warm_eni: 2 };
    let mut p = primary_only();
    converge(&mut p, &M5_LARGE, &targets, &mut 0);
    assert_eq!((p.enis().count(), p.counts(Timestamp(0)).total), (2, 18));
}

#[test]
fn warm_eni_target_zero_grows_only_when_nothing_is_available() {
    let targets = Targets { warm_eni: 0 };
    let mut p = primary_only();
    let mut next = 0;
    converge(&mut p, &M5_LARGE, &targets, &mut next);
    assert_eq!(p.counts(Timestamp(0)).total, 9);
    for n in 0..8 {
        p.assign(&key(n), &PodInfo::default(), Timestamp(0))
            .unwrap();
    }
    assert!(
        plan(&p, &M5_LARGE, &targets, Timestamp(0))
            .actions
            .is_empty()
    );
    p.assign(&key(8), &PodInfo::default(), Timestamp(0))
        .unwrap();
    assert_eq!(
        plan(&p, &M5_LARGE, &targets, Timestamp(0)).actions,
        vec![Action::CreateEni { ips: 9 }]
    );
}

#[test]
fn cooling_addresses_do_not_count_as_available() {
    let targets = Targets::default();
    let mut p = primary_only();
    let mut next = 0;
    converge(&mut p, &M5_LARGE, &targets, &mut next);
    // Nine pods come and go: every address cools down at once.
    for n in 0..9 {
        p.assign(&key(n), &PodInfo::default(), Timestamp(0))
            .unwrap();
    }
    for n in 0..9 {
        p.release(&key(n), Timestamp(0)).unwrap();
    }
    assert_eq!(p.counts(Timestamp(0)).cooling, 9);
    assert_eq!(
        plan(&p, &M5_LARGE, &targets, Timestamp(0)).actions,
        vec![Action::CreateEni { ips: 9 }]
    );
}

#[test]
fn a_full_node_says_why_it_cannot_grow() {
    let targets = Targets::default();
    let mut p = primary_only();
    let mut next = 0;
    let small = NodeLimits {
        max_enis: 2,
        secondary_ips_per_eni: 3,
        max_pods: 8,
    };
    converge(&mut p, &small, &targets, &mut next);
    for n in 0..6 {
        p.assign(&key(n), &PodInfo::default(), Timestamp(0))
            .unwrap();
        converge(&mut p, &small, &targets, &mut next);
    }
    let plan = plan(&p, &small, &targets, Timestamp(0));
    assert_eq!(plan.blocked, Some(Blocked::MaxEnis { enis: 2 }));
    assert!(
        plan.blocked
            .unwrap()
            .to_string()
            .contains("max ENI limit is already reached")
    );

    let capped = NodeLimits {
        max_pods: 6,
        ..small
    };
    let plan = pool::plan(&p, &capped, &targets, Timestamp(0));
    assert_eq!(plan.blocked, Some(Blocked::MaxPods { max_pods: 6 }));
}

#[test]
fn growth_stops_at_max_pods() {
    let limits = NodeLimits {
        max_enis: 3,
        secondary_ips_per_eni: 5,
        max_pods: 7,
    };
    let mut p = primary_only();
    let mut next = 0;
    converge(&mut p, &limits, &Targets::default(), &mut next);
    p.assign(&key(1), &PodInfo::default(), Timestamp(0))
        .unwrap();
    converge(&mut p, &limits, &Targets::default(), &mut next);
    assert_eq!(p.counts(Timestamp(0)).total, 7, "5 + 2 more, not 10");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Whatever pods come and go, a pool grown by the plan never exceeds the instance's ENI
    /// or per-ENI limits or max pods, and settles either at target or blocked with a reason.
    #[test]
    fn growth_respects_every_limit_and_settles(
        max_enis in 1u32..5,
        per_eni in 1u32..12,
        extra_pods in 0u32..20,
        warm_eni in 0u32..3,
        churn in proptest::collection::vec((0u32..40, any::<bool>()), 0..60),
    ) {
        let limits = NodeLimits {
            max_enis,
            secondary_ips_per_eni: per_eni,
            max_pods: (max_enis * per_eni).min(per_eni + extra_pods).max(1),
        };
        let targets = Targets { warm_eni };
        let mut p = primary_only();
        let mut next = 0;
        let mut now = Timestamp(0);
        for (k, add) in churn {
            if add {
                let _ = p.assign(&key(k), &PodInfo::default(), now);
            } else {
                let _ = p.release(&key(k), now);
            }
            now = now.after(std::time::Duration::from_secs(7));
            let settled = converge(&mut p, &limits, &targets, &mut next);
            prop_assert!(p.enis().count() as u32 <= limits.max_enis);
            for e in p.enis() {
                prop_assert!(p.addresses(&e.id).count() as u32 <= per_eni);
            }
            let c = p.counts(now);
            prop_assert!(c.total <= limits.max_pods);
            let low = if warm_eni == 0 { c.available == 0 } else { c.available < warm_eni * per_eni };
            prop_assert!(!low || settled.blocked.is_some(), "low but not blocked: {:?}", c);
        }
    }
}
