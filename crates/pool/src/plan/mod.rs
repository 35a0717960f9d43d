//! The warm-pool controller, pure: from the pool, the instance's limits and the targets, the
//! next thing to ask of EC2.

mod demand;
mod grow;
mod reason;
mod shrink;
mod targets;
mod view;

use std::fmt;
use std::net::Ipv4Addr;
use std::time::Duration;

use ipnetwork::Ipv4Network;

use crate::datastore::Pool;
use crate::time::Timestamp;

pub use reason::{Reason, Standing};
pub use targets::{PoolMode, Targets};

/// Least time between two rounds of giving addresses back (the Go CNI's
/// `decreaseIPPoolInterval`): each round is an EC2 call, and pod churn would otherwise turn
/// into a stream of them.
pub const RELEASE_INTERVAL: Duration = Duration::from_secs(30);

/// An ENI younger than this is never freed (the Go CNI's `minENILifeTime`): it was attached
/// for a reason a moment ago.
pub const MIN_ENI_AGE: Duration = Duration::from_secs(60);

/// What the instance allows, after MAX_ENI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeLimits {
    /// ENIs the node may hold.
    pub max_enis: u32,
    /// Address slots per ENI: IPv4 addresses per ENI minus the ENI's own. Each slot holds a
    /// secondary /32 or a delegated /28 (EC2 counts a prefix as one address against the
    /// limit), so this is also the prefixes per ENI ([`NodeLimits::prefixes_per_eni`]).
    pub secondary_ips_per_eni: u32,
    /// The pool stops growing once it holds this many addresses; with prefix delegation the
    /// last prefix may pass it by up to 15.
    pub max_pods: u32,
}

impl NodeLimits {
    /// /28 prefixes one ENI can hold (IPv4 addresses per ENI minus the ENI's own), in the same
    /// slots as secondary addresses.
    pub fn prefixes_per_eni(&self) -> u32 {
        self.secondary_ips_per_eni
    }
}

/// The moment a plan is made for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanContext {
    /// Now: decides what is cooling and how old ENIs are.
    pub now: Timestamp,
    /// When the daemon last carried out a release ([`Action::ReleaseIps`] or
    /// [`Action::ReleasePrefixes`]); nothing is released again before [`RELEASE_INTERVAL`]
    /// has passed since.
    pub last_release: Option<Timestamp>,
    /// Pods bound to the node that hold no address yet: they will take that many available
    /// addresses, so the pool plans as if they had (and grows for those that find none).
    pub pending: u32,
    /// The node is cordoned: no new ENI, and every available address beyond what the
    /// pending pods need is given back (within the release pacing).
    pub draining: bool,
    /// A subnet the node draws on is scarce: growth for pending pods is exactly what they
    /// need, never rounded up to fill an ENI.
    pub scarce: bool,
    /// EC2 is throttling the node's calls: the pool grows only for pods that find no address,
    /// and the warm targets wait, so that in a busy account the calls that get through serve
    /// pods that wait rather than fill warm pools.
    pub congested: bool,
}

impl PlanContext {
    /// At `now`, with no release yet, no pending pod, not draining, no scarce subnet.
    pub fn at(now: Timestamp) -> Self {
        PlanContext {
            now,
            last_release: None,
            pending: 0,
            draining: false,
            scarce: false,
            congested: false,
        }
    }
}

/// A step for the daemon to carry out through EC2, then report back to the [`Pool`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Assign `count` more secondary addresses to an ENI (then [`Pool::add_addresses`]).
    AssignIps {
        /// The ENI.
        eni_id: String,
        /// How many.
        count: u32,
    },
    /// Delegate `count` more /28 prefixes to an ENI (then [`Pool::add_prefixes`]).
    AssignPrefixes {
        /// The ENI.
        eni_id: String,
        /// How many.
        count: u32,
    },
    /// Create and attach a new ENI pre-loaded with `ips` secondary addresses or `prefixes`
    /// /28 prefixes; exactly one of them is non-zero.
    CreateEni {
        /// Secondary addresses it is created with.
        ips: u32,
        /// Prefixes it is created with.
        prefixes: u32,
    },
    /// Give these free secondary addresses back (take them out of the pool with
    /// [`Pool::remove_address`], not forced, before unassigning them in EC2: an ADD may have
    /// taken one since the plan was made).
    ReleaseIps {
        /// Their ENI.
        eni_id: String,
        /// The addresses.
        ips: Vec<Ipv4Addr>,
    },
    /// Give these wholly free prefixes back (take them out with [`Pool::remove_prefix`], not
    /// forced, before unassigning them in EC2).
    ReleasePrefixes {
        /// Their ENI.
        eni_id: String,
        /// The prefixes.
        prefixes: Vec<Ipv4Network>,
    },
    /// Detach and delete an unused ENI (take it out with [`Pool::remove_eni`], not forced,
    /// before detaching it).
    FreeEni {
        /// The ENI.
        eni_id: String,
    },
}

