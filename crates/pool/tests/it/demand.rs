//! What the cluster adds to the plan: pods bound to the node that hold no address yet
//! (`pending`) and a cordoned node (`draining`).

use crate::common;

use std::collections::BTreeSet;

use common::*;
use pool::*;
use proptest::prelude::*;

/// Starts up to `n` pods one at a time, the controller settling after each.
fn start_pods(sim: &mut Sim, n: usize) {
    for _ in 0..n {
        if !sim.add_pod() {
            break;
        }
        sim.converge();
    }
}

fn limits(max_enis: u32, per_eni: u32, max_pods: u32) -> NodeLimits {
    NodeLimits {
        max_enis,
        secondary_ips_per_eni: per_eni,
        max_pods,
    }
}

fn warm_ip(n: u32) -> Targets {
    Targets {
        warm_ip: n,
        ..Targets::default()
    }
}

/// Plans and carries out until nothing is left to do; returns the growth actions, each
/// with the ENI it went to (`None` for a new one).
fn settle(sim: &mut Sim) -> Vec<Action> {
    let mut grown = Vec::new();
    for _ in 0..200 {
        let plan = sim.plan();
        if plan.actions.is_empty() {
            return grown;
        }
        grown.extend(plan.actions.iter().filter(|a| a.is_growth()).cloned());
        sim.execute(&plan);
    }
    panic!("the plan did not settle: {:?}", sim.plan());
}

/// Pods arriving in a burst, each ADD served from what the pool holds or, failing that,
/// after the controller settles (as a waiting ADD is). Returns the growth actions.
fn burst(sim: &mut Sim, pods: u32, predicted: bool) -> usize {
    let mut calls = 0;
    if predicted {
        sim.pending = pods;
        calls += settle(sim).len();
    }
    for _ in 0..pods {
        assert!(
            sim.add_pod_counting(&mut calls),
            "a pod of the burst got no address"
        );
        sim.pending = sim.pending.saturating_sub(1);
    }
    calls + settle(sim).len()
}

trait Counting {
    fn add_pod_counting(&mut self, calls: &mut usize) -> bool;
}

impl Counting for Sim {
    fn add_pod_counting(&mut self, calls: &mut usize) -> bool {
        if self.pool.counts(self.now).available == 0 {
            *calls += settle(self).len();
        }
        self.add_pod()
    }
}

#[test]
fn a_predicted_burst_of_40_pods_takes_two_calls_where_one_pod_at_a_time_takes_40() {
    // An m5.4xlarge: 8 ENIs of 29 secondary addresses; WARM_IP_TARGET=1.
    let mut blind = Sim::new(limits(8, 29, 234), warm_ip(1));
    let one_at_a_time = burst(&mut blind, 40, false);
    let mut seeing = Sim::new(limits(8, 29, 234), warm_ip(1));
    let predicted = burst(&mut seeing, 40, true);
    assert_eq!(predicted, 2, "fill the primary ENI, then one new ENI");
    assert!(one_at_a_time >= 40, "one call per pod: {one_at_a_time}");
    assert_eq!(seeing.pods.len(), 40);
}

