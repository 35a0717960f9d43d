//! The planner's rules, one at a time, and a property test of a node whose EC2 grants every
//! action under random targets, limits and pod churn.

use crate::common;

use std::net::Ipv4Addr;
use std::time::Duration;

use common::*;
use ipnetwork::Ipv4Network;
use pool::*;
use proptest::prelude::*;

/// m5.large: 3 ENIs x 10 IPv4 (9 secondaries each), max pods 29.
const M5_LARGE: NodeLimits = NodeLimits {
    max_enis: 3,
    secondary_ips_per_eni: 9,
    max_pods: 29,
};

fn warm_eni(n: u32) -> Targets {
    Targets {
        warm_eni: n,
        ..Targets::default()
    }
}

fn warm_ip(warm: u32, minimum: u32) -> Targets {
    Targets {
        warm_ip: warm,
        minimum_ip: minimum,
        ..Targets::default()
    }
}

fn pd(warm_prefix: u32) -> Targets {
    Targets {
        warm_prefix,
        prefix_delegation: true,
        ..Targets::default()
    }
}

fn net(s: &str) -> Ipv4Network {
    s.parse().unwrap()
}

#[test]
fn the_targets_select_the_mode() {
    assert_eq!(Targets::default().mode(), PoolMode::WarmEni);
    assert_eq!(
        Targets::default(),
        Targets {
            warm_eni: 1,
            warm_ip: 0,
            minimum_ip: 0,
            warm_prefix: 0,
            prefix_delegation: false
        }
    );
    assert_eq!(warm_ip(0, 3).mode(), PoolMode::WarmIp);
    assert_eq!(pd(2).mode(), PoolMode::WarmPrefix);
    assert_eq!(
        Targets {
            warm_ip: 5,
            ..pd(2)
        }
        .mode(),
        PoolMode::WarmIp,
        "IP targets override WARM_PREFIX_TARGET"
    );
    // Prefix delegation with every target 0: run as WARM_PREFIX_TARGET=1.
    assert_eq!(pd(0).warm_prefix_in_effect(), 1);
    assert_eq!(pd(3).warm_prefix_in_effect(), 3);
    assert_eq!(M5_LARGE.prefixes_per_eni(), 9);
}

#[test]
fn m5_large_with_the_default_target_fills_the_primary_then_adds_an_eni_for_the_first_pod() {
    let mut sim = Sim::new(M5_LARGE, Targets::default());
    // 0 pods: the primary ENI is filled with 9 addresses, no second ENI.
    assert_eq!(
        sim.plan().actions,
        vec![Action::AssignIps {
            eni_id: "eni-0".into(),
            count: 9
        }]
    );
    sim.converge();
    assert_eq!((sim.enis(), sim.total()), (1, 9));
    // 1 pod: 8 available < 9, the primary is full: a new ENI with 9.
    assert!(sim.add_pod());
    assert_eq!(
        sim.plan().actions,
        vec![Action::CreateEni {
            ips: 9,
            prefixes: 0
        }]
    );
    sim.converge();
    assert_eq!((sim.enis(), sim.total()), (2, 18));
}

#[test]
fn an_excluded_primary_is_never_grown_or_counted_and_its_addresses_go_to_nobody() {
    // Custom networking: the primary ENI carries no pods, so the first growth is a new ENI
    // although the primary has free slots, and pods get only that ENI's addresses.
    let mut sim = Sim::new(M5_LARGE, Targets::default());
    sim.pool.exclude_from_pods(["eni-0".to_string()].into());
    assert_eq!(
        sim.plan().actions,
        vec![Action::CreateEni {
            ips: 9,
            prefixes: 0
        }]
    );
    sim.converge();
    assert_eq!((sim.enis(), sim.total()), (2, 9));
    for _ in 0..9 {
        assert!(sim.add_pod());
    }
    assert!(
        sim.pool.allocations().iter().all(|a| a.eni_id != "eni-0"),
        "no pod on the excluded primary"
    );
    // Max ENIs is still 3, the primary included: one more ENI, then the node is full.
    sim.converge();
    assert_eq!(sim.enis(), 3);
}

