use std::net::Ipv4Addr;
use std::time::Duration;

use pool::*;
use proptest::prelude::*;

pub const COOLDOWN: Duration = Duration::from_secs(30);

pub fn eni(id: &str, device: u32, primary_ip: &str) -> EniInfo {
    EniInfo {
        id: id.into(),
        device_number: device,
        mac: format!("02:00:00:00:00:{device:02x}"),
        primary_ip: primary_ip.parse().unwrap(),
        subnet_id: "subnet-1".into(),
        subnet_cidr: "10.0.0.0/24".parse().unwrap(),
        created_at: Timestamp(0),
    }
}

pub fn key(n: u32) -> AttachmentKey {
    AttachmentKey {
        network: "aws-cni".into(),
        container_id: format!("c{n}"),
        ifname: "eth0".into(),
    }
}

pub fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

/// A pool with the primary ENI (10.0.0.10) holding 10.0.0.11..=10.0.0.(10+n).
pub fn pool_with(n: u8) -> Pool {
    let mut p = Pool::new(COOLDOWN);
    p.upsert_eni(eni("eni-0", 0, "10.0.0.10"));
    let ips: Vec<Ipv4Addr> = (1..=n).map(|i| Ipv4Addr::new(10, 0, 0, 10 + i)).collect();
    p.add_addresses("eni-0", &ips).unwrap();
    p
}

/// When simulations start: late enough that ENI ages mean something.
pub const START: Timestamp = Timestamp(1_000_000_000);

/// The pool loop's period in the Go CNI, used as the simulated time between steps.
pub const TICK: Duration = Duration::from_secs(5);

/// A node whose EC2 grants every action: the pool, the planner, and a clock.
///
/// Every action is checked as it is carried out (the rules the planner promises: releases
/// only of available addresses and wholly available prefixes, at most every
/// `RELEASE_INTERVAL`; frees only of unused, old-enough, non-primary ENIs with nothing
/// cooling), and after each one the pool must be within the instance's limits.
pub struct Sim {
    pub pool: Pool,
    pub limits: NodeLimits,
    pub targets: Targets,
    pub now: Timestamp,
    pub last_release: Option<Timestamp>,
    /// Carry out only the first action of each plan, then plan again.
    pub first_only: bool,
    /// Pods bound to the node without an address yet ([`PlanContext::pending`]).
    pub pending: u32,
    /// The node is cordoned ([`PlanContext::draining`]).
    pub draining: bool,
    /// EC2 throttles the node ([`PlanContext::congested`]).
    pub congested: bool,
    /// Live pods, oldest first.
    pub pods: Vec<u32>,
    /// ENIs freed so far.
    pub freed: Vec<String>,
    /// EC2 refuses every prefix (`InsufficientCidrBlocks`) while single addresses are still
    /// assigned: the node's subnet is fragmented.
    pub fragmented: bool,
    /// Prefix requests EC2 refused so far.
    pub refusals: u32,
    next_ip: u32,
    next_prefix: u32,
    next_eni: u32,
    next_pod: u32,
}

impl Sim {
    /// A node with only its primary ENI, holding nothing yet.
    pub fn new(limits: NodeLimits, targets: Targets) -> Sim {
        let mut pool = Pool::new(COOLDOWN);
        pool.set_prefix_delegation(targets.prefix_delegation);
        let mut primary = eni("eni-0", 0, "10.0.0.1");
        primary.created_at = START;
        pool.upsert_eni(primary);
        Sim {
            pool,
            limits,
            targets,
            now: START,
            last_release: None,
            first_only: false,
            pending: 0,
            draining: false,
            congested: false,
            pods: Vec::new(),
            freed: Vec::new(),
            fragmented: false,
            refusals: 0,
            next_ip: 0,
            next_prefix: 0,
            next_eni: 1,
            next_pod: 0,
        }
    }

    pub fn ctx(&self) -> PlanContext {
        PlanContext {
            now: self.now,
            last_release: self.last_release,
            pending: self.pending,
            draining: self.draining,
            scarce: false,
            congested: self.congested,
        }
    }

    pub fn plan(&self) -> Plan {
        plan(&self.pool, &self.limits, &self.targets, self.ctx())
    }

