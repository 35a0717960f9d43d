//! Prefix delegation on a fragmented subnet: EC2 refuses every /28 while single addresses
//! are still to be had. The pool falls back to /32s, keeps serving pods, asks for prefixes
//! again after a backoff, and returns to prefixes once EC2 delegates them, giving the /32s
//! back only as their pods leave.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::time::Duration;

use common::*;
use pool::*;
use proptest::prelude::*;

/// An m5.large with prefix delegation: 3 ENIs of 9 slots, 110 pods.
fn m5_large() -> Sim {
    let limits = NodeLimits {
        max_enis: 3,
        secondary_ips_per_eni: 9,
        max_pods: 110,
    };
    let targets = Targets {
        warm_prefix: 1,
        prefix_delegation: true,
        ..Targets::default()
    };
    Sim::new(limits, targets)
}

/// Each live pod's address, to check that none ever changes or is shared.
fn addresses(sim: &Sim) -> HashMap<u32, Ipv4Addr> {
    sim.pods
        .iter()
        .map(|&k| {
            (
                k,
                sim.pool
                    .get(&key(k))
                    .expect("a live pod holds an address")
                    .ip,
            )
        })
        .collect()
}

/// Whether the pod's address is a member of a delegated /28.
fn in_prefix(sim: &Sim, pod: u32) -> bool {
    let a = sim.pool.get(&key(pod)).expect("pod holds an address");
    sim.pool
        .addresses(&a.eni_id)
        .any(|(ip, slot)| ip == a.ip && slot.prefix.is_some())
}

#[test]
fn a_fragmented_subnet_serves_pods_through_slash_32s_up_to_every_slot() {
    let mut sim = m5_large();
    sim.fragmented = true;
    sim.scale_to(27);
    assert_eq!(sim.prefixes(), 0);
    assert_eq!(sim.loose_ips(), 27, "3 ENIs × 9 slots, one /32 each");
    assert_eq!(sim.enis(), 3);
    assert!(!sim.add_pod(), "a 28th pod finds no slot");
    assert!(matches!(sim.plan().blocked, Some(Blocked::MaxEnis { .. })));
    let f = sim.pool.prefix_fallbacks();
    assert!(f.new_enis.is_some(), "new ENIs fell back too");
    assert_eq!(f.subnets["subnet-1"].reason, "InsufficientCidrBlocks");
    // One refused assign on the primary and one refused create per new ENI's first try; the
    // retries that fell due while pods kept coming add one each.
    assert!(
        (2..=8).contains(&sim.refusals),
        "{} refusals for 27 pods",
        sim.refusals
    );
}

#[test]
fn slash_32s_come_a_prefixs_worth_at_a_time_not_one_per_pod() {
    let mut sim = Sim::new(
        NodeLimits {
            max_enis: 4,
            secondary_ips_per_eni: 14,
            max_pods: 110,
        },
        Targets {
            warm_prefix: 1,
            prefix_delegation: true,
            ..Targets::default()
        },
    );
    sim.fragmented = true;
    let mut growth = Vec::new();
    for _ in 0..40 {
        assert!(sim.add_pod());
        sim.advance(TICK);
        loop {
            let plan = sim.plan();
            if plan.actions.is_empty() {
                break;
            }
            growth.extend(plan.actions.iter().filter(|a| a.is_growth()).cloned());
            sim.execute(&plan);
        }
    }
    assert_eq!(sim.prefixes(), 0);
    assert!(
        sim.unused() >= 16,
        "a prefix's worth stays warm: {}",
        sim.unused()
    );
    // 40 pods and 16 warm fill 4 ENIs of 14 slots: a few calls per ENI, refused prefix
    // requests included, where one /32 per pod would take over 40.
    let ips: Vec<u32> = growth
        .iter()
        .filter_map(|a| match a {
            Action::AssignIps { count, .. } => Some(*count),
            Action::CreateEni { ips, .. } => Some(*ips).filter(|n| *n > 0),
            _ => None,
        })
        .collect();
    assert!(
        growth.len() <= 12,
        "{} growth calls: {growth:?}",
        growth.len()
    );
    assert!(
        ips.iter().filter(|n| **n == 1).count() <= 1,
        "/32s asked for one at a time: {ips:?}"
    );
}

#[test]
fn prefixes_come_back_and_the_slash_32s_go_as_their_pods_leave() {
    let mut sim = m5_large();
    sim.fragmented = true;
    sim.scale_to(12);
    let fallback_pods = sim.pods.clone();
    let before = addresses(&sim);
    assert_eq!(sim.prefixes(), 0);

    // The strays are gone: the next retry gets a prefix, and the free /32s go back.
    sim.fragmented = false;
    sim.run_for(PREFIX_RETRY_MAX + Duration::from_secs(60));
    assert!(sim.prefixes() > 0, "prefixes delegated again");
    assert_eq!(sim.loose_ips(), 12, "only the /32s pods hold are left");
    for (k, ip) in &before {
        assert_eq!(
            sim.pool.get(&key(*k)).map(|a| a.ip),
            Some(*ip),
            "pod {k} kept its address"
        );
    }

    // New pods get prefix addresses.
    sim.scale_to(30);
    for &k in sim.pods.iter().filter(|k| !fallback_pods.contains(k)) {
        assert!(
            in_prefix(&sim, k),
            "pod {k} got a /32 after prefixes came back"
        );
    }

    // As the fallback pods leave, their /32s go back, and the pool holds prefixes only.
    for k in fallback_pods {
        let i = sim
            .pods
            .iter()
            .position(|&p| p == k)
            .expect("still running");
        sim.remove_pod(i);
        sim.advance(TICK);
        sim.converge();
    }
    sim.run_for(Duration::from_secs(120));
    assert_eq!(sim.loose_ips(), 0, "every /32 given back");
    assert!(sim.pods.iter().all(|&k| in_prefix(&sim, k)));
    assert!(sim.pool.prefix_fallbacks().subnets.is_empty());
}