#[test]
fn free_addresses_on_an_excluded_eni_serve_no_pod_and_count_as_nothing() {
    let mut pool = pool_with(3);
    pool.assign(&key(1), &PodInfo::default(), Timestamp(1))
        .unwrap();
    pool.exclude_from_pods(["eni-0".to_string()].into());
    let c = pool.counts(Timestamp(1));
    assert_eq!((c.total, c.assigned, c.available), (1, 1, 0));
    assert!(
        pool.assign(&key(2), &PodInfo::default(), Timestamp(1))
            .is_err()
    );
    assert!(pool.get(&key(1)).is_some(), "the earlier assignment stays");
}

#[test]
fn warm_eni_target_zero_grows_only_when_nothing_is_available() {
    let mut sim = Sim::new(M5_LARGE, warm_eni(0));
    sim.converge();
    assert_eq!(sim.total(), 9);
    for _ in 0..8 {
        assert!(sim.add_pod());
    }
    assert!(sim.plan().actions.is_empty());
    assert!(sim.add_pod());
    assert_eq!(
        sim.plan().actions,
        vec![Action::CreateEni {
            ips: 9,
            prefixes: 0
        }]
    );
}

#[test]
fn cooling_addresses_do_not_count_as_available() {
    let mut sim = Sim::new(M5_LARGE, Targets::default());
    sim.converge();
    // Nine pods come and go: every address cools down at once.
    sim.scale_to(8);
    assert_eq!(sim.enis(), 2);
    sim.remove_all_pods();
    assert_eq!(sim.pool.counts(sim.now).cooling, 8);
    // 18 held, 10 available: enough. The Go CNI would count 18 and free the second ENI.
    assert!(sim.plan().actions.is_empty());

    let mut sim = Sim::new(M5_LARGE, Targets::default());
    sim.converge();
    for k in 0..9 {
        sim.pool
            .assign(&key(k), &PodInfo::default(), sim.now)
            .unwrap();
    }
    for k in 0..9 {
        sim.pool.release(&key(k), sim.now).unwrap();
    }
    assert_eq!(sim.pool.counts(sim.now).cooling, 9);
    assert_eq!(
        sim.plan().actions,
        vec![Action::CreateEni {
            ips: 9,
            prefixes: 0
        }]
    );
}

#[test]
fn a_full_node_says_why_it_cannot_grow() {
    let small = NodeLimits {
        max_enis: 2,
        secondary_ips_per_eni: 3,
        max_pods: 8,
    };
    let mut sim = Sim::new(small, Targets::default());
    sim.converge();
    sim.scale_to(6);
    let plan = sim.plan();
    assert_eq!(plan.blocked, Some(Blocked::MaxEnis { enis: 2 }));
    assert!(plan.actions.is_empty());
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
    let plan = pool::plan(&sim.pool, &capped, &Targets::default(), sim.ctx());
    assert_eq!(plan.blocked, Some(Blocked::MaxPods { max_pods: 6 }));
    assert_eq!(
        Blocked::MaxPods { max_pods: 6 }.to_string(),
        "the node holds addresses for its max pods (6)"
    );
}

#[test]
fn growth_stops_at_max_pods() {
    let limits = NodeLimits {
        max_enis: 3,
        secondary_ips_per_eni: 5,
        max_pods: 7,
    };
    let mut sim = Sim::new(limits, Targets::default());
    sim.converge();
    sim.scale_to(1);
    assert_eq!(sim.total(), 7, "5 + 2 more, not 10");
}

