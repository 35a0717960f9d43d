use crate::datastore::Pool;
use crate::time::Timestamp;

/// What the instance allows, after MAX_ENI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeLimits {
    /// ENIs the node may hold.
    pub max_enis: u32,
    /// Secondary addresses per ENI (IPv4 per ENI minus the ENI's own).
    pub secondary_ips_per_eni: u32,
    /// The pool never grows past this many addresses.
    pub max_pods: u32,
}

/// A step for the daemon to carry out through EC2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Assign `count` more secondary addresses to an ENI.
    AssignIps {
        /// The ENI.
        eni_id: String,
        /// How many.
        count: u32,
    },
}

/// What to do next. This first version takes the first step of the Go CNI's default
/// (WARM_ENI_TARGET=1 on a fresh node): fill the primary ENI with every secondary address it can
/// hold, without going past max pods. The full warm-pool brain replaces it.
pub fn plan(pool: &Pool, limits: &NodeLimits, now: Timestamp) -> Vec<Action> {
    let Some(primary) = pool.enis().find(|e| e.is_primary()) else {
        return Vec::new();
    };
    let held = pool.addresses(&primary.id).count() as u32;
    let total = pool.counts(now).total;
    let room = limits
        .secondary_ips_per_eni
        .saturating_sub(held)
        .min(limits.max_pods.saturating_sub(total));
    if room == 0 {
        return Vec::new();
    }
    vec![Action::AssignIps {
        eni_id: primary.id.clone(),
        count: room,
    }]
}
