//! `explain`: the reason given for each kind of decision, in the planner's numbers, and that
//! it always agrees with the plan.

use crate::common;

use std::net::Ipv4Addr;
use std::time::Duration;

use common::*;
use ipnetwork::Ipv4Network;
use pool::*;
use proptest::prelude::*;

fn limits(max_enis: u32, per_eni: u32) -> NodeLimits {
    NodeLimits {
        max_enis,
        secondary_ips_per_eni: per_eni,
        max_pods: 110,
    }
}

fn warm_ip(warm: u32, minimum: u32) -> Targets {
    Targets {
        warm_ip: warm,
        minimum_ip: minimum,
        ..Targets::default()
    }
}

fn explain_at(pool: &Pool, limits: NodeLimits, targets: Targets, now: Timestamp) -> Explained {
    let ctx = PlanContext::at(now);
    let explained = explain(pool, &limits, &targets, ctx);
    assert_eq!(explained.plan, plan(pool, &limits, &targets, ctx));
    explained
}

/// `eni-<device>` (device 0 is the primary) created at `created`, holding `n` secondaries.
fn add_eni(pool: &mut Pool, device: u32, n: u8, created: Timestamp) {
    let id = format!("eni-{device}");
    let base = 10 + 16 * device as u8;
    let mut info = eni(&id, device, &Ipv4Addr::new(10, 0, 0, base).to_string());
    info.created_at = created;
    pool.upsert_eni(info);
    let ips: Vec<Ipv4Addr> = (1..=n).map(|i| Ipv4Addr::new(10, 0, 0, base + i)).collect();
    pool.add_addresses(&id, &ips).unwrap();
}

#[test]
fn a_low_pool_quotes_the_target_it_misses() {
    let p = pool_with(2);
    let e = explain_at(&p, limits(3, 9), warm_ip(5, 0), START);
    assert!(matches!(e.reason, Reason::Low(_)), "{:?}", e.reason);
    assert_eq!(e.reason.to_string(), "available 2 < WARM_IP_TARGET 5");
    assert_eq!(e.reason.standing().available, 2);

    let e = explain_at(&p, limits(3, 9), warm_ip(1, 10), START);
    assert_eq!(e.reason.to_string(), "total 2 < MINIMUM_IP_TARGET 10");

    let e = explain_at(&p, limits(3, 9), warm_ip(4, 10), START);
    assert_eq!(
        e.reason.to_string(),
        "available 2 < WARM_IP_TARGET 4 and total 2 < MINIMUM_IP_TARGET 10"
    );

    let e = explain_at(&p, limits(3, 9), Targets::default(), START);
    assert_eq!(
        e.reason.to_string(),
        "available 2 < WARM_ENI_TARGET 1 × 9 addresses per ENI"
    );
    assert!(e.plan.actions[0].is_growth());
}

#[test]
fn cooling_addresses_do_not_count_as_available_in_the_reason() {
    let mut p = pool_with(3);
    p.assign(&key(1), &PodInfo::default(), START).unwrap();
    p.release(&key(1), START).unwrap();
    let e = explain_at(&p, limits(3, 9), warm_ip(3, 0), START);
    assert_eq!(e.reason.to_string(), "available 2 < WARM_IP_TARGET 3");
}

#[test]
fn a_blocked_pool_says_what_blocks_it_and_what_it_misses() {
    let mut p = pool_with(2);
    p.assign(&key(1), &PodInfo::default(), START).unwrap();
    p.assign(&key(2), &PodInfo::default(), START).unwrap();
    let e = explain_at(&p, limits(1, 2), warm_ip(1, 0), START);
    assert_eq!(e.plan.blocked, Some(Blocked::MaxEnis { enis: 1 }));
    assert_eq!(
        e.reason.to_string(),
        "blocked: the max ENI limit is already reached (1 ENIs attached, every one full); \
         available 0 < WARM_IP_TARGET 1"
    );
}