#[test]
fn with_prefixes_the_last_prefix_may_pass_max_pods_but_no_further() {
    let limits = NodeLimits {
        max_enis: 3,
        secondary_ips_per_eni: 3,
        max_pods: 20,
    };
    let mut sim = Sim::new(limits, pd(3));
    // Three prefixes wanted; two reach max pods.
    assert_eq!(
        sim.plan().actions,
        vec![Action::AssignPrefixes {
            eni_id: "eni-0".into(),
            count: 2
        }]
    );
    let plan = sim.converge();
    assert_eq!(sim.total(), 32);
    assert_eq!(plan.blocked, Some(Blocked::MaxPods { max_pods: 20 }));
}

#[test]
fn prefix_delegation_grows_by_prefixes_and_fills_before_creating() {
    let limits = NodeLimits {
        max_enis: 3,
        secondary_ips_per_eni: 2,
        max_pods: 110,
    };
    let mut sim = Sim::new(limits, pd(0));
    assert_eq!(
        sim.plan().actions,
        vec![Action::AssignPrefixes {
            eni_id: "eni-0".into(),
            count: 1
        }]
    );
    sim.converge();
    sim.scale_to(17);
    // 16 + 1 pods: the primary's two slots are used, the third prefix needs a new ENI.
    assert_eq!(sim.prefixes_per_eni(), vec![2, 1]);
    assert_eq!(sim.pods_per_prefix(), vec![16, 1, 0]);
    // A new ENI is pre-loaded with what is short.
    let mut sim = Sim::new(limits, pd(3));
    sim.converge();
    assert_eq!(sim.prefixes_per_eni(), vec![2, 1]);
}

#[test]
fn releases_wait_for_the_interval_and_never_take_cooling_addresses() {
    let limits = NodeLimits {
        max_enis: 1,
        secondary_ips_per_eni: 10,
        max_pods: 50,
    };
    let mut sim = Sim::new(limits, warm_ip(1, 0));
    sim.converge();
    sim.scale_to(6);
    let held: Vec<Ipv4Addr> = sim.pool.addresses("eni-0").map(|(ip, _)| ip).collect();
    assert_eq!(held.len(), 7, "6 pods, on the 6 lowest, and 1 warm");
    // The two oldest pods go, and after their cooldown the newest: the highest free address
    // but the spare is cooling.
    sim.remove_pod(0);
    sim.remove_pod(0);
    sim.advance(COOLDOWN);
    sim.remove_pod(3);
    sim.last_release = Some(Timestamp(sim.now.millis() - 29_000));
    // 3 available, 1 kept warm, but the last release was 29 s ago.
    assert!(sim.plan().actions.is_empty());
    sim.advance(Duration::from_secs(1));
    let plan = sim.plan();
    assert_eq!(
        plan.actions,
        vec![Action::ReleaseIps {
            eni_id: "eni-0".into(),
            ips: vec![held[6], held[1]],
        }],
        "highest available first, not the cooling {}",
        held[5]
    );
    sim.execute(&plan);
    assert_eq!(sim.total(), 5);
    assert_eq!(sim.last_release, Some(sim.now));
}

#[test]
fn a_prefix_with_a_cooling_address_is_not_released() {
    let limits = NodeLimits {
        max_enis: 1,
        secondary_ips_per_eni: 4,
        max_pods: 110,
    };
    let mut sim = Sim::new(limits, pd(1));
    sim.converge();
    sim.scale_to(17);
    assert_eq!(sim.pods_per_prefix(), vec![16, 1, 0]);
    // The pod on the second prefix goes; then the first prefix empties.
    sim.remove_pod(16);
    for _ in 0..16 {
        sim.remove_pod(0);
    }
    // Three prefixes, one wholly free: nothing to release while the others cool.
    assert!(sim.plan().actions.is_empty());
    sim.advance(COOLDOWN);
    let plan = sim.plan();
    assert_eq!(plan.actions.len(), 1);
    let Action::ReleasePrefixes { prefixes, .. } = &plan.actions[0] else {
        panic!("{plan:?}")
    };
    assert_eq!(prefixes.len(), 2, "keep one free prefix");
    sim.execute(&plan);
    assert_eq!(sim.prefixes(), 1);
}