    /// Plans and carries out until the plan is empty; panics if that takes unreasonably long.
    pub fn converge(&mut self) -> Plan {
        let bound = 16 + 2 * self.limits.max_enis * (self.limits.secondary_ips_per_eni + 2);
        for _ in 0..bound {
            let plan = self.plan();
            if plan.actions.is_empty() {
                return plan;
            }
            if let Some(i) = plan.actions.iter().position(|a| a.is_growth()) {
                assert_eq!(plan.actions.len(), 1, "growth comes alone: {plan:?}");
                assert!(plan.blocked.is_none() && i == 0);
            }
            if plan
                .actions
                .iter()
                .any(|a| matches!(a, Action::FreeEni { .. }))
            {
                assert_eq!(plan.actions.len(), 1, "a free comes alone: {plan:?}");
            }
            self.execute(&plan);
        }
        panic!(
            "the plan did not settle in {bound} rounds: {:?}",
            self.plan()
        );
    }

    /// Carries out a plan's actions (or only the first).
    pub fn execute(&mut self, plan: &Plan) {
        let may_release = self
            .last_release
            .is_none_or(|t| t.after(RELEASE_INTERVAL) <= self.now);
        let take = if self.first_only {
            1
        } else {
            plan.actions.len()
        };
        let mut released = false;
        for action in plan.actions.iter().take(take) {
            if action.is_release() {
                assert!(
                    may_release,
                    "release within {RELEASE_INTERVAL:?} of the last"
                );
                released = true;
            }
            self.carry_out(action);
            self.check_limits();
        }
        if released {
            self.last_release = Some(self.now);
        }
    }

    fn carry_out(&mut self, action: &Action) {
        let per_eni = self.limits.secondary_ips_per_eni;
        match action {
            Action::AssignIps { eni_id, count } => {
                assert!(*count > 0);
                let subnet = self.subnet_of(eni_id);
                assert!(
                    !self.targets.prefix_delegation
                        || self.pool.prefix_fallbacks().refuses(&subnet, self.now),
                    "/32s with prefix delegation only where prefixes are refused"
                );
                let ips = self.fresh_ips(*count);
                self.pool.add_addresses(eni_id, &ips).unwrap();
            }
            Action::AssignPrefixes { eni_id, count } => {
                assert!(*count > 0 && self.targets.prefix_delegation);
                let subnet = self.subnet_of(eni_id);
                assert!(
                    !self.pool.prefix_fallbacks().refuses(&subnet, self.now),
                    "prefixes asked for again before the retry was due"
                );
                if self.refuse(&[PrefixScope::Subnet(&subnet)]) {
                    return;
                }
                let prefixes = self.fresh_prefixes(*count);
                self.pool.add_prefixes(eni_id, &prefixes).unwrap();
            }
            Action::CreateEni { ips, prefixes } => {
                assert!(
                    (*ips == 0) != (*prefixes == 0),
                    "exactly one kind: {action:?}"
                );
                assert!(ips.max(prefixes) <= &per_eni);
                if !self.targets.prefix_delegation {
                    assert_eq!(*prefixes, 0);
                } else if *prefixes > 0 {
                    assert!(!self.pool.prefix_fallbacks().refuses_new_enis(self.now));
                    // Every ENI goes to the one subnet.
                    if self.refuse(&[PrefixScope::NewEnis, PrefixScope::Subnet("subnet-1")]) {
                        return;
                    }
                } else {
                    assert!(
                        self.pool.prefix_fallbacks().refuses_new_enis(self.now),
                        "a new ENI with /32s only where prefixes are refused"
                    );
                }
                let device = (0..)
                    .find(|d| self.pool.enis().all(|e| e.device_number != *d))
                    .unwrap();
                let id = format!("eni-{}", self.next_eni);
                let mut info = eni(
                    &id,
                    device,
                    &Ipv4Addr::from(0x0a00_0001 + self.next_eni).to_string(),
                );
                self.next_eni += 1;
                info.created_at = self.now;
                self.pool.upsert_eni(info);
                let ips = self.fresh_ips(*ips);
                self.pool.add_addresses(&id, &ips).unwrap();
                let prefixes = self.fresh_prefixes(*prefixes);
                self.pool.add_prefixes(&id, &prefixes).unwrap();
            }
            Action::ReleaseIps { eni_id, ips } => {
                assert!(!ips.is_empty());
                for ip in ips {
                    let (_, slot) = self
                        .pool
                        .addresses(eni_id)
                        .find(|(a, _)| a == ip)
                        .expect("released address is on that ENI");
                    assert!(
                        slot.is_available(self.now) && slot.prefix.is_none(),
                        "released {ip} in state {slot:?} at {:?}",
                        self.now
                    );
                    let (taken, _) = self
                        .pool
                        .remove_address(*ip, Removal::IfUnused(self.now))
                        .unwrap();
                    assert!(taken.is_none());
                }
            }
            Action::ReleasePrefixes { eni_id, prefixes } => {
                assert!(!prefixes.is_empty());
                for prefix in prefixes {
                    assert!(self.pool.prefixes(eni_id).any(|p| p == *prefix));
                    let members: Vec<_> = self
                        .pool
                        .addresses(eni_id)
                        .filter(|(_, s)| s.prefix == Some(*prefix))
                        .collect();
                    assert_eq!(members.len(), 16);
                    assert!(
                        members.iter().all(|(_, s)| s.is_available(self.now)),
                        "released {prefix} with members {members:?}"
                    );
                    let (taken, _) = self
                        .pool
                        .remove_prefix(*prefix, Removal::IfUnused(self.now))
                        .unwrap();
                    assert!(taken.is_empty());
                }
            }
            Action::FreeEni { eni_id } => {
                let info = self.pool.eni(eni_id).expect("freed ENI exists").clone();
                assert!(!info.is_primary(), "the primary ENI is never freed");
                assert!(
                    info.created_at.after(MIN_ENI_AGE) <= self.now,
                    "freed {eni_id} younger than a minute"
                );
                for (ip, slot) in self.pool.addresses(eni_id) {
                    assert!(
                        !slot.is_assigned() && !slot.is_cooling(self.now),
                        "freed {eni_id} with {ip} in state {slot:?}"
                    );
                }
                let (dropped, _) = self
                    .pool
                    .remove_eni(eni_id, Removal::IfUnused(self.now))
                    .unwrap();
                assert!(dropped.is_empty());
                self.freed.push(eni_id.clone());
            }
        }
    }

