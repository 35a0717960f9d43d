//! Prefix delegation where EC2 has no free aligned /28: recording its refusals and its
//! delegations in the pool (whose planner then grows by /32s there, see
//! [`pool::PrefixFallbacks`]), telling the operator, and what the node can hold meanwhile.

use cloud::{Ec2, Imds};
use cluster::{ClusterEvent, EventKind, Regarding};
use pool::{ADDRS_PER_PREFIX, PrefixScope};
use tracing::{info, warn};

use super::Daemon;
use crate::durability::DaemonStore;
use crate::host::HostNetwork;

/// Where a scope is, in words.
fn place(scope: PrefixScope<'_>) -> String {
    match scope {
        PrefixScope::Subnet(id) => format!("subnet {id}"),
        PrefixScope::NewEnis => "every subnet a new ENI may go to".to_string(),
    }
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
    /// EC2 found no free /28 for a prefix in `scope` (`reason` is its answer): growth there
    /// goes on with /32s until the backoff ends. The first refusal is a warning and an Event
    /// on the node; refused retries are logged only.
    pub(super) fn prefixes_refused(&self, scope: PrefixScope<'_>, reason: &str) {
        let now = self.clock.now();
        let (first, retry_in) = {
            let mut pool = self.ledger.pool();
            let fallbacks = pool.prefix_fallbacks_mut();
            let first = fallbacks.get(scope).is_none();
            fallbacks.refused(scope, reason, now);
            let retry_at = fallbacks.get(scope).map(|f| f.retry_at);
            (first, retry_at.map_or(0, |t| now.until(t).as_secs()))
        };
        let place = place(scope);
        if !first {
            info!(%reason, retry_in, "prefixes still refused in {place}; growth there stays with /32s");
            return;
        }
        let note = format!(
            "EC2 has no free /28 block for a prefix in {place} ({reason}); pods get /32 \
             addresses there instead, and prefixes are asked for again in {retry_in}s"
        );
        warn!("{note}");
        if let Some(name) = self.steering.view().node_name.clone() {
            self.steering.emit(ClusterEvent {
                regarding: Regarding::Node { name },
                kind: EventKind::Warning,
                reason: "PrefixDelegationFallback".into(),
                action: "AssignPrefixes".into(),
                note,
            });
        }
    }

    /// EC2 delegated a prefix in `scope`: growth there is by prefixes again, and the /32s
    /// taken meanwhile go back as their pods leave.
    pub(super) fn prefixes_delegated(&self, scope: PrefixScope<'_>) {
        let ended = {
            let mut pool = self.ledger.pool();
            let fallbacks = pool.prefix_fallbacks_mut();
            let had = fallbacks.get(scope).is_some();
            fallbacks.delegated(scope);
            had
        };
        if ended {
            info!(
                "EC2 delegates prefixes again in {}; the /32s taken meanwhile go back as their pods leave",
                place(scope)
            );
        }
    }

    /// Pods the node's IPv4 slots can address with prefix delegation, as EC2 lets it now:
    /// what each ENI holds (16 per prefix, 1 per /32), and for each free slot 16, or 1 where
    /// EC2 refused prefixes and has not delegated one since; ENIs not yet attached likewise.
    pub(super) fn prefix_capacity(&self, enis_allowed: u32, per_eni: u32) -> u32 {
        let pool = self.ledger.pool();
        let fallbacks = pool.prefix_fallbacks();
        let per_free_slot = |refused: bool| if refused { 1 } else { ADDRS_PER_PREFIX };
        let mut capacity = 0u32;
        let mut held = 0u32;
        for eni in pool.enis().filter(|e| !pool.is_excluded(&e.id)) {
            held += 1;
            let prefixes = pool.prefixes(&eni.id).count() as u32;
            let slash32s = pool.secondary_count(&eni.id);
            let free = per_eni.saturating_sub(prefixes + slash32s);
            let refused = fallbacks.subnets.contains_key(&eni.subnet_id);
            capacity = capacity
                .saturating_add(prefixes * ADDRS_PER_PREFIX)
                .saturating_add(slash32s)
                .saturating_add(free * per_free_slot(refused));
        }
        let unattached = enis_allowed.saturating_sub(held);
        capacity.saturating_add(
            unattached
                .saturating_mul(per_eni)
                .saturating_mul(per_free_slot(fallbacks.new_enis.is_some())),
        )
    }
}