impl Action {
    /// True for the actions that add addresses.
    pub fn is_growth(&self) -> bool {
        matches!(
            self,
            Action::AssignIps { .. } | Action::AssignPrefixes { .. } | Action::CreateEni { .. }
        )
    }

    /// True for the actions that give addresses back while keeping the ENI.
    pub fn is_release(&self) -> bool {
        matches!(
            self,
            Action::ReleaseIps { .. } | Action::ReleasePrefixes { .. }
        )
    }
}

/// Why the pool cannot grow although it is below target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// It holds as many addresses as the node may run pods.
    MaxPods {
        /// The cap.
        max_pods: u32,
    },
    /// Every ENI is full and no further ENI may be attached.
    MaxEnis {
        /// ENIs held.
        enis: u32,
    },
    /// Every ENI is full and the node is cordoned, so no new ENI is attached.
    Cordoned {
        /// ENIs held.
        enis: u32,
    },
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocked::MaxPods { max_pods } => {
                write!(f, "the node holds addresses for its max pods ({max_pods})")
            }
            // Worded after the Go CNI's line so operators' greps keep working.
            Blocked::MaxEnis { enis } => write!(
                f,
                "the max ENI limit is already reached ({enis} ENIs attached, every one full)"
            ),
            Blocked::Cordoned { enis } => write!(
                f,
                "the node is cordoned, so no ENI is added while it drains ({enis} ENIs attached, \
                 every one full; AWS_MANAGE_ENIS_NON_SCHEDULABLE=true allows it)"
            ),
        }
    }
}

/// The controller's next steps, or why there are none although the pool is low.
///
/// A plan is one of: a single growth action; the release actions of one shrink round (at
/// most one of each kind per ENI: carry them all out, then record the time as
/// [`PlanContext::last_release`]); a single [`Action::FreeEni`]; nothing. Carrying out its
/// first action (or all of them) and planning again converges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// What to ask of EC2, in order.
    pub actions: Vec<Action>,
    /// Set when the pool is below target but cannot grow.
    pub blocked: Option<Blocked>,
}

/// The Go CNI's warm-pool control (`updateIPPoolIfRequired`), one decision per call:
///
/// - [`PoolMode::WarmEni`]: below target while fewer than `warm_eni × secondary_ips_per_eni`
///   addresses are available (with 0: none). Grows by filling an ENI, or by a new ENI with a
///   full ENI's worth; gives back only whole ENIs, when at least `(warm_eni + 1)` ENIs' worth
///   is available.
/// - [`PoolMode::WarmIp`]: short by `max(warm_ip − available, minimum_ip − total)` addresses
///   (whole /28s with delegation); above target by `min(available − warm_ip,
///   total − minimum_ip)`, given back as free /32s and wholly free /28s that fit in it.
/// - [`PoolMode::WarmPrefix`]: below target while fewer than `16 × warm_prefix` addresses are
///   available, then adds `max(1, warm_prefix − free prefixes)` prefixes; above target while
///   more than `warm_prefix` prefixes are wholly free.
///
/// Growth comes first and is one action per plan (one ENI per round, like the Go CNI):
/// existing ENIs with a free slot first (by device number), pre-loaded new ENIs next, never
/// past `max_pods`. Releases come only when not growing, at most every [`RELEASE_INTERVAL`];
/// freeing an ENI (at most one) only when there is nothing else to do.
///
/// Beyond the Go CNI, from what the cluster says ([`PlanContext`]):
/// - `pending` pods count as holding available addresses already: every mode's target is
///   kept on top of them, and those that find no address add to the shortfall, so a burst
///   of pods is met by one call per ENI instead of one per pod.
/// - `congested` (EC2 throttled the node lately): no target but the pending pods, so that the
///   calls a busy account lets through serve pods that wait before anyone's warm pool.
/// - `draining` (cordoned): no target but the pending pods; no new ENI ([`Blocked::Cordoned`]);
///   every other available address and wholly available prefix is given back, and unused
///   ENIs are freed.
///
/// Deliberate differences from the Go CNI:
/// - Addresses in cooldown do not count as available, for growing nor for the surplus, and a
///   prefix counts as free only with all 16 addresses available: none of them can serve an
///   ADD (the Go CNI counts them and starves pods:
///   <https://github.com/aws/amazon-vpc-cni-k8s/issues/2896>).
/// - Cooling addresses, and prefixes holding one, are never given back (the Go CNI gives them
///   back). For the network they are still the previous pod's: other nodes' kube-proxy rules
///   and conntrack entries keep sending its traffic there until the cooldown ends, and an
///   address given back to EC2 may go at once to another ENI in the subnet, whose new owner
///   would receive that traffic. Kept here, a cooling address receives it harmlessly.
/// - Prefix delegation with every target 0 (invalid for the Go CNI) acts as
///   WARM_PREFIX_TARGET=1.
/// - An ENI is freed only if the pool without it still meets every target, so freeing never
///   makes the next plan grow (the Go CNI can free and recreate an ENI with
///   WARM_ENI_TARGET=0); the candidate is the highest device number rather than map order.
/// - Without prefix delegation, /28 members count as the pool's addresses as /32s do (the Go
///   CNI counts only the kind of the current mode). With it, assigned /32s count, and free ones
///   count only on ENIs whose subnet has refused prefixes and not delegated one since;
///   elsewhere they go back whatever the targets say (the Go CNI ignores them and keeps
///   them).
/// - Prefix delegation on a fragmented subnet ([`crate::PrefixFallbacks`]): where EC2 refuses
///   prefixes, growth is by /32s, after every ENI that still gets prefixes and a new ENI with
///   prefixes (the Go CNI fails every ADD instead); under WARM_PREFIX_TARGET, 16 at a time as
///   a prefix would add them.
pub fn plan(pool: &Pool, limits: &NodeLimits, targets: &Targets, ctx: PlanContext) -> Plan {
    explain(pool, limits, targets, ctx).plan
}