    fn subnet_of(&self, eni_id: &str) -> String {
        self.pool.eni(eni_id).expect("ENI exists").subnet_id.clone()
    }

    /// What the daemon does with EC2's answer to a prefix request in `scopes`: a refusal
    /// while the subnet is fragmented (then true), else a delegated prefix.
    fn refuse(&mut self, scopes: &[PrefixScope<'_>]) -> bool {
        let (now, fragmented) = (self.now, self.fragmented);
        let fallbacks = self.pool.prefix_fallbacks_mut();
        for &scope in scopes {
            match fragmented {
                true => fallbacks.refused(scope, "InsufficientCidrBlocks", now),
                false => fallbacks.delegated(scope),
            }
        }
        self.refusals += u32::from(fragmented);
        fragmented
    }

    /// Secondary /32s held on every ENI.
    pub fn loose_ips(&self) -> u32 {
        self.pool.enis().map(|e| self.secondaries(&e.id)).sum()
    }

    /// The instance's limits hold.
    pub fn check_limits(&self) {
        let per_eni = self.limits.secondary_ips_per_eni;
        assert!(self.pool.enis().count() as u32 <= self.limits.max_enis);
        assert!(self.pool.eni("eni-0").is_some(), "the primary ENI is there");
        for e in self.pool.enis() {
            let slots = self.secondaries(&e.id) + self.pool.prefixes(&e.id).count() as u32;
            assert!(slots <= per_eni, "{} uses {slots} of {per_eni} slots", e.id);
        }
        let total = self.total();
        if self.targets.prefix_delegation {
            assert!(total < self.limits.max_pods + 16, "{total} addresses");
        } else {
            assert!(total <= self.limits.max_pods, "{total} addresses");
        }
    }

    pub fn secondaries(&self, eni_id: &str) -> u32 {
        self.pool
            .addresses(eni_id)
            .filter(|(_, s)| s.prefix.is_none())
            .count() as u32
    }

    fn fresh_ips(&mut self, count: u32) -> Vec<Ipv4Addr> {
        (0..count)
            .map(|_| {
                self.next_ip += 1;
                Ipv4Addr::from(0x0a01_0000 + self.next_ip)
            })
            .collect()
    }

    fn fresh_prefixes(&mut self, count: u32) -> Vec<ipnetwork::Ipv4Network> {
        (0..count)
            .map(|_| {
                self.next_prefix += 1;
                let base = Ipv4Addr::from(0x0a02_0000 + 16 * self.next_prefix);
                ipnetwork::Ipv4Network::new(base, 28).unwrap()
            })
            .collect()
    }

    /// Starts one pod; if the pool cannot serve it, lets the controller work and retries once
    /// (as the runtime retries ADD).
    pub fn add_pod(&mut self) -> bool {
        let k = self.next_pod;
        self.next_pod += 1;
        let ok = self
            .pool
            .assign(&key(k), &PodInfo::default(), self.now)
            .is_ok()
            || {
                self.converge();
                self.pool
                    .assign(&key(k), &PodInfo::default(), self.now)
                    .is_ok()
            };
        if ok {
            self.pods.push(k);
        }
        ok
    }

    /// Deletes the `i`th live pod (oldest first).
    pub fn remove_pod(&mut self, i: usize) {
        let k = self.pods.remove(i);
        self.pool.release(&key(k), self.now).unwrap();
    }

    /// Deletes every pod at once.
    pub fn remove_all_pods(&mut self) {
        while !self.pods.is_empty() {
            self.remove_pod(0);
        }
    }

    pub fn advance(&mut self, d: Duration) {
        self.now = self.now.after(d);
    }

    /// Adds or deletes pods (newest first) one at a time, a tick apart, the controller settling
    /// after each, until `n` run.
    pub fn scale_to(&mut self, n: usize) {
        while self.pods.len() < n {
            assert!(
                self.add_pod(),
                "no address for pod {}: {:?}",
                self.pods.len() + 1,
                self.plan()
            );
            self.advance(TICK);
            self.converge();
        }
        while self.pods.len() > n {
            self.remove_pod(self.pods.len() - 1);
            self.advance(TICK);
            self.converge();
        }
    }

    /// Lets `d` pass a tick at a time, the controller settling each tick.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now.after(d);
        while self.now < end {
            self.advance(TICK);
            self.converge();
        }
    }