#[test]
fn releases_start_on_the_eni_with_the_fewest_pods() {
    let limits = NodeLimits {
        max_enis: 3,
        secondary_ips_per_eni: 4,
        max_pods: 50,
    };
    let mut sim = Sim::new(limits, warm_ip(1, 0));
    sim.converge();
    sim.scale_to(10);
    assert_eq!(sim.ips_per_eni(), vec![4, 4, 3]);
    // Pods 2..=4 (on the primary) and 9 (on the last ENI) go.
    sim.remove_pod(8);
    for _ in 0..3 {
        sim.remove_pod(1);
    }
    sim.advance(COOLDOWN);
    let plan = sim.plan();
    let enis: Vec<&str> = plan
        .actions
        .iter()
        .map(|a| match a {
            Action::ReleaseIps { eni_id, .. } => eni_id.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    // 5 available, 1 kept: the last ENI (1 pod left) gives first, then the primary (1 pod).
    let last = sim
        .pool
        .enis()
        .find(|e| e.device_number == 2)
        .unwrap()
        .id
        .clone();
    assert_eq!(enis, vec![last.as_str(), "eni-0"]);
}

#[test]
fn an_eni_is_freed_only_when_old_unused_not_cooling_and_not_needed() {
    let mut sim = Sim::new(M5_LARGE, Targets::default());
    sim.converge();
    sim.scale_to(1);
    assert_eq!(sim.enis(), 2);
    sim.scale_to(0);
    // 18 held: 17 available + 1 cooling. Not enough to free (needs 2 x 9 available).
    assert!(sim.plan().actions.is_empty());
    sim.advance(COOLDOWN);
    // The second ENI is 35 s old.
    assert!(sim.plan().actions.is_empty(), "{:?}", sim.plan());
    sim.run_for(Duration::from_secs(20));
    assert_eq!(sim.enis(), 2, "55 s old");
    sim.run_for(TICK);
    assert_eq!(sim.enis(), 1);
    assert_eq!(sim.freed.len(), 1);
    // The primary ENI stays, whatever is free.
    sim.run_for(Duration::from_secs(120));
    assert_eq!((sim.enis(), sim.total()), (1, 9));
}

#[test]
fn an_eni_with_a_cooling_address_is_kept() {
    let limits = NodeLimits {
        max_enis: 3,
        secondary_ips_per_eni: 2,
        max_pods: 50,
    };
    let mut sim = Sim::new(limits, warm_ip(1, 0));
    sim.converge();
    sim.scale_to(3);
    sim.run_for(MIN_ENI_AGE);
    assert_eq!(sim.ips_per_eni(), vec![2, 2]);
    // The pod on the second ENI goes: one address there cools.
    sim.remove_pod(2);
    let plan = sim.plan();
    assert!(
        !plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::FreeEni { .. })),
        "{plan:?}"
    );
}

#[test]
fn warm_eni_target_zero_does_not_free_an_eni_it_would_recreate() {
    let limits = NodeLimits {
        max_enis: 3,
        secondary_ips_per_eni: 2,
        max_pods: 50,
    };
    let mut sim = Sim::new(limits, warm_eni(0));
    sim.converge();
    sim.scale_to(2);
    assert_eq!(sim.ips_per_eni(), vec![2, 2]);
    // 2 available on the unused second ENI = (0 + 1) x 2: the Go CNI would free it and then
    // find nothing available and create one again.
    sim.run_for(Duration::from_secs(300));
    assert_eq!(sim.ips_per_eni(), vec![2, 2]);
    assert!(sim.freed.is_empty());
}

