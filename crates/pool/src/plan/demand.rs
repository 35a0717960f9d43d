//! What the cluster adds to the targets: pods bound to the node that have no address yet,
//! and a cordoned node that should hold nothing it does not use.

use super::targets::{Shortfall, Surplus};
use super::view::{PoolView, Totals};
use super::{Blocked, NodeLimits, Plan, PlanContext, Targets, grow};
use crate::model::ADDRS_PER_PREFIX;

/// Pending pods from this many on are a burst: growth for them fills the ENI it goes to.
/// Pods of a Deployment arrive in doubling batches (the ReplicaSet's slow start: 1, 2, 4, 8,
/// ...), so growth sized for the pods seen so far would cost one EC2 call per batch; what the
/// burst leaves unused goes back in the next release round.
pub(super) const BURST_PODS: u32 = 2;

/// The counts a plan works with once the pending pods have taken what they will take.
pub(super) struct Demand {
    /// The pool as it will be once every pending pod holds an address it has now.
    pub effective: Totals,
    /// Pending pods that will find no address at all.
    pub uncovered: u32,
    /// Pending pods.
    pub pending: u32,
    pub draining: bool,
    pub scarce: bool,
    pub congested: bool,
}

impl Totals {
    /// The counts once `pods` more addresses are assigned: first those outside wholly
    /// available prefixes, so that prefixes stay whole as long as they can.
    pub(super) fn reserving(self, pods: u32) -> Totals {
        let taken = pods.min(self.available);
        let loose = self
            .available
            .saturating_sub(self.free_prefixes.saturating_mul(ADDRS_PER_PREFIX));
        let from_prefixes = taken.saturating_sub(loose);
        Totals {
            total: self.total,
            assigned: self.assigned + taken,
            available: self.available - taken,
            free_prefixes: self
                .free_prefixes
                .saturating_sub(from_prefixes.div_ceil(ADDRS_PER_PREFIX)),
        }
    }
}

impl Demand {
    pub fn new(totals: &Totals, ctx: PlanContext) -> Self {
        Demand {
            effective: totals.reserving(ctx.pending),
            uncovered: ctx.pending.saturating_sub(totals.available),
            pending: ctx.pending,
            draining: ctx.draining,
            scarce: ctx.scarce,
            congested: ctx.congested,
        }
    }

    /// What to add, before any limit: what the targets want on top of the pending pods, plus
    /// what the pods that find nothing need. Draining or congested, only the latter.
    pub fn shortfall(&self, targets: &Targets, limits: &NodeLimits) -> Option<Shortfall> {
        let wanted = match self.draining || self.congested {
            true => None,
            false => targets.shortfall(&self.effective, limits),
        };
        let mut short = wanted
            .unwrap_or(Shortfall {
                units: 0,
                addresses: 0,
            })
            .plus_pods(self.uncovered, targets.unit());
        // By addresses only: a /28 already serves 16 pods.
        let frugal = self.draining || self.scarce || targets.prefix_delegation;
        if !short.is_zero() && self.pending >= BURST_PODS && !frugal {
            short = short.at_least(limits.secondary_ips_per_eni);
        }
        (!short.is_zero()).then_some(short)
    }

    /// The growth step for `short`; a draining node adds no ENI.
    pub fn growth(
        &self,
        view: &PoolView<'_>,
        limits: &NodeLimits,
        targets: &Targets,
        short: Shortfall,
    ) -> Plan {
        if !self.draining {
            return grow::growth(view, limits, targets, short);
        }
        let enis = view.enis.len() as u32;
        let held = NodeLimits {
            max_enis: limits.max_enis.min(enis),
            ..*limits
        };
        let mut plan = grow::growth(view, &held, targets, short);
        if let Some(Blocked::MaxEnis { enis }) = plan.blocked {
            plan.blocked = Some(Blocked::Cordoned { enis });
        }
        plan
    }

    /// What may be given back: draining, every available address the pending pods do not
    /// need; otherwise what the targets allow on top of the pending pods.
    pub fn surplus(&self, targets: &Targets) -> Option<Surplus> {
        if self.draining {
            let over = self.effective.available;
            return (over > 0).then_some(Surplus::Addresses(over));
        }
        targets.surplus(&self.effective)
    }

    /// Whether the pool without one ENI (`rest`) still serves the pending pods and, unless
    /// draining, meets every target on top of them.
    pub fn met_by(&self, rest: &Totals, limits: &NodeLimits, targets: &Targets) -> bool {
        if rest.available < self.pending {
            return false;
        }
        self.draining || targets.met_by(&rest.reserving(self.pending), limits)
    }

    /// Whether to look for an ENI to free at all.
    pub fn may_free_enis(
        &self,
        totals: &Totals,
        limits: &NodeLimits,
        targets: &Targets,
        unused_eni: bool,
    ) -> bool {
        self.draining || targets.may_free_enis(&totals.reserving(self.pending), limits, unused_eni)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(total: u32, available: u32, free_prefixes: u32) -> Totals {
        Totals {
            total,
            assigned: total - available,
            available,
            free_prefixes,
        }
    }

    #[test]
    fn pending_pods_take_loose_addresses_before_whole_prefixes() {
        // 2 loose addresses and one whole /28.
        let t = totals(32, 18, 1);
        assert_eq!(t.reserving(2), totals(32, 16, 1));
        assert_eq!(t.reserving(3), totals(32, 15, 0));
        assert_eq!(t.reserving(40), totals(32, 0, 0));
        assert_eq!(t.reserving(0), t);
    }
}