#[test]
fn a_cordoned_node_gives_back_its_warm_addresses_and_adds_no_eni() {
    let mut sim = Sim::new(limits(3, 9, 29), Targets::default());
    sim.scale_to(12);
    sim.advance(MIN_ENI_AGE);
    let enis_before = sim.enis();
    assert!(
        sim.pool.counts(sim.now).available >= 9,
        "WARM_ENI_TARGET=1 holds an ENI's worth"
    );

    sim.draining = true;
    sim.advance(RELEASE_INTERVAL);
    settle(&mut sim);
    let c = sim.pool.counts(sim.now);
    assert_eq!(
        (c.available, c.assigned),
        (0, 12),
        "only the pods' addresses are held"
    );
    assert!(sim.enis() <= enis_before);

    // A DaemonSet pod still lands on a cordoned node: it gets an address on an ENI the node
    // has, and a node whose ENIs are full says why it cannot grow.
    sim.pending = 1;
    let grown = settle(&mut sim);
    assert!(
        grown.iter().all(|a| !matches!(a, Action::CreateEni { .. })),
        "{grown:?}"
    );
    let mut full = Sim::new(limits(2, 2, 29), Targets::default());
    full.scale_to(4);
    full.draining = true;
    full.pending = 1;
    assert_eq!(full.plan().blocked, Some(Blocked::Cordoned { enis: 2 }));
    assert!(
        Blocked::Cordoned { enis: 2 }
            .to_string()
            .contains("cordoned")
    );

    // Uncordoned, the targets hold again.
    sim.draining = false;
    sim.pending = 0;
    sim.advance(RELEASE_INTERVAL);
    settle(&mut sim);
    assert!(sim.pool.counts(sim.now).available >= 9);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Whatever the targets and limits, pending pods are met by at most one growth step per
    /// ENI, after which each of them finds an address (unless a limit stops the pool, which
    /// the plan then says).
    #[test]
    fn pending_pods_are_met_by_one_step_per_eni(
        t in targets(),
        max_enis in 1u32..6,
        per_eni in 1u32..12,
        running in 0usize..20,
        pending in 0u32..60,
    ) {
        let mut sim = Sim::new(limits(max_enis, per_eni, 250), t);
        start_pods(&mut sim, running);
        sim.pending = pending;
        let before: BTreeSet<String> = sim.pool.enis().map(|e| e.id.clone()).collect();
        let grown = settle(&mut sim);
        let mut touched = BTreeSet::new();
        for a in &grown {
            match a {
                Action::AssignIps { eni_id, .. } | Action::AssignPrefixes { eni_id, .. } => {
                    prop_assert!(touched.insert(eni_id.clone()), "{eni_id} grown twice: {grown:?}");
                    prop_assert!(before.contains(eni_id), "a new ENI is created full enough: {grown:?}");
                }
                _ => {}
            }
        }
        let available = sim.pool.counts(sim.now).available;
        prop_assert!(
            available >= pending || sim.plan().blocked.is_some(),
            "{pending} pending, {available} available, plan {:?}", sim.plan()
        );
    }

    /// A cordoned node creates no ENI, gives back every available address it can (whole
    /// prefixes only) within one release round, and keeps every pod's.
    #[test]
    fn a_draining_node_keeps_only_what_its_pods_use(
        t in targets(),
        max_enis in 1u32..5,
        per_eni in 1u32..10,
        running in 0usize..25,
    ) {
        let mut sim = Sim::new(limits(max_enis, per_eni, 250), t);
        start_pods(&mut sim, running);
        let pods = sim.pods.len() as u32;
        sim.advance(RELEASE_INTERVAL.max(MIN_ENI_AGE));
        sim.draining = true;
        let grown = settle(&mut sim);
        prop_assert!(grown.is_empty(), "grew while draining: {grown:?}");
        let c = sim.pool.counts(sim.now);
        prop_assert_eq!(c.assigned, pods);
        if t.prefix_delegation {
            let whole_free = sim.pool.enis().flat_map(|e| {
                let id = e.id.clone();
                sim.pool.prefixes(&e.id).map(move |p| (id.clone(), p)).collect::<Vec<_>>()
            }).filter(|(id, p)| sim.pool.addresses(id).filter(|(_, s)| s.prefix == Some(*p)).all(|(_, s)| s.is_available(sim.now))).count();
            prop_assert_eq!(whole_free, 0);
        } else {
            prop_assert_eq!(c.available, 0);
        }
    }
}

#[test]
fn while_ec2_throttles_the_pool_grows_for_waiting_pods_alone() {
    for targets in [
        Targets::default(),
        warm_ip(5),
        Targets {
            warm_prefix: 1,
            prefix_delegation: true,
            ..Targets::default()
        },
    ] {
        let mut sim = Sim::new(limits(3, 9, 110), targets);
        sim.congested = true;
        let e = explain(&sim.pool, &sim.limits, &sim.targets, sim.ctx());
        assert_eq!(e.plan, Plan::default(), "no warm pool while congested");
        assert!(matches!(e.reason, Reason::Congested(_)), "{:?}", e.reason);
        assert!(
            e.reason
                .to_string()
                .starts_with("EC2 throttled the node lately"),
            "{}",
            e.reason
        );
        // One pod: a burst would fill the ENI, in the same one call.
        sim.pending = 1;
        let grown = settle(&mut sim);
        assert_eq!(grown.len(), 1, "{grown:?}");
        let wanted = if targets.prefix_delegation { 16 } else { 1 };
        assert_eq!(
            sim.unused(),
            wanted,
            "only what the waiting pods need: {grown:?}"
        );

        // EC2 answers again: the warm targets are back.
        sim.congested = false;
        let grown = settle(&mut sim);
        assert!(!grown.is_empty(), "the warm pool refills once EC2 answers");
    }
}