#[test]
fn the_highest_device_is_freed_first_and_one_per_plan() {
    let limits = NodeLimits {
        max_enis: 4,
        secondary_ips_per_eni: 2,
        max_pods: 50,
    };
    let mut sim = Sim::new(limits, warm_eni(1));
    sim.converge();
    sim.scale_to(5);
    assert_eq!(sim.enis(), 4);
    sim.remove_all_pods();
    sim.advance(MIN_ENI_AGE);
    let plan = sim.plan();
    let last = sim
        .pool
        .enis()
        .find(|e| e.device_number == 3)
        .unwrap()
        .id
        .clone();
    assert_eq!(plan.actions, vec![Action::FreeEni { eni_id: last }]);
}

#[test]
fn an_ip_target_frees_an_eni_only_if_the_rest_still_meets_it() {
    let limits = NodeLimits {
        max_enis: 3,
        secondary_ips_per_eni: 3,
        max_pods: 50,
    };
    // The doc's t3.small with WARM_IP_TARGET=2, MINIMUM_IP_TARGET=5: (3, 2) at 0 pods. The
    // second ENI is never needed less: it holds 2 of the 5.
    let mut sim = Sim::new(limits, warm_ip(2, 5));
    sim.converge();
    sim.run_for(Duration::from_secs(300));
    assert_eq!(sim.ips_per_eni(), vec![3, 2]);
}

#[test]
fn growth_is_one_action_and_release_never_follows_growth() {
    let limits = NodeLimits {
        max_enis: 3,
        secondary_ips_per_eni: 4,
        max_pods: 110,
    };
    for targets in [
        warm_ip(7, 20),
        warm_ip(1, 1),
        pd(2),
        Targets {
            warm_ip: 5,
            ..pd(0)
        },
    ] {
        let mut sim = Sim::new(limits, targets);
        loop {
            let plan = sim.plan();
            if plan.actions.is_empty() {
                break;
            }
            assert_eq!(plan.actions.len(), 1);
            assert!(plan.actions[0].is_growth(), "{targets:?}: {plan:?}");
            sim.execute(&plan);
        }
    }
}

#[test]
fn switching_prefix_delegation_on_retires_free_slash_32s_and_off_keeps_prefixes() {
    // With prefix delegation switched on, free /32s do not count: a prefix comes first, then
    // they go back.
    let mut p = Pool::new(COOLDOWN);
    p.upsert_eni(eni("eni-0", 0, "10.0.0.1"));
    let ips: Vec<Ipv4Addr> = (1..=16).map(|i| Ipv4Addr::new(10, 0, 1, i)).collect();
    p.add_addresses("eni-0", &ips).unwrap();
    let limits = NodeLimits {
        max_enis: 3,
        secondary_ips_per_eni: 20,
        max_pods: 110,
    };
    let plan = pool::plan(&p, &limits, &pd(1), PlanContext::at(Timestamp(0)));
    let grow = Action::AssignPrefixes {
        eni_id: "eni-0".into(),
        count: 1,
    };
    assert_eq!(plan.actions, vec![grow]);
    p.add_prefixes("eni-0", &[net("10.0.2.0/28")]).unwrap();
    let plan = pool::plan(&p, &limits, &pd(1), PlanContext::at(Timestamp(0)));
    let mut retiring = ips.clone();
    retiring.reverse();
    let release = Action::ReleaseIps {
        eni_id: "eni-0".into(),
        ips: retiring,
    };
    assert_eq!(plan.actions, vec![release]);
    // Prefixes still count without it.
    let mut p = Pool::new(COOLDOWN);
    p.upsert_eni(eni("eni-0", 0, "10.0.0.1"));
    p.add_prefixes("eni-0", &[net("10.0.2.0/28")]).unwrap();
    let plan = pool::plan(&p, &limits, &warm_eni(0), PlanContext::at(Timestamp(0)));
    assert_eq!(plan, Plan::default());
}

#[derive(Clone, Debug)]
enum Step {
    AddPods(u8),
    RemovePods(u16, u8),
    /// Ticks of 5 s, so that pods go at many points of each other's cooldown.
    Wait(u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1u8..12).prop_map(Step::AddPods),
        4 => (any::<u16>(), 1u8..4).prop_map(|(i, n)| Step::RemovePods(i, n)),
        4 => (1u8..16).prop_map(Step::Wait),
    ]
}