#[test]
fn a_surplus_is_quoted_and_the_release_interval_is_waited_out() {
    let p = pool_with(6);
    let e = explain_at(&p, limits(3, 9), warm_ip(2, 0), START);
    assert!(e.plan.actions.iter().all(Action::is_release));
    assert_eq!(
        e.reason.to_string(),
        "available 6 > WARM_IP_TARGET 2: 4 addresses can go"
    );

    let e = explain_at(&p, limits(3, 9), warm_ip(2, 5), START);
    assert_eq!(
        e.reason.to_string(),
        "available 6 > WARM_IP_TARGET 2 and total 6 > MINIMUM_IP_TARGET 5: 1 addresses can go"
    );

    let ctx = PlanContext {
        now: START,
        last_release: Some(Timestamp(START.millis() - 10_000)),
        ..PlanContext::at(START)
    };
    let e = explain(&p, &limits(3, 9), &warm_ip(2, 0), ctx);
    assert_eq!(e.plan, Plan::default());
    assert_eq!(
        e.reason,
        Reason::ReleaseWait {
            standing: *e.reason.standing(),
            surplus: 4,
            next_in: Duration::from_secs(20),
        }
    );
    assert_eq!(
        e.reason.to_string(),
        "available 6 > WARM_IP_TARGET 2: 4 addresses can go, but the last release was less \
         than 30s ago (next in 20s)"
    );
}

#[test]
fn a_surplus_that_cannot_go_is_explained() {
    // Prefix delegation with WARM_IP_TARGET 1: one wholly free /28 is 15 above target, but
    // a /28 does not fit in 15 addresses, and the primary ENI never goes.
    let mut p = Pool::new(COOLDOWN);
    p.upsert_eni(eni("eni-0", 0, "10.0.0.1"));
    let prefix: Ipv4Network = "10.0.0.16/28".parse().unwrap();
    p.add_prefixes("eni-0", &[prefix]).unwrap();
    let targets = Targets {
        warm_ip: 1,
        prefix_delegation: true,
        ..Targets::default()
    };
    let e = explain_at(&p, limits(3, 9), targets, START);
    assert_eq!(e.plan, Plan::default());
    assert!(
        matches!(e.reason, Reason::SurplusHeld { surplus: 15, .. }),
        "{:?}",
        e.reason
    );
    assert!(
        e.reason.to_string().starts_with(
            "available 16 > WARM_IP_TARGET 1: 15 addresses can go, but none can go now"
        ),
        "{}",
        e.reason
    );

    let e = explain_at(&p, limits(3, 9), pd(0), START);
    assert_eq!(
        e.reason.to_string(),
        "at target: available 16 ≥ WARM_PREFIX_TARGET 1 × 16, 1 wholly free prefixes"
    );
}

fn pd(warm_prefix: u32) -> Targets {
    Targets {
        warm_prefix,
        prefix_delegation: true,
        ..Targets::default()
    }
}

#[test]
fn freeing_an_eni_names_it_and_the_warm_eni_arithmetic() {
    let old = Timestamp(0);
    let mut p = Pool::new(COOLDOWN);
    add_eni(&mut p, 0, 2, old);
    add_eni(&mut p, 1, 2, old);
    add_eni(&mut p, 2, 2, old);
    let e = explain_at(&p, limits(3, 2), Targets::default(), START);
    assert_eq!(
        e.plan.actions,
        vec![Action::FreeEni {
            eni_id: "eni-2".into()
        }]
    );
    assert_eq!(
        e.reason.to_string(),
        "available 6 = 3 ENIs' worth ≥ WARM_ENI_TARGET 1 + 1: eni-2 is unused"
    );

    let e = explain_at(&p, limits(3, 2), warm_ip(2, 0), START);
    assert!(
        matches!(&e.reason, Reason::Surplus { surplus: 4, .. }),
        "releases come before frees: {:?}",
        e.reason
    );
}

#[test]
fn spare_enis_that_cannot_go_are_explained() {
    let mut p = Pool::new(COOLDOWN);
    add_eni(&mut p, 0, 2, Timestamp(0));
    add_eni(&mut p, 1, 2, START);
    add_eni(&mut p, 2, 2, START);
    let e = explain_at(&p, limits(3, 2), Targets::default(), START);
    assert_eq!(e.plan, Plan::default());
    assert!(matches!(e.reason, Reason::EnisHeld(_)), "{:?}", e.reason);
    assert!(
        e.reason.to_string().starts_with(
            "available 6 = 3 ENIs' worth ≥ WARM_ENI_TARGET 1 + 1, but no ENI can be freed"
        ),
        "{}",
        e.reason
    );
}