    pub fn enis(&self) -> usize {
        self.pool.enis().count()
    }

    pub fn total(&self) -> u32 {
        self.pool.counts(self.now).total
    }

    pub fn unused(&self) -> u32 {
        let c = self.pool.counts(self.now);
        c.total - c.assigned
    }

    pub fn prefixes(&self) -> usize {
        self.pool
            .enis()
            .map(|e| self.pool.prefixes(&e.id).count())
            .sum()
    }

    /// Addresses per ENI, by device number.
    pub fn ips_per_eni(&self) -> Vec<u32> {
        self.by_device()
            .iter()
            .map(|id| self.pool.addresses(id).count() as u32)
            .collect()
    }

    /// Prefixes per ENI, by device number.
    pub fn prefixes_per_eni(&self) -> Vec<u32> {
        self.by_device()
            .iter()
            .map(|id| self.pool.prefixes(id).count() as u32)
            .collect()
    }

    /// Assigned addresses per prefix, most first.
    pub fn pods_per_prefix(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .pool
            .enis()
            .flat_map(|e| {
                self.pool.prefixes(&e.id).map(|p| {
                    self.pool
                        .addresses(&e.id)
                        .filter(|(_, s)| s.prefix == Some(p) && s.is_assigned())
                        .count() as u32
                })
            })
            .collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v
    }

    fn by_device(&self) -> Vec<String> {
        let mut enis: Vec<_> = self.pool.enis().collect();
        enis.sort_by_key(|e| e.device_number);
        enis.into_iter().map(|e| e.id.clone()).collect()
    }
}

/// Targets a node may be configured with, prefix delegation included.
pub fn targets() -> impl Strategy<Value = Targets> {
    (
        0u32..4,
        prop_oneof![Just(0u32), 1u32..20],
        prop_oneof![Just(0u32), 1u32..40],
        0u32..3,
        any::<bool>(),
    )
        .prop_map(
            |(warm_eni, warm_ip, minimum_ip, warm_prefix, prefix_delegation)| Targets {
                warm_eni,
                warm_ip,
                minimum_ip,
                warm_prefix,
                prefix_delegation,
            },
        )
}