/// Below target by the test's own reading of the targets.
fn low(sim: &Sim) -> bool {
    let t = &sim.targets;
    let c = sim.pool.counts(sim.now);
    if t.warm_ip > 0 || t.minimum_ip > 0 {
        c.available < t.warm_ip || c.total < t.minimum_ip
    } else if t.prefix_delegation {
        c.available < 16 * t.warm_prefix.max(1)
    } else if t.warm_eni == 0 {
        c.available == 0
    } else {
        c.available < t.warm_eni * sim.limits.secondary_ips_per_eni
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    /// Whatever the targets, limits and pods, a node whose EC2 grants every action stays within
    /// the instance's limits, releases only available addresses and wholly available prefixes
    /// at most every 30 s, frees only old unused non-primary ENIs with nothing cooling (all
    /// checked by `Sim` as it carries actions out), and settles each time either at target or
    /// blocked with the reason.
    #[test]
    fn a_granted_pool_keeps_every_rule_and_settles(
        max_enis in 1u32..5,
        per_eni in 1u32..10,
        extra_pods in 0u32..60,
        targets in targets(),
        first_only in any::<bool>(),
        exclude_primary in any::<bool>(),
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        let capacity = max_enis * per_eni * if targets.prefix_delegation { 16 } else { 1 };
        let limits = NodeLimits {
            max_enis,
            secondary_ips_per_eni: per_eni,
            max_pods: capacity.min(per_eni + extra_pods).max(1),
        };
        let mut sim = Sim::new(limits, targets);
        sim.first_only = first_only;
        if exclude_primary {
            // Custom networking: the primary ENI carries no pods.
            sim.pool.exclude_from_pods(["eni-0".to_string()].into());
        }
        sim.converge();
        for step in steps {
            match step {
                Step::AddPods(n) => {
                    for _ in 0..n {
                        if sim.pods.len() as u32 >= limits.max_pods {
                            break;
                        }
                        sim.add_pod();
                    }
                }
                Step::RemovePods(i, n) => {
                    for _ in 0..n {
                        if !sim.pods.is_empty() {
                            let i = i as usize % sim.pods.len();
                            sim.remove_pod(i);
                        }
                    }
                }
                Step::Wait(ticks) => sim.advance(TICK * ticks.into()),
            }
            let settled = sim.converge();
            prop_assert!(settled.actions.is_empty());
            prop_assert!(
                !exclude_primary || sim.pool.allocations().iter().all(|a| a.eni_id != "eni-0"),
                "a pod got an address of the excluded primary ENI"
            );
            prop_assert!(
                !low(&sim) || settled.blocked.is_some(),
                "low but not blocked: {:?}", sim.pool.counts(sim.now)
            );
            if let Some(Blocked::MaxEnis { enis }) = settled.blocked {
                prop_assert_eq!(enis, max_enis);
            }
        }
    }
}

#[test]
fn scaling_back_to_zero_returns_to_the_starting_shape_in_every_mode() {
    let limits = NodeLimits {
        max_enis: 3,
        secondary_ips_per_eni: 3,
        max_pods: 110,
    };
    for targets in [
        warm_eni(1),
        warm_eni(2),
        warm_ip(2, 5),
        warm_ip(1, 1),
        pd(1),
        pd(2),
        Targets {
            warm_ip: 7,
            minimum_ip: 20,
            ..pd(1)
        },
    ] {
        let mut sim = Sim::new(limits, targets);
        sim.converge();
        let before = (sim.ips_per_eni(), sim.prefixes_per_eni());
        let most = if targets.prefix_delegation { 110 } else { 9 };
        sim.scale_to(most);
        sim.scale_to(0);
        sim.run_for(Duration::from_secs(600));
        assert_eq!(
            (sim.ips_per_eni(), sim.prefixes_per_eni()),
            before,
            "{targets:?}"
        );
    }
}