/// A plan and why: [`explain`]'s answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explained {
    /// Exactly what [`plan()`] returns for the same arguments.
    pub plan: Plan,
    /// Why.
    pub reason: Reason,
}

/// [`plan()`] with the reason for its decision, taken from the same comparisons (`plan()` is
/// this function without the reason, so the two cannot disagree).
pub fn explain(pool: &Pool, limits: &NodeLimits, targets: &Targets, ctx: PlanContext) -> Explained {
    let view = view::PoolView::new(pool, ctx.now, targets.prefix_delegation);
    let standing = Standing::new(&view.totals, limits, targets);
    let demand = demand::Demand::new(&view.totals, ctx);
    let next_release = ctx.last_release.map(|t| t.after(RELEASE_INTERVAL));
    let may_release = next_release.is_none_or(|t| t <= ctx.now);
    let retiring = view.retiring() as u32;
    // A cordoned node asks EC2 for nothing it does not need.
    let probe = |needs_room: bool| {
        let found = grow::probe(&view, limits, may_release, needs_room).filter(|_| !ctx.draining);
        found.map(|(eni_id, action)| Explained {
            plan: Plan {
                actions: vec![action],
                blocked: None,
            },
            reason: Reason::Probe { standing, eni_id },
        })
    };
    if let Some(short) = demand.shortfall(targets, limits) {
        let plan = demand.growth(&view, limits, targets, short);
        if plan.blocked.is_some()
            && let Some(probe) = probe(true)
        {
            return probe;
        }
        // Blocked with retiring /32s in the slots: giving them back makes room for prefixes.
        if plan.blocked.is_some() && retiring > 0 && may_release {
            return Explained {
                plan: Plan {
                    actions: shrink::releases(&view, None),
                    blocked: None,
                },
                reason: Reason::Retiring {
                    standing,
                    ips: retiring,
                },
            };
        }
        let reason = match plan.blocked {
            Some(blocked) => Reason::Blocked { standing, blocked },
            None => Reason::Low(standing),
        };
        return Explained { plan, reason };
    }
    if let Some(probe) = probe(false) {
        return probe;
    }
    let surplus = demand.surplus(targets).map(|s| match s {
        targets::Surplus::Addresses(n) | targets::Surplus::Prefixes(n) => n,
    });
    if may_release {
        let actions = shrink::releases(&view, demand.surplus(targets));
        if !actions.is_empty() {
            let reason = match surplus {
                Some(surplus) => Reason::Surplus { standing, surplus },
                None => Reason::Retiring {
                    standing,
                    ips: retiring,
                },
            };
            return Explained {
                plan: Plan {
                    actions,
                    blocked: None,
                },
                reason,
            };
        }
    }
    if let Some(eni_id) = shrink::eni_to_free(&view, &demand, limits, targets, ctx.now) {
        return Explained {
            plan: Plan {
                actions: vec![Action::FreeEni {
                    eni_id: eni_id.to_string(),
                }],
                blocked: None,
            },
            reason: Reason::FreeEni {
                standing,
                eni_id: eni_id.to_string(),
            },
        };
    }
    let reason = match (surplus, next_release) {
        (Some(surplus), Some(next)) if !may_release => Reason::ReleaseWait {
            standing,
            surplus,
            next_in: ctx.now.until(next),
        },
        (Some(surplus), _) => Reason::SurplusHeld { standing, surplus },
        (None, _)
            if ctx.congested
                && !ctx.draining
                && targets.shortfall(&demand.effective, limits).is_some() =>
        {
            Reason::Congested(standing)
        }
        (None, _)
            if targets.mode() == PoolMode::WarmEni
                && targets.may_free_enis(&view.totals, limits, false) =>
        {
            Reason::EnisHeld(standing)
        }
        (None, _) => Reason::AtTarget(standing),
    };
    Explained {
        plan: Plan::default(),
        reason,
    }
}