#[test]
fn a_settled_pool_is_at_target() {
    let mut p = Pool::new(COOLDOWN);
    add_eni(&mut p, 0, 2, Timestamp(0));
    let e = explain_at(&p, limits(3, 2), Targets::default(), START);
    assert_eq!(
        e.reason.to_string(),
        "at target: available 2 ≥ WARM_ENI_TARGET 1 × 2 addresses per ENI"
    );
    let e = explain_at(&p, limits(3, 2), warm_ip(2, 2), START);
    assert_eq!(
        e.reason.to_string(),
        "at target: available 2 ≥ WARM_IP_TARGET 2, total 2 ≥ MINIMUM_IP_TARGET 2"
    );
}

fn targets() -> impl Strategy<Value = Targets> {
    (0u32..3, 0u32..12, 0u32..20, 0u32..3, any::<bool>()).prop_map(
        |(warm_eni, warm_ip, minimum_ip, warm_prefix, prefix_delegation)| Targets {
            warm_eni,
            warm_ip,
            minimum_ip,
            warm_prefix,
            prefix_delegation,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// At every step of a churning node, the reason matches the kind of plan it explains.
    #[test]
    fn the_reason_always_matches_the_plan(
        max_enis in 1u32..4,
        per_eni in 1u32..6,
        targets in targets(),
        churn in proptest::collection::vec((0u8..3, 0u32..8), 1..40),
    ) {
        let limits = NodeLimits { max_enis, secondary_ips_per_eni: per_eni, max_pods: 40 };
        let mut sim = Sim::new(limits, targets);
        for (what, n) in churn {
            match what {
                0 => for _ in 0..n { if sim.pods.len() < 40 { sim.add_pod(); } },
                1 => for _ in 0..n { if !sim.pods.is_empty() { sim.remove_pod(0); } },
                _ => sim.advance(TICK * n),
            }
            let e = explain(&sim.pool, &limits, &targets, sim.ctx());
            prop_assert_eq!(&e.plan, &sim.plan());
            let growing = e.plan.actions.first().is_some_and(Action::is_growth);
            let releasing = e.plan.actions.first().is_some_and(Action::is_release);
            let freeing = matches!(e.plan.actions.first(), Some(Action::FreeEni { .. }));
            match &e.reason {
                Reason::Low(_) => prop_assert!(growing),
                Reason::Blocked { blocked, .. } => {
                    prop_assert!(e.plan.actions.is_empty());
                    prop_assert_eq!(e.plan.blocked, Some(*blocked));
                }
                Reason::Surplus { surplus, .. } => {
                    prop_assert!(releasing);
                    prop_assert!(*surplus > 0);
                }
                Reason::Probe { eni_id, .. } => {
                    prop_assert_eq!(e.plan.actions.len(), 1);
                    let probed = match &e.plan.actions[0] {
                        Action::AssignPrefixes { eni_id, count: 1 } => Some(eni_id),
                        Action::ReleaseIps { eni_id, ips } if ips.len() == 1 => Some(eni_id),
                        _ => None,
                    };
                    prop_assert_eq!(probed, Some(eni_id));
                }
                Reason::Retiring { ips, .. } => {
                    prop_assert!(releasing);
                    prop_assert!(*ips > 0);
                }
                Reason::FreeEni { eni_id, .. } => {
                    prop_assert!(freeing);
                    prop_assert_eq!(
                        &e.plan.actions[0],
                        &Action::FreeEni { eni_id: eni_id.clone() }
                    );
                }
                Reason::ReleaseWait { surplus, .. } | Reason::SurplusHeld { surplus, .. } => {
                    prop_assert_eq!(&e.plan, &Plan::default());
                    prop_assert!(*surplus > 0);
                }
                Reason::EnisHeld(s) => {
                    prop_assert_eq!(&e.plan, &Plan::default());
                    prop_assert_eq!(s.mode, PoolMode::WarmEni);
                }
                Reason::Congested(_) | Reason::AtTarget(_) => {
                    prop_assert_eq!(&e.plan, &Plan::default())
                }
            }
            let counts = sim.pool.counts(sim.now);
            let s = e.reason.standing();
            prop_assert_eq!((s.total, s.assigned, s.available), (counts.total, counts.assigned, counts.available));
            prop_assert!(!e.reason.to_string().is_empty());
            sim.execute(&e.plan);
        }
    }
}