#[test]
fn with_prefix_delegation_a_slash_32_outside_a_fallback_is_handed_out_last() {
    let mut p = Pool::new(COOLDOWN);
    p.upsert_eni(eni("eni-0", 0, "10.0.0.10"));
    p.add_addresses("eni-0", &[ip("10.0.0.11")]).unwrap();
    p.add_prefixes("eni-0", &["10.0.0.32/28".parse().unwrap()])
        .unwrap();
    let first = |p: &mut Pool, n: u32| p.assign(&key(n), &PodInfo::default(), START).unwrap().0.ip;
    // Without delegation the /32 goes first, keeping the prefix whole.
    assert_eq!(first(&mut p.clone(), 1), ip("10.0.0.11"));
    // With it, the /32 is on its way back: the prefix serves first.
    p.set_prefix_delegation(true);
    assert_eq!(first(&mut p.clone(), 1), ip("10.0.0.32"));
    // Where EC2 refuses prefixes, the /32 is the fallback's own and serves as usual.
    p.prefix_fallbacks_mut().refused(
        PrefixScope::Subnet("subnet-1"),
        "InsufficientCidrBlocks",
        START,
    );
    assert_eq!(first(&mut p, 1), ip("10.0.0.11"));
}

#[test]
fn refused_prefixes_are_asked_for_again_only_when_the_backoff_ends() {
    let mut sim = m5_large();
    sim.fragmented = true;
    sim.scale_to(3);
    let refused = sim.refusals;
    // Steady demand, no change in the subnet: a retry per backoff at most.
    for _ in 0..20 {
        sim.add_pod();
        sim.remove_pod(0);
        sim.run_for(Duration::from_secs(30));
    }
    let more = sim.refusals - refused;
    assert!(more <= 8, "{more} refusals in 10 minutes");
}

/// One step of a node whose subnet fragments and defragments under churn.
#[derive(Clone, Debug)]
enum Step {
    Add(u8),
    Remove(u8),
    Wait(u64),
    Fragment(bool),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1u8..8).prop_map(Step::Add),
        3 => (1u8..8).prop_map(Step::Remove),
        3 => (1u64..400).prop_map(Step::Wait),
        1 => any::<bool>().prop_map(Step::Fragment),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Under churn with the subnet fragmenting and defragmenting, with prefixes and /32s
    /// mixed on every ENI: no address is held twice or changes under a pod, nothing held is
    /// given back (the Sim checks every release), and a pod finds no address only when the
    /// node cannot hold one more.
    #[test]
    fn mixed_holdings_keep_every_promise(
        max_enis in 1u32..4,
        per_eni in 1u32..6,
        warm_prefix in 0u32..3,
        warm_ip in prop_oneof![Just(0u32), 1u32..20],
        start_fragmented in any::<bool>(),
        steps in proptest::collection::vec(step(), 1..40),
    ) {
        let limits = NodeLimits { max_enis, secondary_ips_per_eni: per_eni, max_pods: 60 };
        let targets = Targets { warm_prefix, warm_ip, prefix_delegation: true, ..Targets::default() };
        let mut sim = Sim::new(limits, targets);
        sim.fragmented = start_fragmented;
        let mut held: HashMap<u32, Ipv4Addr> = HashMap::new();
        for s in steps {
            match s {
                Step::Add(n) => for _ in 0..n {
                    if !sim.add_pod() {
                        let plan = sim.plan();
                        prop_assert!(
                            plan.blocked.is_some() || !plan.actions.is_empty(),
                            "a pod found no address and the pool did nothing: {:?}", plan
                        );
                    }
                },
                Step::Remove(n) => for _ in 0..n {
                    if !sim.pods.is_empty() { sim.remove_pod(0); }
                },
                Step::Wait(secs) => sim.run_for(Duration::from_secs(secs)),
                Step::Fragment(on) => sim.fragmented = on,
            }
            sim.converge();
            let now = addresses(&sim);
            for (k, ip) in &now {
                if let Some(before) = held.get(k) {
                    prop_assert_eq!(before, ip, "pod {} moved", k);
                }
            }
            let distinct: HashSet<_> = now.values().collect();
            prop_assert_eq!(distinct.len(), now.len(), "an address held twice");
            let all: Vec<Ipv4Addr> = sim.pool.to_state().addrs.iter().map(|a| a.ip).collect();
            let unique: HashSet<_> = all.iter().collect();
            prop_assert_eq!(unique.len(), all.len(), "an address on two ENIs");
            held = now;
        }
        // Prefixes to be had and time to settle: the pool holds no free /32.
        sim.fragmented = false;
        sim.run_for(PREFIX_RETRY_MAX + RELEASE_INTERVAL + COOLDOWN + Duration::from_secs(30));
        let free_loose = sim.pool.enis().flat_map(|e| sim.pool.addresses(&e.id).map(|(_, s)| s.clone()).collect::<Vec<_>>())
            .filter(|s| s.prefix.is_none() && !s.is_assigned())
            .count();
        prop_assert_eq!(free_loose, 0, "free /32s left once prefixes came back");
    }
}
